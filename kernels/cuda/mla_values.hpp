#pragma once
// The MLA decode test data as a pure function of (seed, tensor, index), so the GPU can generate
// gigabytes of cache in place while the host rebuilds any slice of it bit for bit for the
// double-precision reference. Compiled by the host compiler and by nvcc alike.

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define KVCALC_HOST_DEVICE __host__ __device__
#else
#define KVCALC_HOST_DEVICE
#endif

namespace kvcalc::kernels::cuda {

/// Which tensor a value belongs to: part of the hash, so tensors are independent.
enum class MlaTensor : std::uint64_t { query = 1, cache = 2, w_uk = 3, w_uv = 4 };

KVCALC_HOST_DEVICE inline std::uint64_t mix64(std::uint64_t x) {
  // splitmix64's finaliser: a bijection with full avalanche.
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

/// Uniform on [−√3·scale, √3·scale) (unit variance times `scale`), rounded to bf16 (nearest,
/// ties to even) and returned as its 16 bits. Every step is exact or a single IEEE rounding, so
/// host and device agree bit for bit.
KVCALC_HOST_DEVICE inline std::uint16_t mla_value_bits(std::uint64_t seed, MlaTensor tensor,
                                                       std::uint64_t index, float half_width) {
  std::uint64_t h = mix64(seed ^ mix64((static_cast<std::uint64_t>(tensor) << 56) ^ index));
  float unit = static_cast<float>(h >> 40) * (1.0f / 16777216.0f); // [0, 1), exact
  float centred = 2.0f * unit - 1.0f;                              // exact
  float v = centred * half_width;                                  // one rounding
  std::uint32_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(bits >> 16);
}

/// The bf16 bits as a float (exact).
KVCALC_HOST_DEVICE inline float bf16_bits_to_float(std::uint16_t bits) {
  std::uint32_t wide = static_cast<std::uint32_t>(bits) << 16;
  float v = 0;
  std::memcpy(&v, &wide, sizeof v);
  return v;
}

} // namespace kvcalc::kernels::cuda
