#pragma once
/// How a KV cache stores one token: element dtype, scale metadata, and for MLA which of the
/// three layouts (docs/formulas.md §1, "One stored vector").

#include <optional>
#include <string>
#include <string_view>

#include <kvcalc/core/dtype.hpp>
#include <kvcalc/core/names.hpp>
#include <kvcalc/model/model.hpp>

namespace kvcalc::kv {

enum class ScaleGranularity {
  none,           ///< unscaled (fp32, fp16, bf16)
  per_tensor,     ///< one scale per layer for K and V: no bytes per token
  per_token_head, ///< one scale per token per head, for K and for V
  per_group,      ///< one scale per `group` consecutive elements of a head vector
};

struct ScaleSpec {
  ScaleGranularity granularity = ScaleGranularity::none;
  u64 group = 0;             ///< elements per scale, for per_group
  DType dtype = DType::fp32; ///< element type of each scale
};

enum class MlaCacheFormat {
  latent,     ///< d_c + d_R per token per layer, one stream (vLLM, SGLang, TRT-LLM, FlashMLA)
  expanded,   ///< per-head K (d_nope + d_R) and V (d_v), as HF eager code stores them
  fp8_ds_mla, ///< fp8 latent, fp32 scale per 128 latent values, bf16 RoPE part (656 B at V3 dims)
};
inline constexpr NameTable<MlaCacheFormat, 3> k_mla_formats{
    "MLA cache format",
    {{{MlaCacheFormat::latent, "latent"},
      {MlaCacheFormat::expanded, "expanded"},
      {MlaCacheFormat::fp8_ds_mla, "fp8_ds_mla"}}}};

/// What the user asked for; unset fields take the model's and the dtype's defaults.
struct CacheRequest {
  std::optional<DType> dtype;
  std::optional<ScaleGranularity> scale;
  std::optional<u64> scale_group;
  std::optional<DType> scale_dtype;
  MlaCacheFormat mla_format = MlaCacheFormat::latent;
  /// Recurrent layers' state (vLLM's --mamba-cache-dtype): every part unless ssm_state_dtype.
  std::optional<DType> state_dtype;
  /// The SSM / recurrent part of the state (vLLM's --mamba-ssm-cache-dtype).
  std::optional<DType> ssm_state_dtype;
};

/// A cache layout fully resolved for one model.
struct CacheFormat {
  DType dtype = DType::bf16;
  ScaleSpec scale;
  bool mla = false; ///< the model is MLA
  MlaCacheFormat mla_format = MlaCacheFormat::latent;
};

/// The scale metadata a dtype carries unless told otherwise: none for fp32/fp16/bf16,
/// per-tensor for fp8, per-token-per-head fp32 for int8, groups of 32 with an fp16 scale for
/// int4, groups of 16 with an fp8_e4m3 scale for nvfp4.
[[nodiscard]] ScaleSpec default_scale(DType dtype);

/// Resolves `request` for `m`; throws InputError for combinations that do not exist
/// (fp8_ds_mla with another dtype, scales on an unquantized cache, a group of 0).
[[nodiscard]] CacheFormat resolve_cache_format(const CacheRequest& request, const model::Model& m);

/// Bytes of one stored vector of `elements` values (one head's K or V of one token), scales
/// included: ⌈elements · bits / 8⌉ + scales · scale bytes.
[[nodiscard]] u64 vector_bytes(const CacheFormat& f, u64 elements);

/// Scales stored with one vector of `elements` values.
[[nodiscard]] u64 scales_per_vector(const ScaleSpec& s, u64 elements);

/// "none", "tensor", "token-head", "group:32".
[[nodiscard]] std::string scale_name(const ScaleSpec& s);
[[nodiscard]] std::string_view mla_format_name(MlaCacheFormat f);
[[nodiscard]] MlaCacheFormat parse_mla_format(std::string_view text);
/// A recurrent state dtype as vLLM's --mamba-cache-dtype takes it: fp32, fp16 or bf16 (any
/// spelling parse_dtype reads); "" and "auto" give nullopt (the engine's rule). `what` names the
/// option in errors.
[[nodiscard]] std::optional<DType> parse_state_dtype(std::string_view text, std::string_view what);

/// Parses "none", "tensor", "token-head" or "group:G" into a granularity and group.
[[nodiscard]] std::pair<ScaleGranularity, u64> parse_scale(std::string_view text);

/// "bf16", "fp8_e4m3 + fp32 scale per token per head", "fp8_ds_mla", "expanded bf16".
[[nodiscard]] std::string describe(const CacheFormat& f);

} // namespace kvcalc::kv
