#pragma once
// Roofline probes on the CPU: STREAM-style bandwidth, an FMA loop and a GEMM.

#include <cstdint>
#include <vector>

namespace kvcalc::kernels {

/// Repeated runs of one figure: the median people read, and the extremes that say how far the
/// runs disagree.
struct Spread {
  double median = 0;
  double min = 0;
  double max = 0;
  unsigned runs = 0;
};

/// The spread of a non-empty vector of samples (the median the upper middle for an even count).
[[nodiscard]] Spread spread_of(std::vector<double> values);

/// `work` per second over runs that took `seconds`: the slowest run gives the lowest rate.
[[nodiscard]] Spread rate_of(double work, const Spread& seconds);

struct BandwidthResult {
  Spread read_bytes_per_s;  ///< sum of one array
  Spread copy_bytes_per_s;  ///< b = a: read + write counted
  Spread triad_bytes_per_s; ///< a = b + s·c: two reads + one write counted
  double checksum = 0;      ///< keeps every pass observable
};

/// Arrays of `bytes_per_array` bytes of floats split over `threads`; the median of `repeats`
/// passes, as kernel times are medians (a best-of ceiling against median kernel times makes every
/// roofline fraction look worse on a machine whose bandwidth varies).
[[nodiscard]] BandwidthResult measure_bandwidth(std::uint64_t bytes_per_array, unsigned threads,
                                                unsigned repeats);

/// FP32 FLOP/s of independent fused multiply-adds in registers, all threads.
[[nodiscard]] double measure_fma_flops(unsigned threads, double seconds_per_thread);

/// FLOP/s of bf16 pair dot products into fp32 (AVX512-BF16's vdpbf16ps: two products and two
/// sums per lane), the instruction the absorbed kernel's scores use where the build has it;
/// 0 where it does not (KVCALC_SIMD_BF16_PAIRS).
[[nodiscard]] double measure_fma_bf16_flops(unsigned threads, double seconds_per_thread);

/// Read-only bandwidth of an array of `bytes` split over `threads`, each thread summing its
/// part many times per run (256 MiB a run), after one untimed pass: with an array that fits a
/// cache level, that level's read rate. Over `repeats` runs.
[[nodiscard]] Spread measure_read_bandwidth(std::uint64_t bytes, unsigned threads,
                                            unsigned repeats);

/// An m × k by k × n product.
struct GemmShape {
  std::uint64_t m = 0;
  std::uint64_t k = 0;
  std::uint64_t n = 0;
};

/// FP32 FLOP/s (2·m·k·n a product) of A · Bᵀ (Eigen, A m × k and B n × k, both row-major), one
/// product per thread, over `repeats` runs after a warm-up.
[[nodiscard]] Spread measure_gemm_flops(const GemmShape& shape, unsigned threads, unsigned repeats);

/// The median of a non-empty vector of timings (the upper middle for an even count).
[[nodiscard]] double median(std::vector<double> values);

/// Makes this process keep the memory it frees, up to 32 MiB a block (glibc's malloc: fixed
/// mmap and trim thresholds instead of adaptive ones; elsewhere a no-op), so a kernel called
/// again reuses its buffers instead of faulting in fresh pages. Without it, whether a call's
/// buffers are fresh depends on the largest block freed before, so the same kernel call can
/// run several times slower after a small GEMM probe than after a large one
/// (docs/performance.md, "`kvcalc measure` on the CPU").
void keep_freed_memory();

/// One level of the CPU's data caches beyond the L1, as sysfs describes cpu0's.
struct CacheLevel {
  unsigned level = 0;           ///< 2, 3, ...
  std::uint64_t bytes_each = 0; ///< one instance's size
  unsigned instances = 1;       ///< instances `threads` CPUs (0, 1, ...) spread over
  [[nodiscard]] std::uint64_t bytes() const { return bytes_each * instances; }
};

/// The data and unified caches of level 2 and above, innermost first, for `threads` CPUs;
/// empty where sysfs does not say.
[[nodiscard]] std::vector<CacheLevel> cache_levels(unsigned threads);

} // namespace kvcalc::kernels
