#pragma once
// Register tiles of the absorbed MLA decode kernel (kernels/README.md), internal to kernels/cpu.
//
// A page's scores are kept token-major, St[t][row], and computed one of two ways:
// - many query rows (heads × query tokens ≥ one vector): the rows are the vector lanes, as in
//   a GEMM micro-kernel: the latent query is transposed once, Qt[x][row], and each page value
//   K[t][x] is broadcast against Qt[x], so no horizontal sums are needed (`wide_scores`);
// - few rows (the shapes that are memory-bound on most machines): each score is a dot product
//   vectorised along the latent width, reading the bf16 page directly (`dot_products`).
// The output O[row] += Σ_t P[t][row] · V[t] broadcasts each weight against vectors of V
// (`weighted_sum`). Every tile fills the register file: accumulators, operand vectors and one
// spare. Matrices are row-major `Block`s of fp32 or of bf16 bits (`Bf16`), widened on load.

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "simd.hpp"

namespace kvcalc::kernels::tiles {
inline namespace KVCALC_SIMD_ISA {

using Bf16 = std::uint16_t; ///< the upper half of an fp32 value

constexpr auto k_lanes = static_cast<std::size_t>(simd::k_lanes);
constexpr auto k_registers = static_cast<std::size_t>(simd::k_registers);
constexpr std::size_t k_accumulators = k_registers >= 32 ? 24 : 12;
constexpr std::size_t k_wide_vectors = k_registers >= 32 ? 4 : 3; // of query rows, per tile
constexpr std::size_t k_dot_rows = k_registers >= 32 ? 4 : 3;
constexpr std::size_t k_dot_tokens = k_registers >= 32 ? 6 : 3;
constexpr std::size_t k_out_rows = k_registers >= 32 ? 6 : 3;
constexpr std::size_t k_out_vectors = k_registers >= 32 ? 4 : 3;
constexpr std::size_t k_few_out_vectors = k_registers >= 32 ? 8 : 4; // for one or two rows
constexpr std::size_t k_line = 64;                                   // bytes per cache line

/// Before each loop over a tile's rows, tokens or vectors: unrolled completely, so every
/// accumulator of the tile is a register. An accumulator array indexed by a loop variable
/// anywhere (GCC stops unrolling at 16 iterations) lives in memory, and then every update in the
/// inner loop is also a store.
#define KVCALC_TILE_LOOP _Pragma("GCC unroll 64")

/// Tokens per wide score tile of `vectors` row vectors: at most 12 broadcasts per step.
constexpr std::size_t wide_tokens(std::size_t vectors) {
  return std::min<std::size_t>(12, k_accumulators / vectors);
}
static_assert(wide_tokens(k_wide_vectors) * k_wide_vectors + k_wide_vectors + 1 <= k_registers);
static_assert(k_dot_rows * k_dot_tokens + k_dot_rows + 1 <= k_registers);
static_assert(k_out_rows * k_out_vectors + k_out_vectors + 1 <= k_registers);
static_assert(2 * k_few_out_vectors + k_few_out_vectors + 1 <= k_registers);

inline float widen(float v) {
  return v;
}
inline float widen(Bf16 v) {
  return simd::bf16_to_float(v);
}
inline simd::Vec load(const float* p) {
  return simd::load(p);
}
inline simd::Vec load(const Bf16* p) {
  return simd::load_bf16(p);
}

/// A row-major block: row r starts at data + r · stride.
template <class T> struct Block {
  Block(const T* d, std::size_t s) : data(d), stride(s) {}
  const T* data;
  std::size_t stride;
  [[nodiscard]] const T* row(std::size_t r) const { return data + r * stride; }
};

/// Fetches the cache line holding p into the cache when p starts a line of its row: callers
/// walk rows in steps of one vector, and this issues one fetch per line of bytes walked.
template <class T> inline void fetch_line(const T* row, std::size_t x) {
  if ((x * sizeof(T)) % k_line == 0) {
    __builtin_prefetch(row + x, 0, 3);
  }
}

/// Fetches a block of memory (the next page) a few cache lines at a time, paced by the steps of
/// the work that runs meanwhile.
class Fetcher {
public:
  Fetcher() = default;
  /// `bytes` from `data` in `steps` calls of step().
  Fetcher(const void* data, std::size_t bytes, std::size_t steps)
      : m_at(static_cast<const char*>(data)), m_end(m_at + bytes),
        m_lines((bytes / k_line + steps) / std::max<std::size_t>(steps, 1)) {}
  void step() {
    for (std::size_t i = 0; i < m_lines && m_at < m_end; ++i, m_at += k_line) {
      __builtin_prefetch(m_at, 0, 3);
    }
  }

private:
  const char* m_at = nullptr;
  const char* m_end = nullptr;
  std::size_t m_lines = 0;
};

/// Calls `body(std::integral_constant<std::size_t, n>{})` for a run-time 1 ≤ n ≤ Max: the
/// remainder of a tiled loop gets a tile of exactly its size.
template <std::size_t Max, class Body> void with_size(std::size_t n, Body&& body) {
  if constexpr (Max >= 1) {
    if (n == Max) {
      body(std::integral_constant<std::size_t, Max>{});
    } else {
      with_size<Max - 1>(n, body);
    }
  }
}

/// St[j][v·lanes ..] = Σ_x K[j][x] · Qt[x][v·lanes ..] for a Tokens × Vectors tile. `next`, when
/// not null, is the same rows of the next page, fetched meanwhile.
template <std::size_t Tokens, std::size_t Vectors, class Next>
void wide_score_tile(Block<float> qt, Block<float> k, std::size_t width, float* st,
                     std::size_t st_stride, const Next* next, std::size_t next_stride) {
  simd::Vec acc[Tokens][Vectors] = {};
  for (std::size_t x = 0; x < width; ++x) {
    if (next != nullptr) {
      KVCALC_TILE_LOOP
      for (std::size_t j = 0; j < Tokens; ++j) {
        fetch_line(next + j * next_stride, x);
      }
    }
    simd::Vec qv[Vectors];
    KVCALC_TILE_LOOP
    for (std::size_t v = 0; v < Vectors; ++v) {
      qv[v] = simd::load(qt.row(x) + v * k_lanes);
    }
    KVCALC_TILE_LOOP
    for (std::size_t j = 0; j < Tokens; ++j) {
      simd::Vec kv = simd::splat(k.row(j)[x]);
      KVCALC_TILE_LOOP
      for (std::size_t v = 0; v < Vectors; ++v) {
        acc[j][v] += kv * qv[v];
      }
    }
  }
  KVCALC_TILE_LOOP
  for (std::size_t j = 0; j < Tokens; ++j) {
    KVCALC_TILE_LOOP
    for (std::size_t v = 0; v < Vectors; ++v) {
      simd::store(st + j * st_stride + v * k_lanes, acc[j][v]);
    }
  }
}

/// Scores of the rows of Qt[width][stride] (stride a whole number of vectors) against `tokens`
/// rows of a page in fp32, into St[t][stride]; `next` as above.
template <class Next>
void wide_scores(Block<float> qt, std::size_t width, Block<float> page, std::size_t tokens,
                 float* st, const Next* next, std::size_t next_stride) {
  std::size_t vectors = qt.stride / k_lanes;
  for (std::size_t v0 = 0; v0 < vectors; v0 += k_wide_vectors) {
    with_size<k_wide_vectors>(std::min(k_wide_vectors, vectors - v0), [&](auto nv) {
      constexpr std::size_t tile = wide_tokens(decltype(nv)::value);
      Block<float> q{qt.data + v0 * k_lanes, qt.stride};
      for (std::size_t t0 = 0; t0 < tokens; t0 += tile) {
        Block<float> k{page.row(t0), page.stride};
        float* out = st + t0 * qt.stride + v0 * k_lanes;
        const Next* ahead = v0 == 0 && next != nullptr ? next + t0 * next_stride : nullptr;
        with_size<tile>(std::min(tile, tokens - t0), [&](auto nt) {
          wide_score_tile<decltype(nt)::value, decltype(nv)::value>(q, k, width, out, qt.stride,
                                                                    ahead, next_stride);
        });
      }
    });
  }
}

/// One step of a dot-product tile, by query type. An fp32 query widens 16 (or 8) cache values
/// per step and multiplies-adds them; a bf16 query (where the build has bf16 pair dot
/// products) multiplies a cache line of bf16 pairs, 32 values, by the query's with one
/// vdpbf16ps.
template <class Q> struct DotStep;
template <> struct DotStep<float> {
  static constexpr std::size_t width = k_lanes;
  static simd::Vec query(const float* p) { return simd::load(p); }
  template <class T> static simd::Vec key(const T* p) { return load(p); }
  static simd::Vec add(simd::Vec acc, simd::Vec q, simd::Vec k) { return acc + q * k; }
};
#if KVCALC_SIMD_BF16_PAIRS
template <> struct DotStep<Bf16> {
  static constexpr std::size_t width = 2 * k_lanes;
  static simd::Pairs query(const Bf16* p) { return simd::load_pairs(p); }
  static simd::Pairs key(const Bf16* p) { return simd::load_pairs(p); }
  static simd::Vec add(simd::Vec acc, simd::Pairs q, simd::Pairs k) {
    return simd::dot_pairs(acc, q, k);
  }
};
#endif

/// C(i, j) = q[i] · K[j] over `width` values, for a Rows × Tokens tile, stored at
/// c[j·c_token + i·c_row].
template <std::size_t Rows, std::size_t Tokens, class Q, class T>
void dot_tile(Block<Q> q, Block<T> k, std::size_t width, float* c, std::size_t c_token,
              std::size_t c_row) {
  using Step = DotStep<Q>;
  simd::Vec acc[Rows][Tokens] = {};
  std::size_t full = width / Step::width * Step::width;
  for (std::size_t x = 0; x < full; x += Step::width) {
    decltype(Step::query(q.data)) qv[Rows];
    KVCALC_TILE_LOOP
    for (std::size_t i = 0; i < Rows; ++i) {
      qv[i] = Step::query(q.row(i) + x);
    }
    KVCALC_TILE_LOOP
    for (std::size_t j = 0; j < Tokens; ++j) {
      auto kv = Step::key(k.row(j) + x);
      KVCALC_TILE_LOOP
      for (std::size_t i = 0; i < Rows; ++i) {
        acc[i][j] = Step::add(acc[i][j], qv[i], kv);
      }
    }
  }
  KVCALC_TILE_LOOP
  for (std::size_t i = 0; i < Rows; ++i) {
    KVCALC_TILE_LOOP
    for (std::size_t j = 0; j < Tokens; ++j) {
      float dot = simd::sum(acc[i][j]);
      for (std::size_t x = full; x < width; ++x) {
        dot += widen(q.row(i)[x]) * widen(k.row(j)[x]);
      }
      c[j * c_token + i * c_row] = dot;
    }
  }
}

/// C(i, j) = A[i] · B[j] over `width` values for `rows` rows of A and `count` rows of B, stored
/// at c[j·c_token + i·c_row]: token tiles outside, so each tile of B is reused from L1 by every
/// row tile. A is fp32, or bf16 where the build has bf16 pair dot products
/// (KVCALC_SIMD_BF16_PAIRS) and B is bf16.
template <class A, class T>
void dot_products(Block<A> a, std::size_t rows, Block<T> b, std::size_t count, std::size_t width,
                  float* c, std::size_t c_token, std::size_t c_row) {
  for (std::size_t t0 = 0; t0 < count; t0 += k_dot_tokens) {
    Block<T> k{b.row(t0), b.stride};
    with_size<k_dot_tokens>(std::min(k_dot_tokens, count - t0), [&](auto nt) {
      for (std::size_t r0 = 0; r0 < rows; r0 += k_dot_rows) {
        Block<A> ar{a.row(r0), a.stride};
        float* out = c + t0 * c_token + r0 * c_row;
        with_size<k_dot_rows>(std::min(k_dot_rows, rows - r0), [&](auto nr) {
          dot_tile<decltype(nr)::value, decltype(nt)::value>(ar, k, width, out, c_token, c_row);
        });
      }
    });
  }
}

/// The weights P(t, i) of a weighted sum, at data[t·token + i·row].
struct Weights {
  const float* data;
  std::size_t token;
  std::size_t row;
  [[nodiscard]] float at(std::size_t t, std::size_t i) const { return data[t * token + i * row]; }
};

/// O[i][x] = O[i][x] · rescale[i] + Σ_t P(t, i) · V[t][x] over a Rows × Vectors·lanes tile.
template <std::size_t Rows, std::size_t Vectors, class T>
void weighted_sum_tile(Weights p, const float* rescale, Block<T> v, std::size_t tokens, float* o,
                       std::size_t o_stride, Fetcher& fetch) {
  simd::Vec acc[Rows][Vectors];
  KVCALC_TILE_LOOP
  for (std::size_t i = 0; i < Rows; ++i) {
    KVCALC_TILE_LOOP
    for (std::size_t c = 0; c < Vectors; ++c) {
      acc[i][c] = simd::load(o + i * o_stride + c * k_lanes) * rescale[i];
    }
  }
  for (std::size_t t = 0; t < tokens; ++t) {
    fetch.step();
    simd::Vec vv[Vectors];
    KVCALC_TILE_LOOP
    for (std::size_t c = 0; c < Vectors; ++c) {
      vv[c] = load(v.row(t) + c * k_lanes);
    }
    KVCALC_TILE_LOOP
    for (std::size_t i = 0; i < Rows; ++i) {
      simd::Vec weight = simd::splat(p.at(t, i));
      KVCALC_TILE_LOOP
      for (std::size_t c = 0; c < Vectors; ++c) {
        acc[i][c] += weight * vv[c];
      }
    }
  }
  KVCALC_TILE_LOOP
  for (std::size_t i = 0; i < Rows; ++i) {
    KVCALC_TILE_LOOP
    for (std::size_t c = 0; c < Vectors; ++c) {
      simd::store(o + i * o_stride + c * k_lanes, acc[i][c]);
    }
  }
}

/// O = diag(rescale) · O + Pᵀ · V for `rows` rows of `width` columns: column chunks outside,
/// so each chunk of V is reused from L1 by every row tile; the last columns short of a vector
/// are done one by one. `next_bytes` from `next` (the next page; none when null) are fetched
/// over the whole pass: V is in the L2 by now, so the fetches do not queue behind its misses.
template <class T>
void weighted_sum(Weights p, const float* rescale, std::size_t rows, Block<T> v, std::size_t tokens,
                  std::size_t width, float* o, std::size_t o_stride, const void* next = nullptr,
                  std::size_t next_bytes = 0) {
  std::size_t vectors = width / k_lanes;
  // Tiles of at most `r_max` rows × `c_max` vectors.
  auto pass = [&](auto row_tile, auto column_tile) {
    constexpr std::size_t r_max = decltype(row_tile)::value;
    constexpr std::size_t c_max = decltype(column_tile)::value;
    std::size_t steps = (vectors + c_max - 1) / c_max * ((rows + r_max - 1) / r_max) * tokens;
    Fetcher fetch = next != nullptr ? Fetcher(next, next_bytes, steps) : Fetcher();
    for (std::size_t c0 = 0; c0 < vectors; c0 += c_max) {
      Block<T> vc{v.data + c0 * k_lanes, v.stride};
      with_size<c_max>(std::min(c_max, vectors - c0), [&](auto nc) {
        for (std::size_t r0 = 0; r0 < rows; r0 += r_max) {
          Weights pr{p.data + r0 * p.row, p.token, p.row};
          float* out = o + r0 * o_stride + c0 * k_lanes;
          with_size<r_max>(std::min(r_max, rows - r0), [&](auto nr) {
            weighted_sum_tile<decltype(nr)::value, decltype(nc)::value>(
                pr, rescale + r0, vc, tokens, out, o_stride, fetch);
          });
        }
      });
    }
  };
  // One or two rows: wider tiles, so there are enough independent accumulator chains.
  if (rows <= 2) {
    pass(std::integral_constant<std::size_t, 2>{},
         std::integral_constant<std::size_t, k_few_out_vectors>{});
  } else {
    pass(std::integral_constant<std::size_t, k_out_rows>{},
         std::integral_constant<std::size_t, k_out_vectors>{});
  }
  for (std::size_t x = vectors * k_lanes; x < width; ++x) {
    for (std::size_t r = 0; r < rows; ++r) {
      float acc = o[r * o_stride + x] * rescale[r];
      for (std::size_t t = 0; t < tokens; ++t) {
        acc += p.at(t, r) * widen(v.row(t)[x]);
      }
      o[r * o_stride + x] = acc;
    }
  }
}

/// The online softmax of one page, over token-major scores St[t][stride] → weights in place:
/// each row's running maximum and sum move to this page, and `rescale` gets the factor that
/// brings the output accumulated so far to the new maximum. Whole vectors of rows at a time
/// (stride is a whole number of vectors; the padding rows' results are never used).
inline void online_softmax(float* st, std::size_t stride, std::size_t tokens, float* maximum,
                           float* sum, float* rescale) {
  for (std::size_t r = 0; r < stride; r += k_lanes) {
    simd::Vec old_peak = simd::load(maximum + r);
    simd::Vec peak = old_peak;
    for (std::size_t t = 0; t < tokens; ++t) {
      peak = simd::max(peak, simd::load(st + t * stride + r));
    }
    simd::Vec added{};
    for (std::size_t t = 0; t < tokens; ++t) {
      simd::Vec weight = simd::exp(simd::load(st + t * stride + r) - peak);
      simd::store(st + t * stride + r, weight);
      added += weight;
    }
    simd::Vec factor = simd::exp(old_peak - peak);
    simd::store(rescale + r, factor);
    simd::store(sum + r, simd::load(sum + r) * factor + added);
    simd::store(maximum + r, peak);
  }
}

/// The same over row-major scores S[row][t] (row stride `stride`), for few rows: vectors along
/// the tokens, then the tokens short of a vector one by one.
inline void online_softmax_rows(float* s, std::size_t stride, std::size_t rows, std::size_t tokens,
                                float* maximum, float* sum, float* rescale) {
  std::size_t full = tokens / k_lanes * k_lanes;
  for (std::size_t r = 0; r < rows; ++r) {
    float* row = s + r * stride;
    simd::Vec peaks = simd::splat(maximum[r]);
    for (std::size_t t = 0; t < full; t += k_lanes) {
      peaks = simd::max(peaks, simd::load(row + t));
    }
    float peak = simd::max_lane(peaks);
    for (std::size_t t = full; t < tokens; ++t) {
      peak = std::max(peak, row[t]);
    }
    simd::Vec added{};
    for (std::size_t t = 0; t < full; t += k_lanes) {
      simd::Vec weight = simd::exp(simd::load(row + t) - simd::splat(peak));
      simd::store(row + t, weight);
      added += weight;
    }
    float total = simd::sum(added);
    for (std::size_t t = full; t < tokens; ++t) {
      row[t] = std::exp(row[t] - peak);
      total += row[t];
    }
    rescale[r] = std::exp(maximum[r] - peak);
    sum[r] = sum[r] * rescale[r] + total;
    maximum[r] = peak;
  }
}

/// Widens `count` bf16 values to fp32.
inline void widen_all(const Bf16* from, std::size_t count, float* to) {
  std::size_t i = 0;
  for (; i + k_lanes <= count; i += k_lanes) {
    simd::store(to + i, simd::load_bf16(from + i));
  }
  for (; i < count; ++i) {
    to[i] = simd::bf16_to_float(from[i]);
  }
}

} // namespace KVCALC_SIMD_ISA
} // namespace kvcalc::kernels::tiles
