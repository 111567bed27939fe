#pragma once
// Checked CUDA and cuBLAS calls, and an event timer. A failed call throws std::runtime_error
// with the call, its location and the runtime's explanation.

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace kvcalc::kernels::cuda {

/// Throws for a failed CUDA call. The runtime's last-error state is reset first
/// (cudaGetLastError), so the failure is reported once, here, and not again by the next checked
/// launch or call. A sticky error (a fault inside a kernel) cannot be reset: every later call
/// reports it, as it must, since the context is lost.
[[noreturn]] inline void throw_cuda(cudaError_t e, const char* call, const char* file, int line) {
  static_cast<void>(cudaGetLastError());
  throw std::runtime_error(std::string("CUDA call failed: ") + call + " at " + file + ":" +
                           std::to_string(line) + ": " + cudaGetErrorName(e) + " (" +
                           cudaGetErrorString(e) + ")");
}

[[noreturn]] inline void throw_cublas(cublasStatus_t s, const char* call, const char* file,
                                      int line) {
  throw std::runtime_error(std::string("cuBLAS call failed: ") + call + " at " + file + ":" +
                           std::to_string(line) + ": " + cublasGetStatusName(s) + " (" +
                           cublasGetStatusString(s) + ")");
}

} // namespace kvcalc::kernels::cuda

#define KVCALC_CUDA_CHECK(call)                                                                    \
  do {                                                                                             \
    cudaError_t kvcalc_status_ = (call);                                                           \
    if (kvcalc_status_ != cudaSuccess) {                                                           \
      ::kvcalc::kernels::cuda::throw_cuda(kvcalc_status_, #call, __FILE__, __LINE__);              \
    }                                                                                              \
  } while (0)

#define KVCALC_CUBLAS_CHECK(call)                                                                  \
  do {                                                                                             \
    cublasStatus_t kvcalc_status_ = (call);                                                        \
    if (kvcalc_status_ != CUBLAS_STATUS_SUCCESS) {                                                 \
      ::kvcalc::kernels::cuda::throw_cublas(kvcalc_status_, #call, __FILE__, __LINE__);            \
    }                                                                                              \
  } while (0)

/// After a launch: a bad configuration shows at once, a fault at the next synchronisation.
#define KVCALC_CUDA_CHECK_LAUNCH() KVCALC_CUDA_CHECK(cudaGetLastError())

namespace kvcalc::kernels::cuda {

/// A device allocation that frees itself.
template <class T> class DeviceBuffer {
public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t count) { resize(count); }
  ~DeviceBuffer() { release(); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : m_ptr(o.m_ptr), m_count(o.m_count) {
    o.m_ptr = nullptr;
    o.m_count = 0;
  }
  void resize(std::size_t count) {
    release();
    if (count > 0) {
      KVCALC_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&m_ptr), count * sizeof(T)));
    }
    m_count = count;
  }
  [[nodiscard]] T* get() const { return m_ptr; }
  [[nodiscard]] std::size_t size() const { return m_count; }
  [[nodiscard]] std::size_t bytes() const { return m_count * sizeof(T); }

private:
  void release() noexcept {
    if (m_ptr != nullptr) {
      cudaFree(m_ptr);
      m_ptr = nullptr;
    }
  }
  T* m_ptr = nullptr;
  std::size_t m_count = 0;
};

/// A CUDA event that destroys itself.
class Event {
public:
  Event() { KVCALC_CUDA_CHECK(cudaEventCreate(&m_event)); }
  ~Event() { cudaEventDestroy(m_event); }
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(cudaStream_t stream = nullptr) {
    KVCALC_CUDA_CHECK(cudaEventRecord(m_event, stream));
  }
  [[nodiscard]] cudaEvent_t get() const { return m_event; }

private:
  cudaEvent_t m_event{};
};

/// Seconds between two recorded events (synchronises on the second).
inline double seconds_between(const Event& start, const Event& stop) {
  KVCALC_CUDA_CHECK(cudaEventSynchronize(stop.get()));
  float ms = 0;
  KVCALC_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
  return static_cast<double>(ms) * 1e-3;
}

/// Overwrites a buffer twice the size of the L2, so the next kernel starts with a cold cache.
void flush_l2(cudaStream_t stream = nullptr);

} // namespace kvcalc::kernels::cuda
