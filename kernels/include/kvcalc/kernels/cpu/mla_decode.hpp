#pragma once
// MLA decode on the CPU, both strategies, over a paged latent cache (kernels/README.md).
// Launch functions take plain parameter structs; inputs are checked here, on the host side.

#include <cstddef>
#include <cstdint>
#include <new>
#include <string>
#include <vector>

#include <kvcalc/kernels/cpu/probes.hpp>

namespace kvcalc::kernels {

/// Shapes of one MLA decode step (DeepSeek dimensions by default).
struct MlaShape {
  std::uint64_t batch = 1;      ///< sequences
  std::uint64_t heads = 128;    ///< query heads
  std::uint64_t query = 1;      ///< new tokens per sequence (s); each attends the whole context
  std::uint64_t context = 4096; ///< cached tokens per sequence (t)
  std::uint64_t d_c = 512;      ///< latent width (kv_lora_rank)
  std::uint64_t d_r = 64;       ///< decoupled RoPE width
  std::uint64_t d_nope = 128;
  std::uint64_t d_v = 128;
  std::uint64_t block = 64; ///< tokens per cache page
  double softmax_scale = 0; ///< 0: 1/√(d_nope + d_r)
};

/// An allocator on cache-line (64-byte) boundaries, as an engine allocates its cache pages: a
/// page row whose vectors straddle two lines costs the kernels two L1 accesses per load.
template <class T> struct LineAligned {
  using value_type = T;
  static constexpr std::align_val_t k_alignment{64};
  LineAligned() = default;
  template <class U> explicit LineAligned(const LineAligned<U>& /*other*/) {}
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new(n * sizeof(T), k_alignment)); }
  void deallocate(T* p, std::size_t /*n*/) { ::operator delete(p, k_alignment); }
  friend bool operator==(const LineAligned& /*a*/, const LineAligned& /*b*/) { return true; }
};

/// bf16 values as their bits (the upper half of an fp32 value), line-aligned.
using Bf16Buffer = std::vector<std::uint16_t, LineAligned<std::uint16_t>>;

/// Inputs of one step. The cache and the weights are bf16, as a serving engine stores them
/// (the bits: the upper half of an fp32 value); the query is fp32 holding bf16-rounded values.
/// The kernels widen bf16 to fp32 as they load it and accumulate in fp32.
struct MlaInputs {
  MlaShape shape;
  std::vector<float> q; ///< [batch][query][heads][d_nope + d_r]
  Bf16Buffer cache;     ///< [pages][block][d_c + d_r]; tails past `context` are NaN
  std::vector<std::uint32_t> block_table; ///< [batch][pages per sequence] → page
  Bf16Buffer w_uk; ///< [heads][d_nope][d_c]: latent → per-head key (nope part)
  Bf16Buffer w_uv; ///< [heads][d_v][d_c]: latent → per-head value
  [[nodiscard]] std::uint64_t pages_per_sequence() const;
};

/// Deterministic random inputs (values ~N(0, 1)/√width rounded to bf16), a randomly permuted
/// block table and NaN-filled page tails.
[[nodiscard]] MlaInputs make_mla_inputs(const MlaShape& shape, std::uint64_t seed);

/// Output [batch][query][heads][d_v].
using MlaOutput = std::vector<float>;

/// W_UK folded into the query, attention over the d_c + d_r latent, W_UV after.
void mla_decode_absorbed(const MlaInputs& in, MlaOutput& out, unsigned threads);

/// FLOPs of the absorbed kernel's attention over one full page of `shape`: the scores against
/// the d_c + d_R latent and the weighted sum of the d_c latent, for every query row.
[[nodiscard]] double absorbed_page_flops(const MlaShape& shape);

/// FLOP/s (absorbed_page_flops a page) of the absorbed kernel's attention over one page held in
/// the caches, at `shape`'s query rows (query × heads), one page a thread on every thread, over
/// `repeats` runs after a warm-up. It is the kernel's own code for a page (scores, online
/// softmax, weighted sum, widening and exponentials included) without the page's trip from
/// memory: the in-core ceiling its compute-bound shapes are held to, as the naive kernel's are
/// held to a GEMM at its own shape.
[[nodiscard]] Spread measure_absorbed_page_flops(const MlaShape& shape, unsigned threads,
                                                 unsigned repeats);

/// Tokens per chunk of the naive kernel's decompression: the chunk's fp32 latent (2.4 MB at
/// DeepSeek's width) and its K and V fit in the L3 of any server CPU.
inline constexpr std::uint64_t k_naive_chunk_tokens = 1024;

/// Decompress the latent of each sequence into per-head K (nope) and V, then attend per head.
void mla_decode_naive(const MlaInputs& in, MlaOutput& out, unsigned threads);

/// The same function in double precision, loop by loop, for the first `sequences` sequences:
/// the reference both kernels match.
[[nodiscard]] std::vector<double> mla_decode_reference(const MlaInputs& in,
                                                       std::uint64_t sequences = UINT64_MAX);

/// Over the reference's values (a prefix of `got`): 1 − 2Σxy / Σ(x² + y²) (FlashMLA's cosine
/// difference), max |x − y|, and how many elements miss the per-element bar: |x − y| ≤
/// `abs_bar`, or |x − y| ≤ `rel_bar` · max(|y|, rms(y)). That is FlashMLA's test bar
/// with the relative part's denominator floored at the output's RMS, because an end-to-end
/// bf16 pipeline rounds intermediates (the absorbed query, the latent output) whose error
/// spreads over every element rather than scaling with each one. A NaN anywhere makes the
/// figures NaN and `finite` false.
struct Agreement {
  double cos_diff = 0;
  double max_abs_error = 0;
  std::uint64_t elements_over_bar = 0;
  bool finite = true;
};
inline constexpr double k_abs_bar = 8e-4;       ///< FlashMLA's absolute bar
inline constexpr double k_rel_bar = 2.01 / 128; ///< FlashMLA's relative bar
[[nodiscard]] Agreement compare(const std::vector<float>& got, const std::vector<double>& want,
                                double abs_bar = k_abs_bar, double rel_bar = k_rel_bar);

/// Where the elements that miss compare's bar (or are not finite) lie in an output laid out as
/// [sequence][query][head][d_v] of `shape`, over the reference's values: how many, the
/// sequences, query rows, heads and columns they touch (as ranges), and the worst of them. A
/// failing kernel's pattern (one row block, one column half, the last page) shows in an error
/// message. Empty when every element meets the bar. Each element is judged on its own: where
/// compare counts every element once one is not finite, this counts the non-finite ones and
/// those over the bar (the RMS taken over the finite reference values).
[[nodiscard]] std::string describe_misses(const std::vector<float>& got,
                                          const std::vector<double>& want, const MlaShape& shape,
                                          double abs_bar = k_abs_bar, double rel_bar = k_rel_bar);

/// The bf16 nearest to v (ties to even; a NaN stays a NaN), as its bits.
[[nodiscard]] std::uint16_t bf16_bits(float v);
/// The value of bf16 bits, exactly.
[[nodiscard]] float bf16_value(std::uint16_t bits);
/// Rounds to the nearest bf16 value (ties to even), kept as a float.
[[nodiscard]] float round_bf16(float v);

} // namespace kvcalc::kernels
