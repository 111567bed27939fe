#pragma once
/// How a checkpoint stores one weight matrix: its element type and the scales, zero points and
/// indices beside it (docs/formulas.md, "Weights in a storage dtype"). kvcalc's own dtypes are
/// each one such layout; a quantized checkpoint's `quantization_config` gives others (AWQ's
/// zero points, GPTQ's group indices, compressed-tensors' group sizes, bitsandbytes' blocks).

#include <optional>
#include <string>
#include <string_view>

#include <kvcalc/core/dtype.hpp>

namespace kvcalc::model {

/// Where a matrix's scales sit.
enum class ScaleLayout {
  none,   ///< no scale (16- and 32-bit weights)
  tensor, ///< one per matrix
  row,    ///< one per output row
  group,  ///< one per `group` inputs of each row
  block,  ///< one per block_rows × block_cols tile
  flat,   ///< one per `group` elements of the flattened matrix (bitsandbytes)
};

struct WeightFormat {
  DType element = DType::bf16; ///< what each weight is stored as
  ScaleLayout layout = ScaleLayout::none;
  u64 group = 0;            ///< group / flat: elements per scale
  u64 block_rows = 0;       ///< block
  u64 block_cols = 0;       ///< block
  u64 scale_bytes = 0;      ///< one scale
  u64 zero_bits = 0;        ///< a zero point of this many bits beside each scale (AWQ, GPTQ)
  bool group_index = false; ///< an int32 group index per input column (GPTQ, act-order)
  u64 nested_group = 0;     ///< flat: a second-level scale per this many scales (double quant)
  u64 nested_bytes = 0;     ///< ... of this many bytes
  u64 matrix_bytes = 0;     ///< fixed bytes per matrix (global scales, shapes, code books)

  /// Bytes of one rows × cols matrix in this format.
  [[nodiscard]] u64 bytes(u64 rows, u64 cols) const;
  /// kvcalc's layout for a storage dtype: 16/32-bit plain; fp8 one fp32 scale per 128 × 128
  /// block; int8 an fp32 scale per row; int4 an fp16 scale per 128 inputs; nvfp4 an fp8 scale
  /// per 16 inputs and an fp32 tensor scale; mxfp4 an e8m0 scale per 32 inputs.
  [[nodiscard]] static WeightFormat of(DType dtype);
  /// Matmuls run in this dtype: fp8 weights on fp8 units, everything else dequantized to
  /// `activation`.
  [[nodiscard]] DType math_dtype(DType activation) const;

  bool operator==(const WeightFormat&) const = default;
};

/// "int4 group:128 scale:2 zero:4 g_idx": the format as a model file writes it
/// (docs/model-format.md, `weight_formats`).
[[nodiscard]] std::string format_spec(const WeightFormat& f);
/// Parses format_spec's text; an InputError names what is wrong.
[[nodiscard]] WeightFormat parse_format_spec(std::string_view text);
/// "int4, an fp16 scale and a 4-bit zero per 128 inputs": for people.
[[nodiscard]] std::string describe(const WeightFormat& f);

} // namespace kvcalc::model
