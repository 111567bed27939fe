// Device queries and shared helpers of the CUDA kernels.

#include <kvcalc/kernels/cuda/cuda_kernels.hpp>

#include "cuda_check.cuh"

#include <algorithm>
#include <vector>

namespace kvcalc::kernels::cuda {

int device_count() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError(); // no driver or no device: clear the sticky status and report none
    return 0;
  }
  return count;
}

DeviceInfo device_info() {
  cudaDeviceProp p{};
  KVCALC_CUDA_CHECK(cudaGetDeviceProperties(&p, 0));
  DeviceInfo d;
  d.name = p.name;
  d.sm_count = p.multiProcessorCount;
  d.compute_major = p.major;
  d.compute_minor = p.minor;
  d.memory_bytes = p.totalGlobalMem;
  d.l2_bytes = static_cast<std::uint64_t>(p.l2CacheSize);
  int sm_khz = 0;
  int mem_khz = 0;
  int bus = 0;
  KVCALC_CUDA_CHECK(cudaDeviceGetAttribute(&sm_khz, cudaDevAttrClockRate, 0));
  KVCALC_CUDA_CHECK(cudaDeviceGetAttribute(&mem_khz, cudaDevAttrMemoryClockRate, 0));
  KVCALC_CUDA_CHECK(cudaDeviceGetAttribute(&bus, cudaDevAttrGlobalMemoryBusWidth, 0));
  d.sm_clock_hz = sm_khz * 1e3;
  d.memory_clock_hz = mem_khz * 1e3;
  d.memory_bus_bits = bus;
  int driver = 0;
  int runtime = 0;
  KVCALC_CUDA_CHECK(cudaDriverGetVersion(&driver));
  KVCALC_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  auto version = [](int v) {
    return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
  };
  d.driver_version = version(driver);
  d.runtime_version = version(runtime);
  return d;
}

std::uint64_t device_free_bytes() {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  KVCALC_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return free_bytes;
}

void flush_l2(cudaStream_t stream) {
  static DeviceBuffer<unsigned char> scratch;
  if (scratch.size() == 0) {
    int l2 = 0;
    KVCALC_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, 0));
    scratch.resize(std::max<std::size_t>(2 * static_cast<std::size_t>(l2), 8u << 20));
  }
  KVCALC_CUDA_CHECK(cudaMemsetAsync(scratch.get(), 0x5A, scratch.bytes(), stream));
}

} // namespace kvcalc::kernels::cuda
