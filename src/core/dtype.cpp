#include <kvcalc/core/dtype.hpp>

#include <algorithm>
#include <array>
#include <vector>

#include <kvcalc/core/spell.hpp>

namespace kvcalc {

namespace {

struct DTypeInfo {
  DType type;
  std::string_view name;
  unsigned bits;
};

constexpr std::array k_dtypes{
    DTypeInfo{DType::fp32, "fp32", 32},        DTypeInfo{DType::fp16, "fp16", 16},
    DTypeInfo{DType::bf16, "bf16", 16},        DTypeInfo{DType::fp8_e4m3, "fp8_e4m3", 8},
    DTypeInfo{DType::fp8_e5m2, "fp8_e5m2", 8}, DTypeInfo{DType::int8, "int8", 8},
    DTypeInfo{DType::int4, "int4", 4},         DTypeInfo{DType::nvfp4, "nvfp4", 4},
    DTypeInfo{DType::mxfp4, "mxfp4", 4},
};

struct Alias {
  std::string_view alias;
  DType type;
};

// Spellings seen in HF configs (torch_dtype) and in engine flags (vLLM --kv-cache-dtype).
constexpr std::array k_aliases{
    Alias{"float32", DType::fp32},           Alias{"float", DType::fp32},
    Alias{"float16", DType::fp16},           Alias{"half", DType::fp16},
    Alias{"bfloat16", DType::bf16},          Alias{"fp8", DType::fp8_e4m3},
    Alias{"e4m3", DType::fp8_e4m3},          Alias{"fp8_e4m3fn", DType::fp8_e4m3},
    Alias{"float8_e4m3fn", DType::fp8_e4m3}, Alias{"e5m2", DType::fp8_e5m2},
    Alias{"float8_e5m2", DType::fp8_e5m2},   Alias{"fp4", DType::nvfp4},
};

const DTypeInfo& info(DType t) {
  return *std::find_if(k_dtypes.begin(), k_dtypes.end(),
                       [t](const DTypeInfo& i) { return i.type == t; });
}

} // namespace

unsigned dtype_bits(DType t) {
  return info(t).bits;
}

std::string_view dtype_name(DType t) {
  return info(t).name;
}

u64 dtype_storage_bytes(DType t, u64 elements) {
  return ceil_div(checked_mul(elements, dtype_bits(t), "element bits"), 8);
}

std::span<const std::string> dtype_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& i : k_dtypes) {
      out.emplace_back(i.name);
    }
    return out;
  }();
  return names;
}

DType parse_dtype(std::string_view text, std::string_view what) {
  std::string key = ascii_lower(text);
  std::replace(key.begin(), key.end(), '-', '_');
  for (const auto& i : k_dtypes) {
    if (i.name == key) {
      return i.type;
    }
  }
  for (const auto& a : k_aliases) {
    if (a.alias == key) {
      return a.type;
    }
  }
  std::string all;
  for (const auto& n : dtype_names()) {
    all += (all.empty() ? "" : ", ") + n;
  }
  // Aliases are candidates too, named with what they stand for: "fp9" is nearest "fp8", which
  // users type for fp8_e4m3.
  std::vector<std::string> candidates(dtype_names().begin(), dtype_names().end());
  for (const auto& a : k_aliases) {
    candidates.emplace_back(a.alias);
  }
  std::vector<std::string> matches = closest_matches(key, candidates);
  std::string hint;
  for (std::size_t i = 0; i < matches.size() && i < 3; ++i) {
    hint += i == 0                                              ? "; did you mean "
            : i + 1 == std::min<std::size_t>(matches.size(), 3) ? " or "
                                                                : ", ";
    hint += "'" + matches[i] + "'";
    for (const auto& a : k_aliases) {
      if (a.alias == matches[i]) {
        hint += " (" + std::string(info(a.type).name) + ")";
      }
    }
  }
  throw InputError("unknown " + std::string(what) + " '" + std::string(text) + "'" + hint +
                   (hint.empty() ? "" : "?") + " (one of: " + all + ")");
}

std::optional<DType> parse_dtype_or_auto(std::string_view text, std::string_view what) {
  if (iequals(text, "auto")) {
    return std::nullopt;
  }
  return parse_dtype(text, what);
}

} // namespace kvcalc
