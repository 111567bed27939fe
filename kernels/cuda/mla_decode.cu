// MLA decode on the GPU, both strategies (cuda_kernels.hpp): data generated in place, cuBLAS
// for the projections and the naive path's GEMMs, mla_attention.cuh (or, on Hopper,
// mla_attention_wgmma.cuh) for the absorbed core.

#include <kvcalc/kernels/cuda/cuda_kernels.hpp>

#include "cuda_check.cuh"
#include "mla_attention.cuh"
#include "mla_attention_wgmma.cuh"
#include "mla_values.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>

namespace kvcalc::kernels::cuda {

namespace {

using bf16 = __nv_bfloat16;

constexpr int k_threads = 256;
constexpr std::uint16_t k_bf16_nan = 0x7FC0;

/// Half-width of the uniform distribution with unit variance times `scale`.
float half_width(double scale) {
  return static_cast<float>(std::sqrt(3.0) * scale);
}

__global__ void generate_kernel(std::uint16_t* out, std::size_t n, std::uint64_t seed,
                                MlaTensor tensor, float half) {
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    out[i] = mla_value_bits(seed, tensor, i, half);
  }
}

/// The latent cache: logical row (b, token) of padded length pages·block lands in its page;
/// rows past the context are NaN.
__global__ void generate_cache_kernel(std::uint16_t* cache, const std::int32_t* table,
                                      std::size_t batch, std::size_t pages_per_sequence,
                                      std::size_t block, std::size_t context, std::uint64_t seed,
                                      float half) {
  std::size_t padded = pages_per_sequence * block;
  std::size_t n = batch * padded * k_key;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    std::size_t d = i % k_key;
    std::size_t row = i / k_key;
    std::size_t b = row / padded;
    std::size_t token = row % padded;
    std::size_t page = static_cast<std::size_t>(table[b * pages_per_sequence + token / block]);
    std::size_t dst = (page * block + token % block) * k_key + d;
    cache[dst] = token < context ? mla_value_bits(seed, MlaTensor::cache, i, half) : k_bf16_nan;
  }
}

/// The naive path's first step: each sequence's latent rows, in token order.
__global__ void gather_kernel(const bf16* __restrict__ cache, const std::int32_t* table,
                              bf16* __restrict__ latent, std::size_t first_sequence,
                              std::size_t sequences, std::size_t pages_per_sequence,
                              std::size_t block, std::size_t context) {
  constexpr std::size_t chunks = k_key / 8;
  std::size_t n = sequences * context * chunks;
  for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x) {
    std::size_t c = i % chunks;
    std::size_t row = i / chunks;
    std::size_t b = first_sequence + row / context;
    std::size_t token = row % context;
    std::size_t page = static_cast<std::size_t>(table[b * pages_per_sequence + token / block]);
    const uint4* src =
        reinterpret_cast<const uint4*>(cache + (page * block + token % block) * k_key) + c;
    reinterpret_cast<uint4*>(latent + row * k_key)[c] = *src;
  }
}

/// Softmax of each row of scores (scaled) into bf16 probabilities; one block per row.
__global__ void __launch_bounds__(k_threads)
    softmax_kernel(const float* __restrict__ scores, bf16* __restrict__ probs, std::size_t length,
                   float scale_log2) {
  const float* in = scores + blockIdx.x * length;
  bf16* out = probs + blockIdx.x * length;
  __shared__ float reduce[k_threads / 32];
  auto block_reduce = [&](float v, bool is_max) {
    for (int offset = 16; offset > 0; offset /= 2) {
      float other = __shfl_xor_sync(0xffffffffu, v, offset);
      v = is_max ? fmaxf(v, other) : v + other;
    }
    __syncthreads();
    if (threadIdx.x % 32 == 0) {
      reduce[threadIdx.x / 32] = v;
    }
    __syncthreads();
    v = reduce[0];
    for (int w = 1; w < k_threads / 32; ++w) {
      v = is_max ? fmaxf(v, reduce[w]) : v + reduce[w];
    }
    return v;
  };
  float peak = -INFINITY;
  for (std::size_t j = threadIdx.x; j < length; j += k_threads) {
    peak = fmaxf(peak, in[j]);
  }
  peak = block_reduce(peak, true) * scale_log2;
  float sum = 0.f;
  for (std::size_t j = threadIdx.x; j < length; j += k_threads) {
    sum += exp2f(fmaf(in[j], scale_log2, -peak));
  }
  float inv = 1.f / block_reduce(sum, false);
  for (std::size_t j = threadIdx.x; j < length; j += k_threads) {
    out[j] = __float2bfloat16_rn(exp2f(fmaf(in[j], scale_log2, -peak)) * inv);
  }
}

int grid_for(std::size_t n) {
  return static_cast<int>(std::min<std::size_t>((n + k_threads - 1) / k_threads, 65535u * 8u));
}

template <int RowGroups> void prepare_attention_kernel() {
  KVCALC_CUDA_CHECK(cudaFuncSetAttribute(mla_attention_split_kernel<RowGroups>,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(mla_attention_smem_bytes(RowGroups))));
}

template <int RowGroups> int attention_blocks_per_sm() {
  prepare_attention_kernel<RowGroups>();
  int blocks = 0;
  KVCALC_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &blocks, mla_attention_split_kernel<RowGroups>, RowGroups * k_col_warps * 32,
      mla_attention_smem_bytes(RowGroups)));
  if (blocks < 1) {
    throw std::runtime_error("MLA attention kernel: does not fit on this GPU's multiprocessors "
                             "(shared memory " +
                             std::to_string(mla_attention_smem_bytes(RowGroups)) + " B)");
  }
  return blocks;
}

int wgmma_blocks_per_sm() {
  const int smem = static_cast<int>(mla_attention_wgmma_smem_bytes());
  KVCALC_CUDA_CHECK(cudaFuncSetAttribute(mla_attention_wgmma_kernel,
                                         cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  int blocks = 0;
  KVCALC_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
      &blocks, mla_attention_wgmma_kernel, k_wg_threads, static_cast<std::size_t>(smem)));
  if (blocks < 1) {
    throw std::runtime_error("MLA wgmma attention kernel: does not fit on this GPU's "
                             "multiprocessors (shared memory " +
                             std::to_string(smem) + " B)");
  }
  return blocks;
}

/// KV splits for `base` CTAs per split over `tiles` tiles on `slots` resident CTAs: time of n
/// splits ∝ waves × tiles per CTA, plus 1% per split for the combine step (which reads every
/// split's partial output); the cheapest n, at least `min_tiles` tiles each.
int choose_splits(int tiles, long long base, long long slots, int min_tiles) {
  const int max_splits = std::max(1, std::min(tiles / min_tiles, k_max_splits));
  auto cost = [&](int n) {
    long long waves = (base * n + slots - 1) / slots;
    return static_cast<double>(waves * ((tiles + n - 1) / n)) * (1.0 + 0.01 * n);
  };
  int wanted = 1;
  for (int n = 2; n <= max_splits; ++n) {
    if (cost(n) < cost(wanted)) {
      wanted = n;
    }
  }
  return wanted;
}

} // namespace

struct MlaDecodeCuda::State {
  MlaShape shape;
  std::uint64_t seed = 0;
  AbsorbedKernel kernel = AbsorbedKernel::mma_sync;
  int tile_tokens = k_tile_tokens; ///< the absorbed kernel's tile
  std::size_t pages = 0;           ///< per sequence
  std::size_t rows = 0;            ///< query × heads
  int row_groups = 1;              ///< mma_sync: groups of 16 rows per CTA
  int row_blocks = 1;
  int splits = 1;
  int tiles_per_split = 1;
  float scale_log2 = 0;
  cublasHandle_t cublas = nullptr;

  DeviceBuffer<bf16> q;     ///< [batch][query][heads][192]
  DeviceBuffer<bf16> cache; ///< [pages][block][576]
  DeviceBuffer<std::int32_t> table;
  DeviceBuffer<bf16> w_uk; ///< [heads][128][512]
  DeviceBuffer<bf16> w_uv; ///< [heads][128][512]
  DeviceBuffer<bf16> out;  ///< [batch][query][heads][128]

  // Absorbed.
  DeviceBuffer<bf16> q_latent; ///< [batch][rows][576]
  DeviceBuffer<float> partial_o;
  DeviceBuffer<float2> partial_ml;
  DeviceBuffer<bf16> o_latent; ///< [batch][rows][512]

  // Naive, per chunk of sequences.
  std::size_t chunk = 1;
  DeviceBuffer<bf16> w_kv;    ///< [heads][256][512]: W_UK rows, then W_UV rows
  DeviceBuffer<bf16> latent;  ///< [chunk][context][576]
  DeviceBuffer<bf16> kv;      ///< [chunk][context][heads][256]: K nope, then V
  DeviceBuffer<float> scores; ///< [chunk][query][heads][context]
  DeviceBuffer<bf16> probs;   ///< likewise
  DeviceBuffer<const void*> score_a, score_b, pv_a, pv_b;
  DeviceBuffer<void*> score_c, pv_c;

  ~State() {
    if (cublas != nullptr) {
      cublasDestroy(cublas);
    }
  }
};

double MlaDecodeCuda::device_bytes(const MlaShape& shape) {
  const double B = static_cast<double>(shape.batch);
  const double H = static_cast<double>(shape.heads);
  const double S = static_cast<double>(shape.query);
  const double T = static_cast<double>(shape.context);
  const double pages = std::ceil(T / static_cast<double>(shape.block));
  const double rows = S * H;
  const double b16 = sizeof(bf16);
  double inputs =
      B * S * H * 192 * b16 + B * pages * static_cast<double>(shape.block) * k_key * b16 +
      B * pages * sizeof(std::int32_t) + 2 * H * 128 * k_latent * b16 + B * S * H * 128 * b16;
  double absorbed = B * rows * k_key * b16 + k_max_splits * B * rows * k_latent * sizeof(float) +
                    k_max_splits * B * rows * sizeof(float2) + B * rows * k_latent * b16;
  double naive = H * 256 * k_latent * b16 + T * k_key * b16 + T * H * 256 * b16 +
                 S * H * T * (sizeof(float) + b16);
  return inputs + absorbed + naive;
}

bool MlaDecodeCuda::wgmma_supported() {
  static const bool supported = [] {
    int major = 0;
    int minor = 0;
    KVCALC_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    KVCALC_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0));
    if (major != 9 || minor != 0) {
      return false;
    }
    DeviceBuffer<int> flag;
    flag.resize(1);
    sm90a_code_kernel<<<1, 1>>>(flag.get());
    cudaError_t launched = cudaGetLastError();
    if (launched == cudaErrorNoKernelImageForDevice) {
      return false; // the build has no code for this GPU at all
    }
    KVCALC_CUDA_CHECK(launched);
    int value = 0;
    KVCALC_CUDA_CHECK(cudaMemcpy(&value, flag.get(), sizeof(int), cudaMemcpyDeviceToHost));
    return value == 1;
  }();
  return supported;
}

MlaDecodeCuda::MlaDecodeCuda(const MlaShape& shape, std::uint64_t seed, AbsorbedKernel kernel,
                             int splits)
    : m_state(std::make_unique<State>()) {
  if (shape.d_c != k_latent || shape.d_r != k_key - k_latent || shape.d_nope != 128 ||
      shape.d_v != 128) {
    throw std::invalid_argument("MLA decode on CUDA: the kernels are built for DeepSeek's "
                                "dimensions (d_c 512, d_R 64, d_nope 128, d_v 128)");
  }
  if (shape.batch == 0 || shape.heads == 0 || shape.query == 0 || shape.context == 0 ||
      shape.block == 0) {
    throw std::invalid_argument("MLA decode on CUDA: every dimension must be at least 1");
  }
  if (shape.context > std::numeric_limits<int>::max() / 2 ||
      shape.batch > std::numeric_limits<int>::max() / 2 || shape.query * shape.heads > 65535) {
    throw std::invalid_argument("MLA decode on CUDA: shape too large for one launch");
  }
  if (splits < 0 || splits > k_max_splits) {
    throw std::invalid_argument("MLA decode on CUDA: KV splits must be 0 (chosen for the GPU) "
                                "to " +
                                std::to_string(k_max_splits) + ", not " + std::to_string(splits));
  }
  if (kernel == AbsorbedKernel::wgmma && !wgmma_supported()) {
    throw std::invalid_argument("MLA decode on CUDA: the wgmma kernel needs a compute "
                                "capability 9.0 GPU and a build with sm_90a code "
                                "(CMAKE_CUDA_ARCHITECTURES including 90a)");
  }
  State& s = *m_state;
  s.shape = shape;
  s.seed = seed;
  s.kernel = kernel;
  s.tile_tokens = kernel == AbsorbedKernel::wgmma ? k_wg_tile_tokens : k_tile_tokens;
  s.pages = (shape.context + shape.block - 1) / shape.block;
  s.rows = shape.query * shape.heads;
  double scale = shape.softmax_scale > 0
                     ? shape.softmax_scale
                     : 1.0 / std::sqrt(static_cast<double>(shape.d_nope + shape.d_r));
  s.scale_log2 = static_cast<float>(scale * 1.4426950408889634);
  const std::size_t B = shape.batch;
  const std::size_t H = shape.heads;
  const std::size_t S = shape.query;
  const std::size_t T = shape.context;
  KVCALC_CUBLAS_CHECK(cublasCreate(&s.cublas));

  s.q.resize(B * S * H * 192);
  s.cache.resize(B * s.pages * shape.block * k_key);
  s.table.resize(B * s.pages);
  s.w_uk.resize(H * 128 * k_latent);
  s.w_uv.resize(H * 128 * k_latent);
  s.out.resize(B * S * H * 128);

  std::vector<std::int32_t> table(B * s.pages);
  std::iota(table.begin(), table.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(table.begin(), table.end(), rng);
  KVCALC_CUDA_CHECK(
      cudaMemcpy(s.table.get(), table.data(), s.table.bytes(), cudaMemcpyHostToDevice));
  auto generate = [&](DeviceBuffer<bf16>& buffer, MlaTensor tensor, double sd) {
    generate_kernel<<<grid_for(buffer.size()), k_threads>>>(
        reinterpret_cast<std::uint16_t*>(buffer.get()), buffer.size(), seed, tensor,
        half_width(sd));
    KVCALC_CUDA_CHECK_LAUNCH();
  };
  generate(s.q, MlaTensor::query, 1.0);
  generate(s.w_uk, MlaTensor::w_uk, 1.0 / std::sqrt(512.0));
  generate(s.w_uv, MlaTensor::w_uv, 1.0 / std::sqrt(512.0));
  generate_cache_kernel<<<grid_for(s.cache.size()), k_threads>>>(
      reinterpret_cast<std::uint16_t*>(s.cache.get()), s.table.get(), B, s.pages, shape.block, T,
      seed, half_width(1.0));
  KVCALC_CUDA_CHECK_LAUNCH();

  // Absorbed: rows per CTA (mma_sync: groups of 16, four only where their shared memory fits;
  // wgmma: 64), and the number of KV splits that best fills whole waves of the GPU.
  if (shape.block % static_cast<std::size_t>(s.tile_tokens) != 0) {
    throw std::invalid_argument("MLA decode on CUDA: the page size must be a multiple of " +
                                std::to_string(s.tile_tokens) + " tokens");
  }
  int per_sm = 1;
  if (kernel == AbsorbedKernel::wgmma) {
    s.row_blocks = static_cast<int>((s.rows + k_wg_rows - 1) / k_wg_rows);
    per_sm = wgmma_blocks_per_sm();
  } else {
    int smem_limit = 0;
    KVCALC_CUDA_CHECK(
        cudaDeviceGetAttribute(&smem_limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    s.row_groups = s.rows <= 16 ? 1 : s.rows <= 32 ? 2 : 4;
    if (s.row_groups == 4 && mla_attention_smem_bytes(4) > static_cast<std::size_t>(smem_limit)) {
      s.row_groups = 2;
    }
    s.row_blocks = static_cast<int>((s.rows + 16 * s.row_groups - 1) / (16 * s.row_groups));
    per_sm = s.row_groups == 1   ? attention_blocks_per_sm<1>()
             : s.row_groups == 2 ? attention_blocks_per_sm<2>()
                                 : attention_blocks_per_sm<4>();
  }
  int sms = 0;
  KVCALC_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int tiles = static_cast<int>((T + s.tile_tokens - 1) / s.tile_tokens);
  // At least 128 tokens per split, unless the caller asks for a split count (at most one per
  // tile).
  const int wanted = splits > 0 ? std::min(splits, tiles)
                                : choose_splits(tiles, static_cast<long long>(B) * s.row_blocks,
                                                static_cast<long long>(sms) * per_sm,
                                                std::max(1, 128 / s.tile_tokens));
  s.tiles_per_split = (tiles + wanted - 1) / wanted;
  s.splits = (tiles + s.tiles_per_split - 1) / s.tiles_per_split;
  s.q_latent.resize(B * s.rows * k_key);
  s.partial_o.resize(static_cast<std::size_t>(s.splits) * B * s.rows * k_latent);
  s.partial_ml.resize(static_cast<std::size_t>(s.splits) * B * s.rows);
  s.o_latent.resize(B * s.rows * k_latent);

  // Naive: as many sequences per chunk as a workspace of a quarter of free memory (at most
  // 16 GiB) holds.
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  KVCALC_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  std::size_t per_sequence = T * k_key * sizeof(bf16) + T * H * 256 * sizeof(bf16) +
                             S * H * T * (sizeof(float) + sizeof(bf16));
  std::size_t budget = std::min<std::size_t>(free_bytes / 4, 16ULL << 30);
  s.chunk = std::clamp<std::size_t>(budget / per_sequence, 1, B);
  s.w_kv.resize(H * 256 * k_latent);
  std::size_t head_bytes = 128 * k_latent * sizeof(bf16);
  KVCALC_CUDA_CHECK(cudaMemcpy2D(s.w_kv.get(), 2 * head_bytes, s.w_uk.get(), head_bytes, head_bytes,
                                 H, cudaMemcpyDeviceToDevice));
  KVCALC_CUDA_CHECK(cudaMemcpy2D(s.w_kv.get() + 128 * k_latent, 2 * head_bytes, s.w_uv.get(),
                                 head_bytes, head_bytes, H, cudaMemcpyDeviceToDevice));
  s.latent.resize(s.chunk * T * k_key);
  s.kv.resize(s.chunk * T * H * 256);
  s.scores.resize(s.chunk * S * H * T);
  s.probs.resize(s.chunk * S * H * T);

  // Pointer arrays of the batched GEMMs: "local" ones index the chunk's workspaces and repeat
  // for every chunk; the query and output ones index the whole batch.
  std::vector<const void*> sa(s.chunk * H), pa(s.chunk * H), pb(s.chunk * H), sb(B * H);
  std::vector<void*> sc(s.chunk * H), pc(B * H);
  for (std::size_t b = 0; b < s.chunk; ++b) {
    for (std::size_t h = 0; h < H; ++h) {
      std::size_t i = b * H + h;
      sa[i] = s.kv.get() + b * T * H * 256 + h * 256;
      sc[i] = s.scores.get() + (b * S * H + h) * T;
      pa[i] = s.kv.get() + b * T * H * 256 + h * 256 + 128;
      pb[i] = s.probs.get() + (b * S * H + h) * T;
    }
  }
  for (std::size_t b = 0; b < B; ++b) {
    for (std::size_t h = 0; h < H; ++h) {
      sb[b * H + h] = s.q.get() + (b * S * H + h) * 192;
      pc[b * H + h] = s.out.get() + (b * S * H + h) * 128;
    }
  }
  auto upload = [](auto& dst, const auto& src) {
    dst.resize(src.size());
    KVCALC_CUDA_CHECK(cudaMemcpy(dst.get(), src.data(), dst.bytes(), cudaMemcpyHostToDevice));
  };
  upload(s.score_a, sa);
  upload(s.score_b, sb);
  upload(s.score_c, sc);
  upload(s.pv_a, pa);
  upload(s.pv_b, pb);
  upload(s.pv_c, pc);
  KVCALC_CUDA_CHECK(cudaDeviceSynchronize());
}

MlaDecodeCuda::~MlaDecodeCuda() = default;

int MlaDecodeCuda::splits() const {
  return m_state->splits;
}

MlaInputs MlaDecodeCuda::first_sequence() const {
  const State& s = *m_state;
  MlaShape shape = s.shape;
  shape.batch = 1;
  MlaInputs in;
  in.shape = shape;
  auto value = [&](MlaTensor tensor, std::size_t i, double sd) {
    return bf16_bits_to_float(mla_value_bits(s.seed, tensor, i, half_width(sd)));
  };
  in.q.resize(shape.query * shape.heads * 192);
  for (std::size_t i = 0; i < in.q.size(); ++i) {
    in.q[i] = value(MlaTensor::query, i, 1.0);
  }
  in.w_uk.resize(shape.heads * 128 * k_latent);
  in.w_uv.resize(shape.heads * 128 * k_latent);
  for (std::size_t i = 0; i < in.w_uk.size(); ++i) {
    in.w_uk[i] = value(MlaTensor::w_uk, i, 1.0 / std::sqrt(512.0));
    in.w_uv[i] = value(MlaTensor::w_uv, i, 1.0 / std::sqrt(512.0));
  }
  std::size_t padded = s.pages * shape.block;
  in.cache.resize(padded * k_key);
  for (std::size_t i = 0; i < in.cache.size(); ++i) {
    in.cache[i] = i / k_key < shape.context ? value(MlaTensor::cache, i, 1.0)
                                            : std::numeric_limits<float>::quiet_NaN();
  }
  in.block_table.resize(s.pages);
  std::iota(in.block_table.begin(), in.block_table.end(), 0u);
  return in;
}

std::vector<float> MlaDecodeCuda::output() const {
  std::vector<std::uint16_t> bits(m_state->out.size());
  KVCALC_CUDA_CHECK(
      cudaMemcpy(bits.data(), m_state->out.get(), m_state->out.bytes(), cudaMemcpyDeviceToHost));
  std::vector<float> out(bits.size());
  std::transform(bits.begin(), bits.end(), out.begin(), bf16_bits_to_float);
  return out;
}

MlaRunTimes MlaDecodeCuda::run(bool naive, bool flush_l2) {
  State& s = *m_state;
  const int B = static_cast<int>(s.shape.batch);
  const int H = static_cast<int>(s.shape.heads);
  const int S = static_cast<int>(s.shape.query);
  const int T = static_cast<int>(s.shape.context);
  const float one = 1.0f;
  const float zero = 0.0f;
  KVCALC_CUDA_CHECK(cudaMemset(s.out.get(), 0xFF, s.out.bytes())); // NaN until written
  if (flush_l2) {
    cuda::flush_l2();
  }
  std::vector<std::unique_ptr<Event>> events;
  std::vector<std::string> names;
  auto mark = [&](const char* phase) {
    events.push_back(std::make_unique<Event>());
    events.back()->record();
    names.emplace_back(phase);
  };

  if (!naive) {
    mark("q_absorb");
    KVCALC_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        s.cublas, CUBLAS_OP_N, CUBLAS_OP_N, k_latent, B * S, 128, &one, s.w_uk.get(), CUDA_R_16BF,
        k_latent, 128LL * k_latent, s.q.get(), CUDA_R_16BF, H * 192, 192, &zero, s.q_latent.get(),
        CUDA_R_16BF, H * k_key, k_key, H, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    KVCALC_CUDA_CHECK(cudaMemcpy2DAsync(
        s.q_latent.get() + k_latent, k_key * sizeof(bf16), s.q.get() + 128, 192 * sizeof(bf16),
        64 * sizeof(bf16), static_cast<std::size_t>(B) * S * H, cudaMemcpyDeviceToDevice));
    mark("attention");
    MlaAttentionParams p;
    p.q = s.q_latent.get();
    p.cache = s.cache.get();
    p.block_table = s.table.get();
    p.partial_o = s.partial_o.get();
    p.partial_ml = s.partial_ml.get();
    p.batch = B;
    p.rows = static_cast<int>(s.rows);
    p.context = T;
    p.block = static_cast<int>(s.shape.block);
    p.pages_per_sequence = static_cast<int>(s.pages);
    p.tiles_per_split = s.tiles_per_split;
    p.splits = s.splits;
    p.scale_log2 = s.scale_log2;
    if (s.kernel == AbsorbedKernel::wgmma) {
      // Row blocks innermost: the CTAs that read the same latent rows run side by side.
      dim3 grid(static_cast<unsigned>(s.row_blocks), static_cast<unsigned>(s.splits),
                static_cast<unsigned>(B));
      mla_attention_wgmma_kernel<<<grid, k_wg_threads, mla_attention_wgmma_smem_bytes()>>>(p);
    } else {
      dim3 grid(static_cast<unsigned>(s.splits), static_cast<unsigned>(s.row_blocks),
                static_cast<unsigned>(B));
      auto launch = [&](auto kernel, int groups) {
        kernel<<<grid, groups * k_col_warps * 32, mla_attention_smem_bytes(groups)>>>(p);
      };
      if (s.row_groups == 1) {
        launch(mla_attention_split_kernel<1>, 1);
      } else if (s.row_groups == 2) {
        launch(mla_attention_split_kernel<2>, 2);
      } else {
        launch(mla_attention_split_kernel<4>, 4);
      }
    }
    KVCALC_CUDA_CHECK_LAUNCH();
    mark("combine");
    MlaCombineParams c;
    c.partial_o = s.partial_o.get();
    c.partial_ml = s.partial_ml.get();
    c.out = s.o_latent.get();
    c.batch = B;
    c.rows = static_cast<int>(s.rows);
    c.splits = s.splits;
    c.scale_log2 = s.scale_log2;
    mla_attention_combine_kernel<<<dim3(static_cast<unsigned>(s.rows), static_cast<unsigned>(B)),
                                   128>>>(c);
    KVCALC_CUDA_CHECK_LAUNCH();
    mark("w_uv");
    KVCALC_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        s.cublas, CUBLAS_OP_T, CUBLAS_OP_N, 128, B * S, k_latent, &one, s.w_uv.get(), CUDA_R_16BF,
        k_latent, 128LL * k_latent, s.o_latent.get(), CUDA_R_16BF, H * k_latent, k_latent, &zero,
        s.out.get(), CUDA_R_16BF, H * 128, 128, H, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    mark("end");
  } else {
    const int chunk = static_cast<int>(s.chunk);
    for (int b0 = 0; b0 < B; b0 += chunk) {
      const int n = std::min(chunk, B - b0);
      mark("gather");
      std::size_t rows = static_cast<std::size_t>(n) * T * (k_key / 8);
      gather_kernel<<<grid_for(rows), k_threads>>>(
          s.cache.get(), s.table.get(), s.latent.get(), static_cast<std::size_t>(b0),
          static_cast<std::size_t>(n), s.pages, s.shape.block, static_cast<std::size_t>(T));
      KVCALC_CUDA_CHECK_LAUNCH();
      mark("decompress");
      KVCALC_CUBLAS_CHECK(cublasGemmEx(s.cublas, CUBLAS_OP_T, CUBLAS_OP_N, H * 256, n * T, k_latent,
                                       &one, s.w_kv.get(), CUDA_R_16BF, k_latent, s.latent.get(),
                                       CUDA_R_16BF, k_key, &zero, s.kv.get(), CUDA_R_16BF, H * 256,
                                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      mark("scores");
      KVCALC_CUBLAS_CHECK(cublasGemmBatchedEx(
          s.cublas, CUBLAS_OP_T, CUBLAS_OP_N, T, S, 128, &one, s.score_a.get(), CUDA_R_16BF,
          H * 256, s.score_b.get() + static_cast<std::size_t>(b0) * H, CUDA_R_16BF, H * 192, &zero,
          s.score_c.get(), CUDA_R_32F, H * T, n * H, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      KVCALC_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
          s.cublas, CUBLAS_OP_T, CUBLAS_OP_N, T, S * H, 64, &one, s.latent.get() + k_latent,
          CUDA_R_16BF, k_key, static_cast<long long>(T) * k_key,
          s.q.get() + static_cast<std::size_t>(b0) * S * H * 192 + 128, CUDA_R_16BF, 192,
          static_cast<long long>(S) * H * 192, &one, s.scores.get(), CUDA_R_32F, T,
          static_cast<long long>(S) * H * T, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
      mark("softmax");
      softmax_kernel<<<static_cast<unsigned>(n * S * H), k_threads>>>(
          s.scores.get(), s.probs.get(), static_cast<std::size_t>(T), s.scale_log2);
      KVCALC_CUDA_CHECK_LAUNCH();
      mark("p_v");
      KVCALC_CUBLAS_CHECK(cublasGemmBatchedEx(
          s.cublas, CUBLAS_OP_N, CUBLAS_OP_N, 128, S, T, &one, s.pv_a.get(), CUDA_R_16BF, H * 256,
          s.pv_b.get(), CUDA_R_16BF, H * T, &zero, s.pv_c.get() + static_cast<std::size_t>(b0) * H,
          CUDA_R_16BF, H * 128, n * H, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
    mark("end");
  }

  MlaRunTimes times;
  times.total_s = seconds_between(*events.front(), *events.back());
  for (std::size_t i = 0; i + 1 < events.size(); ++i) {
    double dt = seconds_between(*events[i], *events[i + 1]);
    auto it = std::find_if(times.phases.begin(), times.phases.end(),
                           [&](const PhaseTime& p) { return p.name == names[i]; });
    if (it == times.phases.end()) {
      times.phases.push_back({names[i], dt});
    } else {
      it->seconds += dt;
    }
  }
  KVCALC_CUDA_CHECK(cudaGetLastError());
  return times;
}

} // namespace kvcalc::kernels::cuda
