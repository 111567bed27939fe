#include <kvcalc/kernels/cpu/probes.hpp>

#include "simd.hpp"
#include "thread_pool.hpp"

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include <Eigen/Dense>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace kvcalc::kernels {

namespace {

using Clock = std::chrono::steady_clock;

/// Independent vector sums of the read probe: two load pipes × a few cycles of add latency.
constexpr std::uint64_t k_read_chains = 8;

double since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// Runs body(t) once on each of `threads` pool threads; the seconds until all are done.
template <class Body> double timed_parallel(unsigned threads, Body&& body) {
  auto start = Clock::now();
  parallel_for(threads, threads,
               [&](std::uint64_t t, unsigned /*worker*/) { body(static_cast<unsigned>(t)); });
  return since(start);
}

} // namespace

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

Spread spread_of(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return {values[values.size() / 2], values.front(), values.back(),
          static_cast<unsigned>(values.size())};
}

Spread rate_of(double work, const Spread& seconds) {
  return {work / seconds.median, work / seconds.max, work / seconds.min, seconds.runs};
}

void keep_freed_memory() {
#if defined(__GLIBC__)
  // Blocks up to the largest mmap threshold glibc accepts come from the heap, and a heap top
  // of up to 1 GiB is kept after a free.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

namespace {

/// The leading decimal number of `text`, or none.
std::optional<std::uint64_t> leading_number(std::string_view text) {
  std::uint64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end == text.data()) {
    return std::nullopt;
  }
  return value;
}

/// A byte size as sysfs writes it ("48K", "2048K", "105M"); 0 for what does not parse.
std::uint64_t sysfs_bytes(const std::string& text) {
  std::optional<std::uint64_t> value = leading_number(text);
  if (!value || *value > (1ULL << 40)) {
    return 0;
  }
  char unit = text.back();
  return unit == 'K' ? *value << 10 : unit == 'M' ? *value << 20 : *value;
}

/// How many CPUs a sysfs CPU list names ("0-1", "0,2,4-7"); parts that do not parse count none.
unsigned cpus_in(const std::string& list) {
  unsigned count = 0;
  std::istringstream in(list);
  std::string part;
  while (std::getline(in, part, ',')) {
    auto dash = part.find('-');
    std::optional<std::uint64_t> lo = leading_number(part.substr(0, dash));
    std::optional<std::uint64_t> hi =
        dash == std::string::npos ? lo : leading_number(part.substr(dash + 1));
    if (lo && hi && *hi >= *lo && *hi - *lo < 65536) {
      count += static_cast<unsigned>(*hi - *lo + 1);
    }
  }
  return count;
}

} // namespace

std::vector<CacheLevel> cache_levels(unsigned threads) {
  std::vector<CacheLevel> levels;
  const std::string root = "/sys/devices/system/cpu/cpu0/cache/index";
  for (int index = 0; index < 8; ++index) {
    auto field = [&](const char* name) {
      std::ifstream in(root + std::to_string(index) + "/" + name);
      std::string text;
      in >> text;
      return text;
    };
    std::string type = field("type");
    std::string level = field("level");
    std::string size = field("size");
    if (type.empty()) {
      break;
    }
    if ((type != "Data" && type != "Unified") || level.empty() || size.empty() ||
        level.find_first_not_of("0123456789") != std::string::npos ||
        size.find_first_not_of("0123456789") == 0) {
      continue;
    }
    CacheLevel c;
    c.level = static_cast<unsigned>(std::stoul(level));
    if (c.level < 2) {
      continue; // the L1 holds a few pages: no kernel's working set lives there
    }
    c.bytes_each = sysfs_bytes(size);
    if (c.bytes_each == 0) {
      continue;
    }
    std::string shared = field("shared_cpu_list");
    unsigned sharing = shared.empty() ? 1 : std::max(1u, cpus_in(shared));
    c.instances = std::max(1u, (std::max(1u, threads) + sharing - 1) / sharing);
    levels.push_back(c);
  }
  std::sort(levels.begin(), levels.end(),
            [](const CacheLevel& a, const CacheLevel& b) { return a.level < b.level; });
  return levels;
}

BandwidthResult measure_bandwidth(std::uint64_t bytes_per_array, unsigned threads,
                                  unsigned repeats) {
  std::uint64_t n = bytes_per_array / sizeof(float);
  std::vector<float> a(n, 1.0f);
  std::vector<float> b(n, 2.0f);
  std::vector<float> c(n, 0.5f);
  std::vector<double> partial(threads, 0.0);
  // Each thread's range a whole number of vector groups, so the read loop has no remainder.
  constexpr std::uint64_t k_group = k_read_chains * simd::k_lanes;
  auto range = [&](unsigned t) {
    std::uint64_t chunk = ((n + threads - 1) / threads + k_group - 1) / k_group * k_group;
    return std::pair<std::uint64_t, std::uint64_t>{std::min(n, t * chunk),
                                                   std::min(n, (t + 1) * chunk)};
  };
  BandwidthResult r;
  std::vector<double> reads;
  std::vector<double> copies;
  std::vector<double> triads;
  double bytes = static_cast<double>(n * sizeof(float));
  for (unsigned rep = 0; rep < repeats; ++rep) {
    double read = timed_parallel(threads, [&](unsigned t) {
      auto [lo, hi] = range(t);
      // Independent vector sums, so the loop issues one load per vector and never waits on an
      // addition chain: a scalar loop is instruction-bound on a fast core and reads less than the
      // core streams from DRAM (docs/performance.md, "`kvcalc measure` on the CPU").
      simd::Vec acc[k_read_chains] = {};
      std::uint64_t i = lo;
      for (; i + k_group <= hi; i += k_group) {
        for (std::uint64_t k = 0; k < k_read_chains; ++k) {
          acc[k] += simd::load(a.data() + i + k * simd::k_lanes);
        }
      }
      float sum = 0;
      for (; i < hi; ++i) {
        sum += a[i];
      }
      for (const simd::Vec& v : acc) {
        sum += simd::sum(v);
      }
      partial[t] = sum;
    });
    double copy = timed_parallel(threads, [&](unsigned t) {
      auto [lo, hi] = range(t);
      for (std::uint64_t i = lo; i < hi; ++i) {
        b[i] = a[i];
      }
    });
    double triad = timed_parallel(threads, [&](unsigned t) {
      auto [lo, hi] = range(t);
      for (std::uint64_t i = lo; i < hi; ++i) {
        a[i] = b[i] + 0.5f * c[i];
      }
    });
    reads.push_back(bytes / read);
    copies.push_back(2 * bytes / copy);
    triads.push_back(3 * bytes / triad);
    for (double p : partial) {
      r.checksum += p;
    }
  }
  r.read_bytes_per_s = spread_of(reads);
  r.copy_bytes_per_s = spread_of(copies);
  r.triad_bytes_per_s = spread_of(triads);
  r.checksum += a[n / 2] + b[n / 3];
  return r;
}

namespace {

/// FLOP/s of `step` (one vector multiply-add per chain, `flops_per_step` FLOPs each) over
/// independent chains, enough to cover the latency on every pipe (two pipes × four or five
/// cycles), on all threads for `seconds_per_thread`.
template <class Step>
double chained_flops(unsigned threads, double seconds_per_thread, double flops_per_step,
                     Step step) {
  constexpr int k_chains = 12;
  std::atomic<std::uint64_t> iterations{0};
  std::vector<float> sink(threads, 0.0f);
  double elapsed = timed_parallel(threads, [&](unsigned t) {
    simd::Vec acc[k_chains];
    for (int i = 0; i < k_chains; ++i) {
      acc[i] = simd::splat(1.0f + static_cast<float>(i) * 1e-3f);
    }
    std::uint64_t done = 0;
    auto start = Clock::now();
    while (since(start) < seconds_per_thread) {
      for (int rep = 0; rep < 4096; ++rep) {
        for (int i = 0; i < k_chains; ++i) {
          acc[i] = step(acc[i]);
        }
      }
      done += 4096;
    }
    simd::Vec total{};
    for (const simd::Vec& v : acc) {
      total += v;
    }
    sink[t] = simd::sum(total);
    iterations += done;
  });
  float keep = 0;
  for (float v : sink) {
    keep += v;
  }
  volatile float observed = keep;
  (void)observed;
  return flops_per_step * k_chains * static_cast<double>(iterations.load()) / elapsed;
}

} // namespace

double measure_fma_flops(unsigned threads, double seconds_per_thread) {
  const simd::Vec mul = simd::splat(0.999999f);
  const simd::Vec add = simd::splat(1e-7f);
  return chained_flops(threads, seconds_per_thread, 2.0 * simd::k_lanes,
                       [&](simd::Vec acc) { return acc * mul + add; });
}

double measure_fma_bf16_flops(unsigned threads, double seconds_per_thread) {
#if KVCALC_SIMD_BF16_PAIRS
  // Pairs of 2^-10: each step adds 2^-19 per lane, so the sums stay finite and normal however
  // long the run.
  std::vector<std::uint16_t> bits(2 * simd::k_lanes, 0x3A80);
  const simd::Pairs a = simd::load_pairs(bits.data());
  return chained_flops(threads, seconds_per_thread, 4.0 * simd::k_lanes,
                       [&](simd::Vec acc) { return simd::dot_pairs(acc, a, a); });
#else
  (void)threads;
  (void)seconds_per_thread;
  return 0;
#endif
}

Spread measure_read_bandwidth(std::uint64_t bytes, unsigned threads, unsigned repeats) {
  std::uint64_t n = std::max<std::uint64_t>(bytes / sizeof(float), 1);
  std::vector<float> a(n, 1.0f);
  std::vector<double> partial(threads, 0.0);
  constexpr std::uint64_t k_group = k_read_chains * simd::k_lanes;
  std::uint64_t chunk = ((n + threads - 1) / threads + k_group - 1) / k_group * k_group;
  // Passes enough for 256 MiB a thread a run, so a run of a cache-sized array lasts
  // milliseconds, not the microseconds a thread takes to start; at least 16, so the first pass
  // of a part that another core read last is a small share of a run.
  std::uint64_t passes = std::max<std::uint64_t>(16, (256ULL << 20) / (chunk * sizeof(float)));
  auto pass = [&](unsigned t, std::uint64_t count) {
    std::uint64_t lo = std::min(n, t * chunk);
    std::uint64_t hi = std::min(n, (t + 1) * chunk);
    float sum = 0;
    for (std::uint64_t p = 0; p < count; ++p) {
      simd::Vec acc[k_read_chains] = {};
      std::uint64_t i = lo;
      for (; i + k_group <= hi; i += k_group) {
        for (std::uint64_t k = 0; k < k_read_chains; ++k) {
          acc[k] += simd::load(a.data() + i + k * simd::k_lanes);
        }
      }
      for (; i < hi; ++i) {
        sum += a[i];
      }
      for (const simd::Vec& v : acc) {
        sum += simd::sum(v);
      }
    }
    partial[t] += sum;
  };
  // One untimed pass puts each thread's part in its own caches.
  (void)timed_parallel(threads, [&](unsigned t) { pass(t, 1); });
  std::vector<double> seconds;
  for (unsigned rep = 0; rep < repeats; ++rep) {
    seconds.push_back(timed_parallel(threads, [&](unsigned t) { pass(t, passes); }));
  }
  volatile double observed = partial[0];
  (void)observed;
  return rate_of(static_cast<double>(n * sizeof(float)) * static_cast<double>(passes),
                 spread_of(seconds));
}

Spread measure_gemm_flops(const GemmShape& shape, unsigned threads, unsigned repeats) {
  using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  auto m = static_cast<Eigen::Index>(shape.m);
  auto k = static_cast<Eigen::Index>(shape.k);
  auto n = static_cast<Eigen::Index>(shape.n);
  // One independent product per thread, A · Bᵀ with both row-major (the naive kernel's
  // decompression: latent rows times a head's weight rows): all cores busy, no shared output.
  std::vector<Matrix> a(threads, Matrix::Random(m, k));
  std::vector<Matrix> b(threads, Matrix::Random(n, k));
  std::vector<Matrix> c(threads, Matrix::Zero(m, n));
  std::vector<double> seconds;
  (void)timed_parallel(threads, [&](unsigned t) { c[t].noalias() = a[t] * b[t].transpose(); });
  for (unsigned rep = 0; rep < repeats; ++rep) {
    seconds.push_back(
        timed_parallel(threads, [&](unsigned t) { c[t].noalias() = a[t] * b[t].transpose(); }));
  }
  volatile float observed = c[0](0, 0);
  (void)observed;
  return rate_of(2.0 * static_cast<double>(shape.m) * static_cast<double>(shape.k) *
                     static_cast<double>(shape.n) * threads,
                 spread_of(seconds));
}

} // namespace kvcalc::kernels
