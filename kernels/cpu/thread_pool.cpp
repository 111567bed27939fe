#include "thread_pool.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace kvcalc::kernels {

namespace {

/// One call of parallel_for as the workers see it. A job is published under the mutex with a
/// new generation number; a worker copies it under the same mutex, so what it reads is one
/// whole job, never fields of two. The caller returns only after each of the job's helpers has
/// finished it, so a helper always finds its own job still published.
struct Job {
  std::uint64_t generation = 0;
  const ParallelBody* body = nullptr;
  std::uint64_t count = 0;
  unsigned helpers = 0; ///< workers 0 .. helpers − 1 take part; the caller is the other one
  bool stop = false;
};

/// Workers wait for a new job by spinning for a while (a kernel timed in a loop starts its
/// next run within microseconds) and then by sleeping on a condition variable.
class ThreadPool {
public:
  ~ThreadPool() {
    publish(Job{0, nullptr, 0, 0, true});
    for (auto& worker : m_workers) {
      worker.join();
    }
  }

  void run(std::uint64_t count, unsigned threads, const ParallelBody& body) {
    std::lock_guard serial(m_run_mutex);
    threads = std::max(1u, std::min<unsigned>(threads, static_cast<unsigned>(
                                                           std::min<std::uint64_t>(count, 1024))));
    while (m_workers.size() + 1 < threads) {
      // A new worker waits for the job after the current generation.
      auto index = static_cast<unsigned>(m_workers.size());
      m_workers.emplace_back([this, index, seen = m_generation.load()] { work(index, seen); });
    }
    m_next.store(0);
    m_failure = nullptr;
    m_busy.store(threads - 1);
    Job job{0, &body, count, threads - 1, false};
    publish(job);
    drain(job, 0);
    while (m_busy.load() != 0) {
      std::this_thread::yield();
    }
    if (m_failure) {
      std::rethrow_exception(m_failure);
    }
  }

private:
  void publish(Job job) {
    {
      std::lock_guard lock(m_mutex);
      job.generation = m_generation.load() + 1;
      m_job = job;
      m_generation.store(job.generation);
    }
    m_wake.notify_all();
  }

  void drain(const Job& job, unsigned worker) {
    for (std::uint64_t i = m_next.fetch_add(1); i < job.count; i = m_next.fetch_add(1)) {
      try {
        (*job.body)(i, worker);
      } catch (...) {
        std::lock_guard lock(m_mutex);
        if (!m_failure) {
          m_failure = std::current_exception();
        }
      }
    }
  }

  void work(unsigned index, std::uint64_t seen) {
    for (;;) {
      auto spin_until = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
      while (m_generation.load() == seen && std::chrono::steady_clock::now() < spin_until) {
      }
      Job job;
      {
        std::unique_lock lock(m_mutex);
        m_wake.wait(lock, [&] { return m_generation.load() != seen; });
        job = m_job;
      }
      seen = job.generation;
      if (job.stop) {
        return;
      }
      if (index < job.helpers) {
        drain(job, index + 1);
        m_busy.fetch_sub(1);
      }
    }
  }

  std::mutex m_run_mutex; // one job at a time
  std::mutex m_mutex;     // the published job, and the first failure
  std::condition_variable m_wake;
  std::vector<std::thread> m_workers;
  std::atomic<std::uint64_t> m_generation{0};
  Job m_job;
  std::atomic<std::uint64_t> m_next{0};
  std::atomic<unsigned> m_busy{0};
  std::exception_ptr m_failure;
};

} // namespace

void parallel_for(std::uint64_t count, unsigned threads, const ParallelBody& body) {
  static ThreadPool pool;
  pool.run(count, threads, body);
}

} // namespace kvcalc::kernels
