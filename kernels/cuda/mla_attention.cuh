#pragma once
// Absorbed MLA decode attention over a paged latent cache: a split-KV kernel on tensor cores
// (mma.sync m16n8k16, bf16 in, fp32 accumulate, online softmax) and the combine step that
// merges the splits. The math is docs/formulas.md §11 (MLA absorbed); the structure follows
// FlashMLA: every query head of a sequence shares one pass over its latent rows.

#include <cuda_bf16.h>

#include <cstdint>

namespace kvcalc::kernels::cuda {

constexpr int k_latent = 512;         ///< d_c: the value width and the first part of the key
constexpr int k_key = 576;            ///< d_c + d_R
constexpr int k_max_splits = 64;      ///< KV splits of one sequence, at most
constexpr int k_tile_tokens = 32;     ///< latent rows per pipeline stage
constexpr int k_smem_row = k_key + 8; ///< padded row (bf16): 1168 B, so ldmatrix rows miss banks
constexpr int k_p_row = k_tile_tokens + 8; ///< padded row of P (bf16)
constexpr int k_col_warps = 4; ///< warps across the 512 output columns / the tile's tokens
constexpr int k_stages = 2;    ///< cp.async double buffering
constexpr int k_s_row = k_tile_tokens + 4;       ///< padded row of the partial scores (fp32)
constexpr int k_key_slice = k_key / k_col_warps; ///< key dims each warp sums the scores over

/// Inputs and outputs of the split-KV kernel.
struct MlaAttentionParams {
  const __nv_bfloat16* q;          ///< [batch][rows][576]: W_UK-absorbed query, then its RoPE part
  const __nv_bfloat16* cache;      ///< [pages][block][576]: latent, then the RoPE key; block is
                                   ///< a multiple of the kernel's tile, so a tile lies in one page
  const std::int32_t* block_table; ///< [batch][pages_per_sequence] → page
  float* partial_o;                ///< [splits][batch][rows][512]: unnormalised Σ p·latent
  float2* partial_ml;              ///< [splits][batch][rows]: (running max of raw scores, Σ p)
  int batch = 0;
  int rows = 0;    ///< query tokens × heads of one sequence
  int context = 0; ///< attended tokens per sequence
  int block = 0;   ///< tokens per page
  int pages_per_sequence = 0;
  int tiles_per_split = 0; ///< tiles (of the kernel's tile tokens) each split covers
  int splits = 0;
  float scale_log2 = 0; ///< softmax scale × log2(e)
};

/// Inputs and outputs of the combine step.
struct MlaCombineParams {
  const float* partial_o;
  const float2* partial_ml;
  __nv_bfloat16* out; ///< [batch][rows][512]
  int batch = 0;
  int rows = 0;
  int splits = 0;
  float scale_log2 = 0;
};

/// Dynamic shared memory of the split-KV kernel with `row_groups` groups of 16 query rows.
constexpr std::size_t mla_attention_smem_bytes(int row_groups) {
  return sizeof(__nv_bfloat16) * (static_cast<std::size_t>(16 * row_groups) * k_smem_row +
                                  static_cast<std::size_t>(k_stages) * k_tile_tokens * k_smem_row +
                                  static_cast<std::size_t>(16 * row_groups) * k_p_row) +
         sizeof(float) * k_col_warps * 16 * static_cast<std::size_t>(row_groups) * (2 + k_s_row);
}

namespace detail {

__device__ __forceinline__ std::uint32_t smem_address(const void* p) {
  return static_cast<std::uint32_t>(__cvta_generic_to_shared(p));
}

/// 16 bytes global → shared, asynchronously; `valid` false writes zeros instead.
__device__ __forceinline__ void copy_16(void* dst, const void* src, bool valid) {
  int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_address(dst)), "l"(src),
               "r"(bytes));
}
__device__ __forceinline__ void copy_commit() {
  asm volatile("cp.async.commit_group;\n" ::);
}
template <int Pending> __device__ __forceinline__ void copy_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending));
}

__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(std::uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_address(p)));
}

/// D += A·B for one m16n8k16 tile: A 16×16 row-major, B 16×8 column-major, bf16 → fp32.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const std::uint32_t (&a)[4],
                                         std::uint32_t b0, std::uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

} // namespace detail

/// One CTA: one sequence, RowGroups × 16 query rows, one split of the sequence's tiles.
/// Warp w works on row group w / 4. Its scores cover all 32 tokens of a tile over key dims
/// 144·(w % 4) … + 143, summed across the group's four warps through shared memory (each
/// Q fragment then feeds four MMAs, halving shared-memory traffic); its softmax covers tokens
/// 8·(w % 4) … + 7, its output columns 128·(w % 4) … + 127. grid (splits, row blocks, batch).
template <int RowGroups>
__global__ void __launch_bounds__(RowGroups* k_col_warps * 32)
    mla_attention_split_kernel(const MlaAttentionParams p) {
  using namespace detail;
  constexpr int rows_per_cta = 16 * RowGroups;
  constexpr int threads = RowGroups * k_col_warps * 32;
  constexpr int chunks_per_row = k_key / 8; // 16-byte pieces

  extern __shared__ __align__(16) unsigned char smem_raw[];
  auto* q_s = reinterpret_cast<__nv_bfloat16*>(smem_raw);
  auto* kv_s = q_s + rows_per_cta * k_smem_row;             // [stage][token][k_smem_row]
  auto* p_s = kv_s + k_stages * k_tile_tokens * k_smem_row; // [row][k_p_row]
  auto* red_max = reinterpret_cast<float*>(p_s + rows_per_cta * k_p_row); // [warp col][row]
  float* red_sum = red_max + k_col_warps * rows_per_cta;
  float* part_s = red_sum + k_col_warps * rows_per_cta; // [warp col][row][k_s_row]

  const int split = static_cast<int>(blockIdx.x);
  const int row0 = static_cast<int>(blockIdx.y) * rows_per_cta;
  const int b = static_cast<int>(blockIdx.z);
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int group = warp / k_col_warps; // row group
  const int col = warp % k_col_warps;   // token slice / column slice
  const int g = lane / 4;
  const int t4 = lane % 4;

  const int total_tiles = (p.context + k_tile_tokens - 1) / k_tile_tokens;
  const int tile_begin = split * p.tiles_per_split;
  const int tile_end = min(total_tiles, tile_begin + p.tiles_per_split);

  const __nv_bfloat16* q_seq = p.q + static_cast<std::size_t>(b) * p.rows * k_key;
  for (int i = tid; i < rows_per_cta * chunks_per_row; i += threads) {
    int r = i / chunks_per_row;
    int c = i % chunks_per_row;
    bool valid = row0 + r < p.rows;
    const __nv_bfloat16* src =
        valid ? q_seq + static_cast<std::size_t>(row0 + r) * k_key + c * 8 : p.q;
    copy_16(q_s + r * k_smem_row + c * 8, src, valid);
  }
  copy_commit();

  const std::int32_t* table = p.block_table + static_cast<std::size_t>(b) * p.pages_per_sequence;
  // A tile is 32 consecutive tokens of one page: one table read, then plain offsets.
  auto load_tile = [&](int tile, int stage) {
    __nv_bfloat16* dst = kv_s + stage * k_tile_tokens * k_smem_row;
    const int first = tile * k_tile_tokens;
    const std::size_t page = static_cast<std::size_t>(table[first / p.block]);
    const __nv_bfloat16* src_tile = p.cache + (page * p.block + first % p.block) * k_key;
    const int valid_rows = min(k_tile_tokens, p.context - first);
#pragma unroll 4
    for (int i = tid; i < k_tile_tokens * chunks_per_row; i += threads) {
      int r = i / chunks_per_row;
      int c = i % chunks_per_row;
      bool valid = r < valid_rows;
      // Rows past the context are zero-filled, never read: the page tails hold NaN.
      copy_16(dst + r * k_smem_row + c * 8, valid ? src_tile + r * k_key + c * 8 : p.cache, valid);
    }
    copy_commit();
  };

  float o[16][4];
#pragma unroll
  for (int n = 0; n < 16; ++n) {
    o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  }
  float m_run[2] = {-INFINITY, -INFINITY}; // rows g and g + 8 of this warp's group
  float l_run[2] = {0.f, 0.f};

  if (tile_begin < tile_end) {
    load_tile(tile_begin, 0);
  }
  const int my_row = group * 16; // first row of this warp's group within the CTA
  for (int tile = tile_begin; tile < tile_end; ++tile) {
    const int stage = (tile - tile_begin) % k_stages;
    __syncthreads(); // every warp is done with the stage the next load overwrites
    if (tile + 1 < tile_end) {
      load_tile(tile + 1, (stage + 1) % k_stages);
      copy_wait<1>();
    } else {
      copy_wait<0>();
    }
    __syncthreads();
    const __nv_bfloat16* kv = kv_s + stage * k_tile_tokens * k_smem_row;

    // Partial scores of 16 rows × 32 tokens over this warp's 144 key dims.
    float acc[4][4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
    }
    const int k_first = col * k_key_slice;
    const __nv_bfloat16* q_rows =
        q_s + (my_row + lane % 16) * k_smem_row + k_first + (lane / 16) * 8;
    // ldmatrix x4 over two n-tiles: matrices (tile j, dims +0), (j, +8), (j + 1, +0), (j + 1, +8).
    const __nv_bfloat16* k_rows =
        kv + (8 * (lane / 16) + lane % 8) * k_smem_row + k_first + 8 * ((lane / 8) % 2);
#pragma unroll
    for (int k = 0; k < k_key_slice; k += 16) {
      std::uint32_t a[4];
      std::uint32_t kb01[4];
      std::uint32_t kb23[4];
      ldmatrix_x4(a, q_rows + k);
      ldmatrix_x4(kb01, k_rows + k);
      ldmatrix_x4(kb23, k_rows + 16 * k_smem_row + k);
      mma_bf16(acc[0], a, kb01[0], kb01[1]);
      mma_bf16(acc[1], a, kb01[2], kb01[3]);
      mma_bf16(acc[2], a, kb23[0], kb23[1]);
      mma_bf16(acc[3], a, kb23[2], kb23[3]);
    }
    float* my_part = part_s + col * rows_per_cta * k_s_row;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      *reinterpret_cast<float2*>(my_part + (my_row + g) * k_s_row + 8 * j + 2 * t4) =
          make_float2(acc[j][0], acc[j][1]);
      *reinterpret_cast<float2*>(my_part + (my_row + g + 8) * k_s_row + 8 * j + 2 * t4) =
          make_float2(acc[j][2], acc[j][3]);
    }
    __syncthreads();
    // Full scores of 16 rows × this warp's 8 tokens: the four partial sums.
    float s[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int c = 0; c < k_col_warps; ++c) {
      const float* part = part_s + c * rows_per_cta * k_s_row + col * 8 + 2 * t4;
      float2 lo = *reinterpret_cast<const float2*>(part + (my_row + g) * k_s_row);
      float2 hi = *reinterpret_cast<const float2*>(part + (my_row + g + 8) * k_s_row);
      s[0] += lo.x;
      s[1] += lo.y;
      s[2] += hi.x;
      s[3] += hi.y;
    }
    const int token0 = tile * k_tile_tokens + col * 8 + 2 * t4;
    if (token0 >= p.context) {
      s[0] = s[2] = -INFINITY;
    }
    if (token0 + 1 >= p.context) {
      s[1] = s[3] = -INFINITY;
    }
    float part_max[2] = {quad_max(fmaxf(s[0], s[1])), quad_max(fmaxf(s[2], s[3]))};
    if (t4 == 0) {
      red_max[col * rows_per_cta + my_row + g] = part_max[0];
      red_max[col * rows_per_cta + my_row + g + 8] = part_max[1];
    }
    __syncthreads();
    float m_new[2];
    float scaled_max[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float tile_max = -INFINITY;
#pragma unroll
      for (int c = 0; c < k_col_warps; ++c) {
        tile_max = fmaxf(tile_max, red_max[c * rows_per_cta + my_row + g + 8 * h]);
      }
      m_new[h] = fmaxf(m_run[h], tile_max); // finite: every tile holds a valid token
      scaled_max[h] = m_new[h] * p.scale_log2;
    }
    float pr[4];
    pr[0] = exp2f(fmaf(s[0], p.scale_log2, -scaled_max[0]));
    pr[1] = exp2f(fmaf(s[1], p.scale_log2, -scaled_max[0]));
    pr[2] = exp2f(fmaf(s[2], p.scale_log2, -scaled_max[1]));
    pr[3] = exp2f(fmaf(s[3], p.scale_log2, -scaled_max[1]));
    __nv_bfloat162 lo = __floats2bfloat162_rn(pr[0], pr[1]);
    __nv_bfloat162 hi = __floats2bfloat162_rn(pr[2], pr[3]);
    *reinterpret_cast<__nv_bfloat162*>(p_s + (my_row + g) * k_p_row + col * 8 + 2 * t4) = lo;
    *reinterpret_cast<__nv_bfloat162*>(p_s + (my_row + g + 8) * k_p_row + col * 8 + 2 * t4) = hi;
    // Sum what P·V will use: the bf16-rounded probabilities.
    float2 lo_f = __bfloat1622float2(lo);
    float2 hi_f = __bfloat1622float2(hi);
    float part_sum[2] = {quad_sum(lo_f.x + lo_f.y), quad_sum(hi_f.x + hi_f.y)};
    if (t4 == 0) {
      red_sum[col * rows_per_cta + my_row + g] = part_sum[0];
      red_sum[col * rows_per_cta + my_row + g + 8] = part_sum[1];
    }
    __syncthreads();
    float alpha[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float tile_sum = 0.f;
#pragma unroll
      for (int c = 0; c < k_col_warps; ++c) {
        tile_sum += red_sum[c * rows_per_cta + my_row + g + 8 * h];
      }
      alpha[h] = exp2f((m_run[h] - m_new[h]) * p.scale_log2); // 0 on the first tile
      l_run[h] = l_run[h] * alpha[h] + tile_sum;
      m_run[h] = m_new[h];
    }
#pragma unroll
    for (int n = 0; n < 16; ++n) {
      o[n][0] *= alpha[0];
      o[n][1] *= alpha[0];
      o[n][2] *= alpha[1];
      o[n][3] *= alpha[1];
    }

    // O[16 rows][128 columns] += P[16 rows][32 tokens] · latent[32 tokens][128 columns].
#pragma unroll
    for (int ks = 0; ks < k_tile_tokens / 16; ++ks) {
      std::uint32_t a[4];
      ldmatrix_x4(a, p_s + (my_row + lane % 16) * k_p_row + ks * 16 + (lane / 16) * 8);
      const __nv_bfloat16* v_rows = kv + (ks * 16 + lane % 8 + 8 * ((lane / 8) % 2)) * k_smem_row +
                                    col * 128 + 8 * (lane / 16);
#pragma unroll
      for (int np = 0; np < 8; ++np) {
        std::uint32_t vb[4];
        ldmatrix_x4_trans(vb, v_rows + np * 16);
        mma_bf16(o[2 * np], a, vb[0], vb[1]);
        mma_bf16(o[2 * np + 1], a, vb[2], vb[3]);
      }
    }
  }
  copy_wait<0>();

  const std::size_t split_base = (static_cast<std::size_t>(split) * p.batch + b) * p.rows;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    int row = row0 + my_row + g + 8 * h;
    if (row >= p.rows) {
      continue;
    }
    float* dst = p.partial_o + (split_base + row) * k_latent + col * 128 + 2 * t4;
#pragma unroll
    for (int n = 0; n < 16; ++n) {
      *reinterpret_cast<float2*>(dst + n * 8) = make_float2(o[n][2 * h], o[n][2 * h + 1]);
    }
    if (col == 0 && t4 == 0) {
      p.partial_ml[split_base + row] = make_float2(m_run[h], l_run[h]);
    }
  }
}

/// Merges the splits of one (sequence, row): o = Σ 2^{(m_i − M)·k}·o_i / Σ 2^{(m_i − M)·k}·l_i.
/// grid (rows, batch), 128 threads of 4 columns each.
__global__ void __launch_bounds__(128) mla_attention_combine_kernel(const MlaCombineParams p) {
  const int row = static_cast<int>(blockIdx.x);
  const int b = static_cast<int>(blockIdx.y);
  const std::size_t stride = static_cast<std::size_t>(p.batch) * p.rows;
  const std::size_t index = static_cast<std::size_t>(b) * p.rows + row;
  float peak = -INFINITY;
  for (int i = 0; i < p.splits; ++i) {
    float2 ml = p.partial_ml[i * stride + index];
    if (ml.y > 0.f) {
      peak = fmaxf(peak, ml.x);
    }
  }
  float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
  float total = 0.f;
  const int c = static_cast<int>(threadIdx.x) * 4;
  for (int i = 0; i < p.splits; ++i) {
    float2 ml = p.partial_ml[i * stride + index];
    if (!(ml.y > 0.f)) {
      continue;
    }
    float w = exp2f((ml.x - peak) * p.scale_log2);
    total += w * ml.y;
    float4 v = *reinterpret_cast<const float4*>(p.partial_o + (i * stride + index) * k_latent + c);
    acc.x += w * v.x;
    acc.y += w * v.y;
    acc.z += w * v.z;
    acc.w += w * v.w;
  }
  float inv = 1.f / total;
  __nv_bfloat16* dst = p.out + index * k_latent + c;
  *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(acc.x * inv, acc.y * inv);
  *reinterpret_cast<__nv_bfloat162*>(dst + 2) = __floats2bfloat162_rn(acc.z * inv, acc.w * inv);
}

} // namespace kvcalc::kernels::cuda
