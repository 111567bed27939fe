#pragma once
/// Element types of weights, activations and KV caches.

#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <kvcalc/core/checked.hpp>

namespace kvcalc {

enum class DType {
  fp32,
  fp16,
  bf16,
  fp8_e4m3,
  fp8_e5m2,
  int8,
  int4,
  nvfp4, ///< e2m1 values; group scales are metadata, counted separately
  mxfp4, ///< e2m1 values with e8m0 scales per 32 (OCP microscaling); scales counted separately
};

/// Bits of one stored element, scales excluded.
[[nodiscard]] unsigned dtype_bits(DType t);

/// Canonical spelling ("bf16", "fp8_e4m3").
[[nodiscard]] std::string_view dtype_name(DType t);

/// Bytes to store `elements` packed elements: ⌈elements · bits / 8⌉.
[[nodiscard]] u64 dtype_storage_bytes(DType t, u64 elements);

/// Parses a dtype name, accepting common aliases (fp8 = fp8_e4m3, bfloat16, float16, half,
/// float32, e4m3, e5m2, ...). Throws InputError with a did-you-mean naming `what`.
[[nodiscard]] DType parse_dtype(std::string_view text, std::string_view what = "dtype");
/// As parse_dtype, with `auto` (vLLM's spelling of "the model's own") as nullopt.
[[nodiscard]] std::optional<DType> parse_dtype_or_auto(std::string_view text,
                                                       std::string_view what = "dtype");

/// Canonical names, for help texts and suggestions.
[[nodiscard]] std::span<const std::string> dtype_names();

} // namespace kvcalc
