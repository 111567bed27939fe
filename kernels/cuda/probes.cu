// Roofline probes on the GPU: STREAM-style bandwidth, an FMA loop, cuBLAS GEMMs.

#include <kvcalc/kernels/cuda/cuda_kernels.hpp>

#include "cuda_check.cuh"
#include "mla_values.hpp"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <vector>

namespace kvcalc::kernels::cuda {

namespace {

constexpr int k_threads = 256;

int sm_count() {
  int sms = 0;
  KVCALC_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  return sms;
}

__global__ void fill_kernel(float4* a, std::size_t n, float value) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    a[i] = make_float4(value, value, value, value);
  }
}

/// Sum of every element; one partial per block so the result is observable.
__global__ void read_kernel(const float4* __restrict__ a, std::size_t n, float* partial) {
  float sum = 0;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    float4 v = a[i];
    sum += (v.x + v.y) + (v.z + v.w);
  }
  __shared__ float warp_sums[k_threads / 32];
  for (int offset = 16; offset > 0; offset /= 2) {
    sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  }
  if (threadIdx.x % 32 == 0) {
    warp_sums[threadIdx.x / 32] = sum;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    float total = 0;
    for (int w = 0; w < k_threads / 32; ++w) {
      total += warp_sums[w];
    }
    partial[blockIdx.x] = total;
  }
}

/// `passes` sums of the same array in one launch: with an array that fits the L2, the L2's read
/// rate. The loads bypass the L1 (ld.global.cg): each block reads the same elements every pass,
/// and its share of half an L2 would otherwise fit its SM's L1. Each pass adds into the running
/// sum, so no pass can be dropped.
__global__ void reread_kernel(const float4* __restrict__ a, std::size_t n, int passes,
                              float* partial) {
  float sum = 0;
  for (int p = 0; p < passes; ++p) {
    for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
      float4 v = __ldcg(&a[i]);
      sum += (v.x + v.y) + (v.z + v.w);
    }
  }
  if (sum == -1.2345f) {
    partial[blockIdx.x] = sum;
  }
}

__global__ void copy_kernel(const float4* __restrict__ a, float4* __restrict__ b, std::size_t n) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    b[i] = a[i];
  }
}

__global__ void triad_kernel(float4* __restrict__ a, const float4* __restrict__ b,
                             const float4* __restrict__ c, float s, std::size_t n) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    float4 x = b[i];
    float4 y = c[i];
    a[i] = make_float4(x.x + s * y.x, x.y + s * y.y, x.z + s * y.z, x.w + s * y.w);
  }
}

constexpr int k_fma_chains = 8;

/// k_fma_chains independent FMA chains per thread; the result is stored only if it is
/// impossible, so the compiler must keep every FMA.
__global__ void fma_kernel(int iterations, float a, float b, float* sink) {
  float x[k_fma_chains];
  for (int c = 0; c < k_fma_chains; ++c) {
    x[c] = static_cast<float>(threadIdx.x + c);
  }
  for (int i = 0; i < iterations; ++i) {
#pragma unroll
    for (int c = 0; c < k_fma_chains; ++c) {
      x[c] = fmaf(x[c], a, b);
    }
  }
  float sum = 0;
  for (int c = 0; c < k_fma_chains; ++c) {
    sum += x[c];
  }
  if (sum == -1.2345f) {
    sink[0] = sum;
  }
}

template <class T> __global__ void random_kernel(T* out, std::size_t n, std::uint64_t seed) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    float v = bf16_bits_to_float(mla_value_bits(seed, MlaTensor::query, i, 1.0f));
    out[i] = static_cast<T>(v);
  }
}

template <class Launch> Spread timed_seconds(unsigned repeats, Launch&& launch) {
  launch(); // warm-up
  KVCALC_CUDA_CHECK_LAUNCH();
  Event start;
  Event stop;
  std::vector<double> times;
  for (unsigned r = 0; r < repeats; ++r) {
    start.record();
    launch();
    KVCALC_CUDA_CHECK_LAUNCH();
    stop.record();
    times.push_back(seconds_between(start, stop));
  }
  return spread_of(times);
}

} // namespace

BandwidthResult measure_bandwidth(std::uint64_t bytes_per_array, unsigned repeats) {
  std::size_t n = bytes_per_array / sizeof(float4);
  DeviceBuffer<float4> a(n);
  DeviceBuffer<float4> b(n);
  DeviceBuffer<float4> c(n);
  int blocks = sm_count() * 8;
  DeviceBuffer<float> partial(static_cast<std::size_t>(blocks));
  fill_kernel<<<blocks, k_threads>>>(a.get(), n, 1.0f);
  KVCALC_CUDA_CHECK_LAUNCH();
  fill_kernel<<<blocks, k_threads>>>(b.get(), n, 2.0f);
  KVCALC_CUDA_CHECK_LAUNCH();
  fill_kernel<<<blocks, k_threads>>>(c.get(), n, 0.5f);
  KVCALC_CUDA_CHECK_LAUNCH();
  double bytes = static_cast<double>(n * sizeof(float4));
  BandwidthResult r;
  r.read_bytes_per_s = rate_of(bytes, timed_seconds(repeats, [&] {
                                 read_kernel<<<blocks, k_threads>>>(a.get(), n, partial.get());
                               }));
  std::vector<float> sums(static_cast<std::size_t>(blocks));
  KVCALC_CUDA_CHECK(
      cudaMemcpy(sums.data(), partial.get(), partial.bytes(), cudaMemcpyDeviceToHost));
  for (float s : sums) {
    r.checksum += s;
  }
  r.copy_bytes_per_s = rate_of(2 * bytes, timed_seconds(repeats, [&] {
                                 copy_kernel<<<blocks, k_threads>>>(a.get(), b.get(), n);
                               }));
  r.triad_bytes_per_s =
      rate_of(3 * bytes, timed_seconds(repeats, [&] {
                triad_kernel<<<blocks, k_threads>>>(a.get(), b.get(), c.get(), 0.5f, n);
              }));
  KVCALC_CUDA_CHECK(cudaDeviceSynchronize());
  return r;
}

Spread measure_read_bandwidth(std::uint64_t bytes, unsigned repeats) {
  std::size_t n = std::max<std::size_t>(bytes / sizeof(float4), 1);
  DeviceBuffer<float4> a(n);
  int blocks = sm_count() * 8;
  DeviceBuffer<float> partial(static_cast<std::size_t>(blocks));
  fill_kernel<<<blocks, k_threads>>>(a.get(), n, 1.0f);
  KVCALC_CUDA_CHECK_LAUNCH();
  // 4 GiB a launch: milliseconds at L2 rates, so the launch itself does not count.
  int passes = static_cast<int>(std::max<std::size_t>(1, (4ULL << 30) / (n * sizeof(float4))));
  double bytes_read = static_cast<double>(n * sizeof(float4)) * passes;
  Spread r = rate_of(bytes_read, timed_seconds(repeats, [&] {
                       reread_kernel<<<blocks, k_threads>>>(a.get(), n, passes, partial.get());
                     }));
  KVCALC_CUDA_CHECK(cudaDeviceSynchronize());
  return r;
}

Spread measure_fma_flops(unsigned repeats) {
  int blocks = sm_count() * 16;
  int iterations = 1 << 16;
  DeviceBuffer<float> sink(1);
  Spread seconds = timed_seconds(
      repeats, [&] { fma_kernel<<<blocks, k_threads>>>(iterations, 0.999f, 0.001f, sink.get()); });
  double flops = 2.0 * k_fma_chains * iterations * static_cast<double>(blocks) * k_threads;
  return rate_of(flops, seconds);
}

namespace {

/// A cuBLAS handle for one probe, destroyed when it is done.
class CublasHandle {
public:
  CublasHandle() { KVCALC_CUBLAS_CHECK(cublasCreate(&m_handle)); }
  ~CublasHandle() { cublasDestroy(m_handle); }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  [[nodiscard]] cublasHandle_t get() const { return m_handle; }

private:
  cublasHandle_t m_handle = nullptr;
};

} // namespace

GemmRates measure_gemm_flops(std::uint64_t n64, unsigned repeats) {
  int n = static_cast<int>(n64);
  std::size_t count = static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
  CublasHandle owned;
  cublasHandle_t handle = owned.get();
  double flops = 2.0 * static_cast<double>(n) * n * n;
  int blocks = sm_count() * 8;
  GemmRates rates;

  auto run = [&](auto tag, cudaDataType_t type, cublasComputeType_t compute) {
    using T = decltype(tag);
    DeviceBuffer<T> a(count);
    DeviceBuffer<T> b(count);
    DeviceBuffer<T> c(count);
    random_kernel<<<blocks, k_threads>>>(a.get(), count, 11);
    KVCALC_CUDA_CHECK_LAUNCH();
    random_kernel<<<blocks, k_threads>>>(b.get(), count, 12);
    KVCALC_CUDA_CHECK_LAUNCH();
    float alpha = 1.0f;
    float beta = 0.0f;
    return rate_of(flops, timed_seconds(repeats, [&] {
                     KVCALC_CUBLAS_CHECK(cublasGemmEx(
                         handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a.get(), type, n,
                         b.get(), type, n, &beta, c.get(), type, n, compute, CUBLAS_GEMM_DEFAULT));
                   }));
  };
  KVCALC_CUBLAS_CHECK(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));
  rates.bf16 = run(__nv_bfloat16{}, CUDA_R_16BF, CUBLAS_COMPUTE_32F);
  rates.fp16 = run(__half{}, CUDA_R_16F, CUBLAS_COMPUTE_32F);
  // Never TF32 for the fp32 figure: that is a different ceiling.
  KVCALC_CUBLAS_CHECK(cublasSetMathMode(handle, CUBLAS_PEDANTIC_MATH));
  rates.fp32 = run(float{}, CUDA_R_32F, CUBLAS_COMPUTE_32F_PEDANTIC);
  KVCALC_CUDA_CHECK(cudaDeviceSynchronize());
  return rates;
}

Spread time_gemm_bf16(std::uint64_t m64, std::uint64_t n64, std::uint64_t k64, unsigned repeats,
                      std::uint64_t l2_bytes) {
  int m = static_cast<int>(m64);
  int n = static_cast<int>(n64);
  int k = static_cast<int>(k64);
  CublasHandle owned;
  cublasHandle_t handle = owned.get();
  KVCALC_CUBLAS_CHECK(cublasSetMathMode(handle, CUBLAS_DEFAULT_MATH));
  // Enough copies of the weights that each call finds its own out of the L2, as a model's
  // next layer does: twice the L2 in all (and never more than 4 GiB).
  std::size_t weight_elements = static_cast<std::size_t>(n) * static_cast<std::size_t>(k);
  std::uint64_t weight_bytes = weight_elements * sizeof(__nv_bfloat16);
  std::uint64_t most = std::max<std::uint64_t>(1, (4ULL << 30) / weight_bytes);
  std::size_t copies = static_cast<std::size_t>(
      std::min<std::uint64_t>(most, std::max<std::uint64_t>(1, 2 * l2_bytes / weight_bytes + 1)));
  DeviceBuffer<__nv_bfloat16> a(static_cast<std::size_t>(m) * static_cast<std::size_t>(k));
  DeviceBuffer<__nv_bfloat16> b(weight_elements * copies);
  DeviceBuffer<__nv_bfloat16> c(static_cast<std::size_t>(m) * static_cast<std::size_t>(n));
  int blocks = sm_count() * 8;
  random_kernel<<<blocks, k_threads>>>(a.get(), static_cast<std::size_t>(m) * k, 21);
  KVCALC_CUDA_CHECK_LAUNCH();
  random_kernel<<<blocks, k_threads>>>(b.get(), weight_elements * copies, 22);
  KVCALC_CUDA_CHECK_LAUNCH();
  float alpha = 1.0f;
  float beta = 0.0f;
  std::size_t next = 0;
  // C (n × m, column-major) = Bᵀ (n × k) · A (k × m): the weights' rows are the output's.
  Spread seconds = timed_seconds(repeats, [&] {
    const __nv_bfloat16* weights = b.get() + (next++ % copies) * weight_elements;
    KVCALC_CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, weights,
                                     CUDA_R_16BF, k, a.get(), CUDA_R_16BF, k, &beta, c.get(),
                                     CUDA_R_16BF, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  });
  KVCALC_CUDA_CHECK(cudaDeviceSynchronize());
  return seconds;
}

} // namespace kvcalc::kernels::cuda
