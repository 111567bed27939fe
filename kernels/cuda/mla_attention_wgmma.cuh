#pragma once
// Absorbed MLA decode attention for Hopper (sm_90a): the split-KV kernel of mla_attention.cuh
// rebuilt on warpgroup MMA (wgmma), whose tensor cores read both operands straight from shared
// memory instead of from registers filled by ldmatrix. Same inputs, outputs and combine step.
//
// One CTA: 64 query rows of one sequence, one split of its tiles, two warpgroups. A tile is 64
// latent rows (one page of 64). Warpgroup 0 scores the whole tile (S = Q·Kᵀ over the 576 key
// dims, m64n64, both operands K-major), runs the online softmax and writes P to shared memory
// while warpgroup 1 loads the next tile; then warpgroup w accumulates output columns
// 256·w … + 255 over the tile's 64 tokens (O += P·V, m64n256, V read MN-major from the same
// latent rows). Two CTA barriers per tile. Operands live in shared memory as
// [9 chunks of 64 dims][rows][64], each 128-byte row swizzled (16-byte unit u stored at
// u ^ (row % 8)), the layout wgmma's 128-byte swizzle mode reads; every operand starts
// 1024-byte aligned, where that swizzle pattern repeats.

#include "mla_attention.cuh"

namespace kvcalc::kernels::cuda {

constexpr int k_wg_rows = 64;           ///< query rows per CTA: wgmma's M
constexpr int k_wg_tile_tokens = 64;    ///< latent rows per pipeline stage
constexpr int k_wg_threads = 256;       ///< two warpgroups
constexpr int k_wg_chunks = k_key / 64; ///< 128-byte chunks of a 576-wide row

/// Bytes of one swizzled operand of `rows` rows of 576 bf16.
__host__ __device__ constexpr std::size_t wg_operand_bytes(int rows) {
  return static_cast<std::size_t>(k_wg_chunks) * static_cast<std::size_t>(rows) * 128;
}

/// Dynamic shared memory of the wgmma kernel: alignment slack, Q, two latent stages, P and the
/// rows' rescaling factors (230,656 B; Hopper allows 232,448 per block).
constexpr std::size_t mla_attention_wgmma_smem_bytes() {
  return 1024 + wg_operand_bytes(k_wg_rows) + 2 * wg_operand_bytes(k_wg_tile_tokens) +
         static_cast<std::size_t>(k_wg_rows) * 128 + k_wg_rows * sizeof(float);
}

namespace detail {

/// Byte offset of element (row, dim) in a swizzled [chunk][rows][64] operand.
__device__ __forceinline__ std::uint32_t swizzled_offset(int rows, int row, int dim) {
  return static_cast<std::uint32_t>((dim / 64) * rows * 128 + row * 128 +
                                    ((((dim % 64) / 8) ^ (row % 8)) * 16) + (dim % 8) * 2);
}

/// A wgmma shared-memory matrix descriptor with the 128-byte swizzle: start address, leading
/// and stride byte offsets (PTX ISA, "Matrix Descriptor Format"; all three in 16-byte units).
__device__ __forceinline__ std::uint64_t
smem_descriptor(std::uint32_t address, std::uint32_t leading_bytes, std::uint32_t stride_bytes) {
  return static_cast<std::uint64_t>((address & 0x3FFFFu) >> 4) |
         (static_cast<std::uint64_t>((leading_bytes & 0x3FFFFu) >> 4) << 16) |
         (static_cast<std::uint64_t>((stride_bytes & 0x3FFFFu) >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int Pending> __device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(Pending) : "memory");
}
/// Makes this thread's shared-memory writes (stores, cp.async) visible to the async proxy,
/// which wgmma reads shared memory through.
__device__ __forceinline__ void fence_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
/// Keeps the compiler from moving reads or writes of accumulators across a wgmma fence or wait
/// (one before wgmma_fence, one after wgmma_wait; otherwise ptxas must insert a fence itself).
template <int N> __device__ __forceinline__ void fence_accumulators(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
    asm volatile("" : "+f"(d[i])::"memory");
  }
}

/// D[64][64] (+)= A[64][16] · B[16][64], both operands K-major in shared memory (descriptors).
/// `accumulate` 0 overwrites D.
__device__ __forceinline__ void wgmma_m64n64_k_major(float (&d)[32], std::uint64_t a,
                                                     std::uint64_t b, int accumulate) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
               "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
               "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
               "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
                 "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]),
                 "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]),
                 "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
                 "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]),
                 "+f"(d[31])
               : "l"(a), "l"(b), "r"(accumulate)
               : "memory");
}

/// D[64][256] (+)= A[64][16] · B[16][256], A K-major and B MN-major (transposed) in shared
/// memory.
__device__ __forceinline__ void wgmma_m64n256_b_mn_major(float (&d)[128], std::uint64_t a,
                                                         std::uint64_t b, int accumulate) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
      "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
      "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, "
      "%127"
      "}, %128, %129, p, 1, 1, 0, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]),
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]),
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]),
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]),
        "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]),
        "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]),
        "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
        "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]),
        "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]),
        "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
        "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]),
        "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]),
        "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]),
        "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
      : "l"(a), "l"(b), "r"(accumulate)
      : "memory");
}

} // namespace detail

/// grid (row blocks of 64, splits, batch), k_wg_threads threads, mla_attention_wgmma_smem_bytes()
/// of dynamic shared memory. The block (page size) is a multiple of k_wg_tile_tokens.
__global__ void __launch_bounds__(k_wg_threads, 1)
    mla_attention_wgmma_kernel(const MlaAttentionParams p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using namespace detail;
  constexpr int units_per_row = k_key / 8;        // 16-byte pieces of a row
  constexpr std::uint32_t chunk_bytes = 64 * 128; // one chunk of a 64-row operand
  static_assert(k_wg_rows == 64 && k_wg_tile_tokens == 64, "chunk_bytes serves Q, K and P");

  extern __shared__ unsigned char smem_raw[];
  unsigned char* q_s = smem_raw + (1024 - smem_address(smem_raw) % 1024) % 1024;
  unsigned char* kv_s = q_s + wg_operand_bytes(k_wg_rows);            // [stage][chunk][token][64]
  unsigned char* p_s = kv_s + 2 * wg_operand_bytes(k_wg_tile_tokens); // [row][64 tokens]
  auto* alpha_s = reinterpret_cast<float*>(p_s + k_wg_rows * 128);    // [row]

  const int row0 = static_cast<int>(blockIdx.x) * k_wg_rows;
  const int split = static_cast<int>(blockIdx.y);
  const int b = static_cast<int>(blockIdx.z);
  const int tid = static_cast<int>(threadIdx.x);
  const int wg = tid / 128;
  const int lane = tid % 32;
  const int g = lane / 4;
  const int t4 = lane % 4;
  // A warpgroup's accumulator rows: warp w of the group holds rows 16·w + g and 16·w + g + 8.
  const int rows_of[2] = {16 * ((tid % 128) / 32) + g, 16 * ((tid % 128) / 32) + g + 8};

  const int total_tiles = (p.context + k_wg_tile_tokens - 1) / k_wg_tile_tokens;
  const int tile_begin = split * p.tiles_per_split;
  const int tile_end = min(total_tiles, tile_begin + p.tiles_per_split);

  const __nv_bfloat16* q_seq = p.q + static_cast<std::size_t>(b) * p.rows * k_key;
  for (int i = tid; i < k_wg_rows * units_per_row; i += k_wg_threads) {
    int r = i / units_per_row;
    int u = i % units_per_row;
    bool valid = row0 + r < p.rows;
    const __nv_bfloat16* src =
        valid ? q_seq + static_cast<std::size_t>(row0 + r) * k_key + u * 8 : p.q;
    copy_16(q_s + swizzled_offset(k_wg_rows, r, u * 8), src, valid);
  }

  const std::int32_t* table = p.block_table + static_cast<std::size_t>(b) * p.pages_per_sequence;
  // `first_thread`, `threads`: who shares the copies (the whole CTA, or warpgroup 1 alone).
  auto load_tile = [&](int tile, int stage, int first_thread, int threads) {
    unsigned char* dst = kv_s + stage * wg_operand_bytes(k_wg_tile_tokens);
    const int first = tile * k_wg_tile_tokens;
    const std::size_t page = static_cast<std::size_t>(table[first / p.block]);
    const __nv_bfloat16* src_tile = p.cache + (page * p.block + first % p.block) * k_key;
    const int valid_rows = min(k_wg_tile_tokens, p.context - first);
#pragma unroll 4
    for (int i = tid - first_thread; i < k_wg_tile_tokens * units_per_row; i += threads) {
      int r = i / units_per_row;
      int u = i % units_per_row;
      bool valid = r < valid_rows;
      // Rows past the context are zero-filled, never read: the page tails hold NaN.
      copy_16(dst + swizzled_offset(k_wg_tile_tokens, r, u * 8),
              valid ? src_tile + r * k_key + u * 8 : p.cache, valid);
    }
  };

  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) {
    o[i] = 0.f;
  }
  // Warpgroup 0's softmax state for its rows: the running maximum of the raw scores and this
  // thread's share of Σ p.
  float m_run[2] = {-INFINITY, -INFINITY};
  float l_run[2] = {0.f, 0.f};

  if (tile_begin < tile_end) {
    load_tile(tile_begin, 0, 0, k_wg_threads);
  }
  copy_commit(); // Q and the first tile
  const std::uint32_t q_addr = smem_address(q_s);
  const std::uint32_t p_addr = smem_address(p_s);
  for (int tile = tile_begin; tile < tile_end; ++tile) {
    const int stage = (tile - tile_begin) % 2;
    copy_wait<0>();
    fence_async_shared();
    // The tile is in place, and both warpgroups are done with the previous one (its P, its
    // factors, and the stage the next load overwrites).
    __syncthreads();
    const std::uint32_t kv_addr = smem_address(kv_s + stage * wg_operand_bytes(k_wg_tile_tokens));
    float alpha[2] = {1.f, 1.f};
    if (wg == 0) {
      // S[64 rows][64 tokens], 16 key dims per instruction.
      float s[32];
#pragma unroll
      for (int i = 0; i < 32; ++i) {
        s[i] = 0.f;
      }
      fence_accumulators(s);
      wgmma_fence();
#pragma unroll
      for (int k = 0; k < k_key / 16; ++k) {
        const std::uint32_t at = (k / 4) * chunk_bytes + (k % 4) * 32;
        wgmma_m64n64_k_major(s, smem_descriptor(q_addr + at, 16, 1024),
                             smem_descriptor(kv_addr + at, 16, 1024), k > 0);
      }
      wgmma_commit();
      wgmma_wait<0>();
      fence_accumulators(s);

      // s[4i + e] is (rows_of[0], token 8i + 2·t4 + e), s[4i + 2 + e] (rows_of[1], same token).
      const int token0 = tile * k_wg_tile_tokens + 2 * t4;
      float tile_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int i = 0; i < 8; ++i) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          if (token0 + 8 * i + e >= p.context) {
            s[4 * i + e] = -INFINITY;
            s[4 * i + 2 + e] = -INFINITY;
          }
          tile_max[0] = fmaxf(tile_max[0], s[4 * i + e]);
          tile_max[1] = fmaxf(tile_max[1], s[4 * i + 2 + e]);
        }
      }
      float scaled_max[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        // Finite: every tile holds a valid token.
        float m_new = fmaxf(m_run[h], quad_max(tile_max[h]));
        scaled_max[h] = m_new * p.scale_log2;
        alpha[h] = exp2f((m_run[h] - m_new) * p.scale_log2); // 0 on the first tile
        m_run[h] = m_new;
      }
      float sum[2] = {0.f, 0.f};
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        __nv_bfloat162 lo =
            __floats2bfloat162_rn(exp2f(fmaf(s[4 * i], p.scale_log2, -scaled_max[0])),
                                  exp2f(fmaf(s[4 * i + 1], p.scale_log2, -scaled_max[0])));
        __nv_bfloat162 hi =
            __floats2bfloat162_rn(exp2f(fmaf(s[4 * i + 2], p.scale_log2, -scaled_max[1])),
                                  exp2f(fmaf(s[4 * i + 3], p.scale_log2, -scaled_max[1])));
        const int col = 8 * i + 2 * t4;
        *reinterpret_cast<__nv_bfloat162*>(p_s + swizzled_offset(k_wg_rows, rows_of[0], col)) = lo;
        *reinterpret_cast<__nv_bfloat162*>(p_s + swizzled_offset(k_wg_rows, rows_of[1], col)) = hi;
        // Sum what P·V uses: the bf16-rounded probabilities.
        float2 lo_f = __bfloat1622float2(lo);
        float2 hi_f = __bfloat1622float2(hi);
        sum[0] += lo_f.x + lo_f.y;
        sum[1] += hi_f.x + hi_f.y;
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        l_run[h] = l_run[h] * alpha[h] + sum[h];
        if (t4 == 0) {
          alpha_s[rows_of[h]] = alpha[h];
        }
      }
      fence_async_shared();
    } else if (tile + 1 < tile_end) {
      load_tile(tile + 1, stage ^ 1, 128, 128);
    }
    copy_commit();   // empty for warpgroup 0
    __syncthreads(); // P and the factors are complete
    if (wg == 1) {
      alpha[0] = alpha_s[rows_of[0]];
      alpha[1] = alpha_s[rows_of[1]];
    }
#pragma unroll
    for (int n = 0; n < 32; ++n) {
      o[4 * n] *= alpha[0];
      o[4 * n + 1] *= alpha[0];
      o[4 * n + 2] *= alpha[1];
      o[4 * n + 3] *= alpha[1];
    }

    // O[64 rows][this warpgroup's 256 columns] += P[64][64 tokens] · V[64 tokens][256 columns].
    // V is MN-major: the next 64 columns are a chunk (8192 B) on, the next 8 tokens 1024 B on.
    fence_accumulators(o); // the rescaled values, before the fence
    wgmma_fence();
#pragma unroll
    for (int k = 0; k < k_wg_tile_tokens / 16; ++k) {
      wgmma_m64n256_b_mn_major(
          o, smem_descriptor(p_addr + k * 32, 16, 1024),
          smem_descriptor(kv_addr + 4 * wg * chunk_bytes + k * 16 * 128, chunk_bytes, 1024), 1);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_accumulators(o);
  }
  copy_wait<0>();

  const std::size_t split_base = (static_cast<std::size_t>(split) * p.batch + b) * p.rows;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + rows_of[h];
    const float l_row = quad_sum(l_run[h]); // warpgroup 0's; the shuffle is warp-uniform
    if (row >= p.rows) {
      continue;
    }
    float* dst = p.partial_o + (split_base + row) * k_latent + 256 * wg + 2 * t4;
#pragma unroll
    for (int n = 0; n < 32; ++n) {
      *reinterpret_cast<float2*>(dst + 8 * n) = make_float2(o[4 * n + 2 * h], o[4 * n + 2 * h + 1]);
    }
    if (wg == 0 && t4 == 0) {
      p.partial_ml[split_base + row] = make_float2(m_run[h], l_row);
    }
  }
#else
  __trap(); // built without sm_90a code: the host never launches it (wgmma_supported())
#endif
}

/// 1 when the code running on the device was built for sm_90a (and so carries the kernel
/// above), 0 otherwise.
__global__ void sm90a_code_kernel(int* out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  *out = 1;
#else
  *out = 0;
#endif
}

} // namespace kvcalc::kernels::cuda
