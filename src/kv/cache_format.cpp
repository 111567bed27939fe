#include <kvcalc/kv/cache_format.hpp>

#include <vector>

#include <kvcalc/core/spell.hpp>
#include <kvcalc/core/units.hpp>

using namespace kvcalc::model;

namespace kvcalc::kv {

ScaleSpec default_scale(DType dtype) {
  switch (dtype) {
  case DType::fp8_e4m3:
  case DType::fp8_e5m2:
    return {ScaleGranularity::per_tensor, 0, DType::fp32};
  case DType::int8:
    return {ScaleGranularity::per_token_head, 0, DType::fp32};
  case DType::int4:
    return {ScaleGranularity::per_group, 32, DType::fp16};
  case DType::nvfp4:
    return {ScaleGranularity::per_group, 16, DType::fp8_e4m3};
  default:
    return {ScaleGranularity::none, 0, DType::fp32};
  }
}

CacheFormat resolve_cache_format(const CacheRequest& request, const Model& m) {
  CacheFormat f;
  f.mla = m.attention.kind == AttentionKind::mla;
  f.mla_format = f.mla ? request.mla_format : MlaCacheFormat::latent;
  f.dtype = request.dtype.value_or(m.dtype);
  if (f.dtype == DType::mxfp4) {
    throw InputError("mxfp4 is a weight format, not a KV cache dtype; use nvfp4 or int4");
  }
  if (f.mla && f.mla_format == MlaCacheFormat::fp8_ds_mla) {
    if (request.dtype && *request.dtype != DType::fp8_e4m3) {
      throw InputError("--mla-cache fp8_ds_mla stores an fp8_e4m3 latent; drop --kv-dtype " +
                       std::string(dtype_name(*request.dtype)) + " or use --mla-cache latent");
    }
    if (request.scale || request.scale_group || request.scale_dtype) {
      throw InputError("--mla-cache fp8_ds_mla fixes its own scales (fp32 per 128 latent "
                       "values); drop --kv-scale and --kv-scale-dtype");
    }
    if (m.attention.mla.kv_lora_rank % 128 != 0) {
      throw InputError("--mla-cache fp8_ds_mla needs kv_lora_rank to be a multiple of 128; " +
                       m.name + " has " + std::to_string(m.attention.mla.kv_lora_rank));
    }
    f.dtype = DType::fp8_e4m3;
    f.scale = {ScaleGranularity::per_group, 128, DType::fp32};
    return f;
  }
  f.scale = default_scale(f.dtype);
  if (request.scale) {
    f.scale.granularity = *request.scale;
    if (*request.scale == ScaleGranularity::per_group) {
      f.scale.group = request.scale_group.value_or(f.scale.group);
    }
  }
  if (request.scale_dtype) {
    DType d = *request.scale_dtype;
    // A scale is a real number stored whole: a packed 4-bit or integer type holds none.
    if (d != DType::fp32 && d != DType::fp16 && d != DType::bf16 && d != DType::fp8_e4m3 &&
        d != DType::fp8_e5m2) {
      throw InputError("--kv-scale-dtype " + std::string(dtype_name(d)) +
                       " cannot hold a scale; use fp32, fp16, bf16 or fp8_e4m3");
    }
    f.scale.dtype = d;
  }
  bool quantized = f.dtype != DType::fp32 && f.dtype != DType::fp16 && f.dtype != DType::bf16;
  if (!quantized && f.scale.granularity != ScaleGranularity::none) {
    throw InputError("a " + std::string(dtype_name(f.dtype)) +
                     " cache has no scales; --kv-scale applies to fp8, int8, int4 and nvfp4");
  }
  if (f.scale.granularity == ScaleGranularity::per_group && f.scale.group == 0) {
    throw InputError("--kv-scale group needs a group size, e.g. group:32");
  }
  return f;
}

u64 scales_per_vector(const ScaleSpec& s, u64 elements) {
  switch (s.granularity) {
  case ScaleGranularity::per_token_head:
    return 1;
  case ScaleGranularity::per_group:
    return ceil_div(elements, s.group);
  default:
    return 0;
  }
}

u64 vector_bytes(const CacheFormat& f, u64 elements) {
  u64 values = dtype_storage_bytes(f.dtype, elements);
  u64 scales = checked_mul(scales_per_vector(f.scale, elements), dtype_bits(f.scale.dtype) / 8,
                           "KV scale bytes");
  return checked_add(values, scales, "KV bytes per vector");
}

std::string scale_name(const ScaleSpec& s) {
  switch (s.granularity) {
  case ScaleGranularity::none:
    return "none";
  case ScaleGranularity::per_tensor:
    return "tensor";
  case ScaleGranularity::per_token_head:
    return "token-head";
  case ScaleGranularity::per_group:
    return "group:" + std::to_string(s.group);
  }
  return "?";
}

std::string_view mla_format_name(MlaCacheFormat f) {
  return k_mla_formats.name(f);
}

MlaCacheFormat parse_mla_format(std::string_view text) {
  return k_mla_formats.parse(text);
}

std::optional<DType> parse_state_dtype(std::string_view text, std::string_view what) {
  if (text.empty() || text == "auto") {
    return std::nullopt;
  }
  DType d = parse_dtype(text, what);
  if (d != DType::fp32 && d != DType::fp16 && d != DType::bf16) {
    throw InputError(std::string(what) + " '" + std::string(text) +
                     "': a recurrent state is kept in fp32, fp16 or bf16 (or auto)");
  }
  return d;
}

std::pair<ScaleGranularity, u64> parse_scale(std::string_view text) {
  if (text == "none") {
    return {ScaleGranularity::none, 0};
  }
  if (text == "tensor") {
    return {ScaleGranularity::per_tensor, 0};
  }
  if (text == "token-head") {
    return {ScaleGranularity::per_token_head, 0};
  }
  if (text.starts_with("group:")) {
    return {ScaleGranularity::per_group, parse_count(text.substr(6), "--kv-scale group size")};
  }
  static const std::vector<std::string> names{"none", "tensor", "token-head", "group"};
  throw InputError("unknown --kv-scale '" + std::string(text) + "'" + did_you_mean(text, names) +
                   " (one of: none, tensor, token-head, group:G)");
}

std::string describe(const CacheFormat& f) {
  if (f.mla && f.mla_format == MlaCacheFormat::fp8_ds_mla) {
    return "fp8_ds_mla";
  }
  std::string out;
  if (f.mla) {
    out = std::string(mla_format_name(f.mla_format)) + " ";
  }
  out += dtype_name(f.dtype);
  switch (f.scale.granularity) {
  case ScaleGranularity::per_tensor:
    out += " (per-tensor scale)";
    break;
  case ScaleGranularity::per_token_head:
    out += " + " + std::string(dtype_name(f.scale.dtype)) + " scale per token per head";
    break;
  case ScaleGranularity::per_group:
    out += " + " + std::string(dtype_name(f.scale.dtype)) + " scale per " +
           std::to_string(f.scale.group);
    break;
  default:
    break;
  }
  return out;
}

} // namespace kvcalc::kv
