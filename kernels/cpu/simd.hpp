#pragma once
// The widest fp32 vector the kernels were compiled for (KVCALC_CPU_ARCH, kernels/README.md), as
// a GCC/Clang vector extension: the same source lowers to AVX-512, AVX2 or SSE2/NEON, and the
// register tiles of the kernels are sized from `k_registers`.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

// Everything here and in the headers built on it lives in a namespace named after the
// instruction set, so translation units compiled for different ones (the kernels for
// KVCALC_CPU_ARCH, a test at the baseline) never share an inline function whose vector type,
// and so calling convention, differs.
#if defined(__AVX512F__)
#define KVCALC_SIMD_ISA isa_avx512
#elif defined(__AVX2__) && defined(__FMA__)
#define KVCALC_SIMD_ISA isa_avx2
#elif defined(__AVX__)
#define KVCALC_SIMD_ISA isa_avx
#elif defined(__aarch64__)
#define KVCALC_SIMD_ISA isa_neon
#elif defined(__SSE2__)
#define KVCALC_SIMD_ISA isa_sse2
#else
#define KVCALC_SIMD_ISA isa_generic
#endif

/// 1 when the build has a bf16 pair dot product (AVX512-BF16's vdpbf16ps).
#if defined(__AVX512BF16__)
#define KVCALC_SIMD_BF16_PAIRS 1
#else
#define KVCALC_SIMD_BF16_PAIRS 0
#endif

namespace kvcalc::kernels::simd {
inline namespace KVCALC_SIMD_ISA {

#if defined(__AVX512F__)
inline constexpr int k_lanes = 16;
inline constexpr int k_registers = 32;
inline constexpr const char* k_isa = "AVX-512";
#elif defined(__AVX2__) && defined(__FMA__)
inline constexpr int k_lanes = 8;
inline constexpr int k_registers = 16;
inline constexpr const char* k_isa = "AVX2+FMA";
#elif defined(__AVX__)
inline constexpr int k_lanes = 8;
inline constexpr int k_registers = 16;
inline constexpr const char* k_isa = "AVX";
#elif defined(__aarch64__)
inline constexpr int k_lanes = 4;
inline constexpr int k_registers = 32;
inline constexpr const char* k_isa = "NEON";
#elif defined(__SSE2__)
inline constexpr int k_lanes = 4;
inline constexpr int k_registers = 16;
inline constexpr const char* k_isa = "SSE2";
#else
inline constexpr int k_lanes = 4;
inline constexpr int k_registers = 16;
inline constexpr const char* k_isa = "generic";
#endif

using Vec = float __attribute__((vector_size(k_lanes * sizeof(float))));
using IntVec = std::int32_t __attribute__((vector_size(k_lanes * sizeof(float))));
using UintVec = std::uint32_t __attribute__((vector_size(k_lanes * sizeof(float))));
using Bf16Vec = std::uint16_t __attribute__((vector_size(k_lanes * sizeof(std::uint16_t))));

/// Unaligned load and store: page rows and matrix rows start anywhere.
inline Vec load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, Vec v) {
  std::memcpy(p, &v, sizeof v);
}
/// Every lane x: one broadcast (`Vec{} + x` would add 0.0 first, since 0.0 + −0.0 is +0.0).
inline Vec splat(float x) {
#if defined(__AVX512F__)
  return std::bit_cast<Vec>(_mm512_set1_ps(x));
#elif defined(__AVX__)
  return std::bit_cast<Vec>(_mm256_set1_ps(x));
#elif defined(__SSE2__)
  return std::bit_cast<Vec>(_mm_set1_ps(x));
#else
  Vec v;
  for (int i = 0; i < k_lanes; ++i) {
    v[i] = x;
  }
  return v;
#endif
}
/// A bf16 value (the upper 16 bits of an fp32 one) as fp32, exactly.
inline float bf16_to_float(std::uint16_t bits) {
  std::uint32_t wide = static_cast<std::uint32_t>(bits) << 16;
  float v;
  std::memcpy(&v, &wide, sizeof v);
  return v;
}
/// One vector of bf16 values, widened to fp32: zero-extend each to 32 bits, shift left by 16.
inline Vec load_bf16(const std::uint16_t* p) {
#if defined(__AVX512F__)
  __m256i narrow;
  std::memcpy(&narrow, p, sizeof narrow);
  return std::bit_cast<Vec>(_mm512_slli_epi32(_mm512_cvtepu16_epi32(narrow), 16));
#elif defined(__AVX2__)
  __m128i narrow;
  std::memcpy(&narrow, p, sizeof narrow);
  return std::bit_cast<Vec>(_mm256_slli_epi32(_mm256_cvtepu16_epi32(narrow), 16));
#else
  Bf16Vec narrow;
  std::memcpy(&narrow, p, sizeof narrow);
  UintVec wide = __builtin_convertvector(narrow, UintVec) << 16;
  return std::bit_cast<Vec>(wide);
#endif
}
inline Vec max(Vec a, Vec b) {
  return a > b ? a : b;
}

/// e^x lane by lane, within 2 ulp (Cephes' expf): x = n·ln 2 + r with |r| ≤ ln 2 / 2, e^r by a
/// degree-7 polynomial, 2^n built in the exponent bits. Arguments are clamped to [−87, 88], so
/// e^−∞ gives about 1.6e−38 instead of 0; a NaN stays a NaN.
inline Vec exp(Vec input) {
  Vec x = input < -87.0f ? splat(-87.0f) : input;
  x = x > 88.0f ? splat(88.0f) : x;
  // Rounds x·log2(e) to the nearest integer by adding and subtracting 1.5·2^23.
  Vec n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  Vec r = x - n * 0.693359375f - n * -2.12194440e-4f;
  Vec p = 1.9875691500e-4f * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  IntVec exponent = __builtin_convertvector(n, IntVec) + 127;
  UintVec bits = __builtin_convertvector(exponent, UintVec) << 23;
  Vec scale;
  std::memcpy(&scale, &bits, sizeof scale);
  // A NaN is passed on explicitly: a compiler may lower the clamps to min/max instructions
  // that return the bound for a NaN (clang does).
  return input == input ? p * scale : input;
}

#if KVCALC_SIMD_BF16_PAIRS
/// 2 · k_lanes bf16 values: lane i holds elements 2i and 2i + 1.
using Pairs = __m512bh;
inline Pairs load_pairs(const std::uint16_t* p) {
  Pairs v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
/// acc + a[2i]·b[2i] + a[2i+1]·b[2i+1] in each fp32 lane i (products exact, fp32 sums).
inline Vec dot_pairs(Vec acc, Pairs a, Pairs b) {
  return std::bit_cast<Vec>(_mm512_dpbf16_ps(std::bit_cast<__m512>(acc), a, b));
}
#endif

namespace detail {
template <std::size_t Offset, class V, std::size_t... I>
auto lanes_from(V v, std::index_sequence<I...> /*count*/) {
  return __builtin_shufflevector(v, v, (Offset + I)...);
}
template <std::size_t Lanes, class V> float sum_lanes(V v) {
  if constexpr (Lanes == 1) {
    return v[0];
  } else {
    auto half = std::make_index_sequence<Lanes / 2>{};
    return sum_lanes<Lanes / 2>(lanes_from<0>(v, half) + lanes_from<Lanes / 2>(v, half));
  }
}
} // namespace detail

/// The sum of the lanes, adding the upper half to the lower half until one lane is left. The
/// halves are shuffles of the value (no memcpy through memory), so accumulators summed at the
/// end of a tile stay in registers throughout it.
inline float sum(Vec v) {
  return detail::sum_lanes<k_lanes>(v);
}

/// The largest lane (a NaN lane may or may not win, as with std::max).
inline float max_lane(Vec v) {
  float best = v[0];
  for (int i = 1; i < k_lanes; ++i) {
    best = best > v[i] ? best : v[i];
  }
  return best;
}

} // namespace KVCALC_SIMD_ISA
} // namespace kvcalc::kernels::simd
