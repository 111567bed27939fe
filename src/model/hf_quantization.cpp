// quantization_config → the stored layout of each weight matrix (docs/formulas.md §9, "A
// checkpoint's own layout"). What each method stores, from the code that writes it:
// - AWQ (AutoAWQ awq/modules/linear/gemm.py; vLLM awq.py): qweight int4, qzeros int4 and fp16
//   scales per group_size inputs; modules_to_not_convert by substring;
// - GPTQ (GPTQModel nn_modules/qlinear; vLLM gptq.py): the same plus an int32 g_idx per input,
//   zeros stored even when symmetric; modules_in_block_to_quantize; lm_head only if asked;
// - compressed-tensors (compressors/quantized_compressors; quantization/lifecycle/
//   initialize.py): scales in the model dtype (fp8 for fp4) by strategy, zero points only when
//   asymmetric, weight_g_idx with actorder group, weight_shape (int64 × 2) when packed, a global
//   fp32 scale for tensor_group; targets and ignore by name or `re:` pattern;
// - bitsandbytes (functional.py quantize_4bit, QuantState.as_dict): 4-bit codes with a scale
//   per 64 elements, uint8 under double quant with an fp32 one per 256 of those, and the code
//   books; 8-bit rows with an fp32 SCB each; all linear layers but lm_head and
//   llm_int8_skip_modules;
// - mxfp4 (gpt-oss): routed experts only, an e8m0 scale per 32;
// - fp8 (DeepSeek, Qwen): weight_block_size tiles of fp32 scales (one per tensor without it);
//   modules_to_not_convert by module name;
// - ModelOpt (modelopt/torch/export; vLLM modelopt.py): FP8 one fp32 weight and input scale per
//   tensor, FP8_PER_CHANNEL_PER_TOKEN one per row, FP8_PB_WO 128 × 128 tiles, NVFP4 an fp8
//   scale per 16 and two fp32 scalars (one for W4A16_NVFP4); exclude_modules / ignore as
//   wildcards; MIXED_PRECISION per module.

#include "hf_quantization.hpp"

#include <algorithm>
#include <functional>
#include <regex>

#include <kvcalc/core/spell.hpp>
#include <kvcalc/model/params.hpp>

namespace kvcalc::model {

namespace {

/// The module paths a checkpoint may give a tensor of this model, at layer `layer`.
std::vector<std::string> module_paths(const TensorGroup& t, u64 layer) {
  std::string at = "model.layers." + std::to_string(layer) + ".";
  const std::string& n = t.name;
  auto after = [&](std::string_view prefix) { return n.substr(prefix.size()); };
  std::vector<std::string> paths;
  if (n.starts_with("attention.")) {
    paths = {at + "self_attn." + after("attention.")};
  } else if (n.starts_with("mlp.")) {
    paths = {at + "mlp." + after("mlp.")};
  } else if (n.starts_with("moe.experts.")) {
    paths = {at + "mlp.experts.0." + after("moe.experts."),
             at + "block_sparse_moe.experts.0." + after("moe.experts.")};
  } else if (n.starts_with("moe.shared_experts.")) {
    paths = {at + "mlp.shared_experts." + after("moe.shared_experts."),
             at + "mlp.shared_expert." + after("moe.shared_experts.")};
  } else if (n == "moe.router") {
    paths = {at + "mlp.gate", at + "mlp.router", at + "block_sparse_moe.gate"};
  } else if (n == "moe.shared_expert_gate") {
    paths = {at + "mlp.shared_expert_gate"};
  } else if (n.starts_with("state.")) {
    paths = {at + "mixer." + after("state."), at + "linear_attn." + after("state.")};
  } else if (n.starts_with("indexer.")) {
    paths = {at + "self_attn.indexer." + after("indexer.")};
  } else if (n == "mtp.eh_proj") {
    paths = {at + "eh_proj"};
  } else if (n == "lm_head") {
    paths = {"lm_head"};
  } else {
    paths = {at + n};
  }
  std::size_t own = paths.size();
  for (std::size_t i = 0; i < own; ++i) {
    paths.push_back("language_model." + paths[i]); // multimodal wrappers
  }
  return paths;
}

/// Whether a tensor is a weight matrix a quantizer may replace: a linear layer, the head, a
/// router, MTP's projection.
bool is_matrix(const TensorGroup& t) {
  return t.rows > 1 && (t.linear || t.name == "lm_head" || t.name == "moe.router" ||
                        t.name == "moe.shared_expert_gate" || t.name == "mtp.eh_proj");
}

bool wildcard(std::string_view pattern, std::string_view text) {
  // Iterative '*' / '?' matching, fnmatch without character classes.
  std::size_t p = 0;
  std::size_t s = 0;
  std::size_t star = std::string_view::npos;
  std::size_t mark = 0;
  while (s < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[s])) {
      ++p;
      ++s;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = s;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      s = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') {
    ++p;
  }
  return p == pattern.size();
}

/// How a method names modules in its lists.
enum class Match {
  substring, ///< AWQ, bitsandbytes: the name anywhere in the path
  module,    ///< fp8, GPTQ: the module or one of its parents
  wildcard,  ///< ModelOpt, mxfp4: fnmatch patterns, a module's children included
  pattern,   ///< compressed-tensors: a module name, or `re:` a regular expression
};

bool matches(std::string_view pattern, const std::string& path, Match how) {
  switch (how) {
  case Match::substring:
    return path.find(pattern) != std::string::npos;
  case Match::module:
    return path == pattern || path.starts_with(std::string(pattern) + ".") ||
           path.ends_with("." + std::string(pattern));
  case Match::wildcard:
    return wildcard(pattern, path) || wildcard(std::string(pattern) + ".*", path);
  case Match::pattern:
    if (pattern.starts_with("re:")) {
      try {
        return std::regex_search(path, std::regex("^(?:" + std::string(pattern.substr(3)) + ")"));
      } catch (const std::regex_error&) {
        throw InputError("quantization_config: '" + std::string(pattern) +
                         "' is not a regular expression kvcalc can read");
      }
    }
    return path == pattern || path.ends_with("." + std::string(pattern));
  }
  return false;
}

/// The strings of a list (or one string) under `key`; empty when absent or null.
std::vector<std::string> strings(const YAML::Node& map, const char* key) {
  std::vector<std::string> out;
  YAML::Node n = map[key];
  std::function<void(const YAML::Node&)> add = [&](const YAML::Node& x) {
    if (x.IsScalar()) {
      out.push_back(x.Scalar());
    } else if (x.IsSequence()) {
      for (const auto& item : x) {
        add(item);
      }
    }
  };
  if (n && !n.IsNull()) {
    add(n);
  }
  return out;
}

bool any_match(const std::vector<std::string>& patterns, const std::vector<std::string>& paths,
               Match how) {
  for (const auto& pat : patterns) {
    for (const auto& path : paths) {
      if (matches(pat, path, how)) {
        return true;
      }
    }
  }
  return false;
}

u64 number(const YAML::Node& map, const char* key, u64 fallback) {
  YAML::Node n = map[key];
  if (!n || n.IsNull()) {
    return fallback;
  }
  try {
    long long v = n.as<long long>();
    return v < 0 ? 0 : static_cast<u64>(v);
  } catch (const YAML::Exception&) {
    throw InputError(std::string("quantization_config: '") + key + "' must be a whole number");
  }
}

/// A whole number of at least 1 (a group or block size), or an InputError naming `what`.
u64 positive(const YAML::Node& n, const std::string& what) {
  long long v = 0;
  try {
    v = n.as<long long>();
  } catch (const YAML::Exception&) {
    throw InputError("quantization_config: " + what + " must be a whole number");
  }
  if (v < 1) {
    throw InputError("quantization_config: " + what + " must be at least 1, got " +
                     std::to_string(v));
  }
  return static_cast<u64>(v);
}

std::string text(const YAML::Node& map, const char* key) {
  YAML::Node n = map[key];
  return n && n.IsScalar() ? n.Scalar() : std::string();
}

bool truth(const YAML::Node& map, const char* key, bool fallback) {
  YAML::Node n = map[key];
  if (!n || n.IsNull()) {
    return fallback;
  }
  try {
    return n.as<bool>();
  } catch (const YAML::Exception&) {
    return fallback;
  }
}

/// An integer format of `bits` bits (4 or 8), nullopt otherwise.
std::optional<DType> int_element(u64 bits) {
  if (bits == 4) {
    return DType::int4;
  }
  if (bits == 8) {
    return DType::int8;
  }
  return std::nullopt;
}

/// One method's reading: the format a tensor takes (nullopt: kept in the model dtype).
using Decide =
    std::function<std::optional<WeightFormat>(const TensorGroup&, const std::vector<std::string>&)>;

/// Thrown for a layout this reader does not model: becomes the warning.
struct Unmodelled {
  std::string why;
};

/// AWQ and GPTQ: int4 (or int8) codes, a 16-bit scale and a zero point per group of inputs.
Decide awq_or_gptq(const YAML::Node& q, bool gptq) {
  u64 bits = number(q, "bits", number(q, "w_bit", 4));
  std::optional<DType> element = int_element(bits);
  if (!element) {
    throw Unmodelled{std::to_string(bits) + "-bit weights"};
  }
  // group_size -1: one group per row.
  YAML::Node g = q["group_size"] && !q["group_size"].IsNull() ? q["group_size"] : q["q_group_size"];
  long long group = 128;
  if (g && !g.IsNull()) {
    bool per_row = g.IsScalar() && g.Scalar() == "-1";
    group = per_row ? -1 : static_cast<long long>(positive(g, "group_size"));
  }
  WeightFormat f;
  f.element = *element;
  f.layout = group > 0 ? ScaleLayout::group : ScaleLayout::row; // -1: one group per row
  f.group = group > 0 ? static_cast<u64>(group) : 0;
  f.scale_bytes = 2;
  f.zero_bits = bits;
  f.group_index = gptq;
  std::vector<std::string> skip = strings(q, "modules_to_not_convert");
  std::vector<std::string> only = strings(q, "modules_in_block_to_quantize");
  bool head = truth(q, "lm_head", false);
  return [=](const TensorGroup& t, const std::vector<std::string>& paths) {
    if (t.name == "lm_head") {
      return head ? std::optional<WeightFormat>(f) : std::nullopt;
    }
    if (!t.linear || t.name == "moe.router" || any_match(skip, paths, Match::substring)) {
      return std::optional<WeightFormat>();
    }
    if (!only.empty() && !any_match(only, paths, Match::substring)) {
      return std::optional<WeightFormat>();
    }
    return std::optional<WeightFormat>(f);
  };
}

/// compressed-tensors: one format per config group, by its targets, less `ignore`.
Decide compressed_tensors(const YAML::Node& q, DType model_dtype) {
  struct Group {
    std::vector<std::string> targets;
    WeightFormat format;
  };
  std::vector<Group> groups;
  std::string top_format = text(q, "format");
  YAML::Node config_groups = q["config_groups"];
  if (!config_groups || !config_groups.IsMap() || config_groups.size() == 0) {
    throw Unmodelled{"a compressed-tensors config without config_groups"};
  }
  for (const auto& entry : config_groups) {
    const YAML::Node& g = entry.second;
    YAML::Node w = g["weights"];
    if (!w || w.IsNull()) {
      continue; // activations only
    }
    std::string format = text(g, "format").empty() ? top_format : text(g, "format");
    u64 bits = number(w, "num_bits", 8);
    std::string type = text(w, "type");
    std::string strategy = text(w, "strategy");
    WeightFormat f;
    if (type == "float" && bits == 8) {
      f.element = DType::fp8_e4m3;
    } else if (type == "float" && bits == 4) {
      f.element = format.find("mxfp4") != std::string::npos ? DType::mxfp4 : DType::nvfp4;
    } else if (type == "int" && int_element(bits)) {
      f.element = *int_element(bits);
    } else {
      throw Unmodelled{std::to_string(bits) + "-bit " + type + " weights"};
    }
    bool fp4 = f.element == DType::nvfp4 || f.element == DType::mxfp4;
    f.scale_bytes = fp4 ? 1 : dtype_storage_bytes(model_dtype, 1);
    if (strategy == "tensor") {
      f.layout = ScaleLayout::tensor;
    } else if (strategy == "channel") {
      f.layout = ScaleLayout::row;
    } else if (strategy == "group" || strategy == "tensor_group") {
      f.layout = ScaleLayout::group;
      f.group = number(w, "group_size", 0);
      if (f.group == 0) {
        throw Unmodelled{"a group strategy without group_size"};
      }
    } else if (strategy == "block") {
      YAML::Node b = w["block_structure"];
      if (!b || !b.IsSequence() || b.size() != 2) {
        throw Unmodelled{"a block strategy without a [rows, cols] block_structure"};
      }
      f.layout = ScaleLayout::block;
      f.block_rows = positive(b[0], "block_structure");
      f.block_cols = positive(b[1], "block_structure");
    } else {
      throw Unmodelled{"weight strategy '" + strategy + "'"};
    }
    if (!truth(w, "symmetric", true)) {
      f.zero_bits = bits;
    }
    f.group_index = text(w, "actorder") == "group";
    if (format.find("pack-quantized") != std::string::npos && !fp4) {
      f.matrix_bytes += 16; // weight_shape, int64 × 2
    }
    if (strategy == "tensor_group") {
      f.matrix_bytes += 4; // weight_global_scale
      YAML::Node in = g["input_activations"];
      if (in && !in.IsNull()) {
        f.matrix_bytes += 4; // input_global_scale
      }
    }
    groups.push_back({strings(g, "targets"), f});
  }
  std::vector<std::string> ignore = strings(q, "ignore");
  return [=](const TensorGroup& t, const std::vector<std::string>& paths) {
    if (any_match(ignore, paths, Match::pattern)) {
      return std::optional<WeightFormat>();
    }
    for (const Group& g : groups) {
      for (const auto& target : g.targets) {
        // Engines load routers unquantized (vLLM builds them without a quant_config).
        bool linear = t.rows > 1 && t.name != "moe.router";
        if ((target == "Linear" && linear) || any_match({target}, paths, Match::pattern)) {
          return std::optional<WeightFormat>(g.format);
        }
      }
    }
    return std::optional<WeightFormat>();
  };
}

Decide bitsandbytes(const YAML::Node& q) {
  WeightFormat f;
  if (truth(q, "load_in_8bit", false) || truth(q, "_load_in_8bit", false)) {
    f.element = DType::int8;
    f.layout = ScaleLayout::row;
    f.scale_bytes = 4;  // SCB
    f.matrix_bytes = 1; // weight_format
  } else if (truth(q, "load_in_4bit", false) || truth(q, "_load_in_4bit", false)) {
    f.element = DType::int4; // nf4 or fp4 codes
    f.layout = ScaleLayout::flat;
    f.group = 64;
    if (truth(q, "bnb_4bit_use_double_quant", false)) {
      f.scale_bytes = 1; // absmax, quantized
      f.nested_group = 256;
      f.nested_bytes = 4;
      f.matrix_bytes = 16 * 4 + 256 * 4; // quant_map and nested_quant_map
    } else {
      f.scale_bytes = 4;
      f.matrix_bytes = 16 * 4;
    }
  } else {
    throw Unmodelled{"a bitsandbytes config that loads neither 4- nor 8-bit"};
  }
  std::vector<std::string> skip = strings(q, "llm_int8_skip_modules");
  return [=](const TensorGroup& t, const std::vector<std::string>& paths) {
    if (!t.linear || t.name == "moe.router" || any_match(skip, paths, Match::substring)) {
      return std::optional<WeightFormat>();
    }
    return std::optional<WeightFormat>(f);
  };
}

Decide mxfp4(const YAML::Node& q) {
  std::vector<std::string> skip = strings(q, "modules_to_not_convert");
  WeightFormat f = WeightFormat::of(DType::mxfp4);
  return [=](const TensorGroup& t, const std::vector<std::string>& paths) {
    bool expert = t.place == TensorPlace::expert && t.linear;
    return expert && !any_match(skip, paths, Match::wildcard) ? std::optional<WeightFormat>(f)
                                                              : std::nullopt;
  };
}

Decide fp8_blocks(const YAML::Node& q) {
  WeightFormat f;
  f.element = DType::fp8_e4m3;
  f.scale_bytes = 4;
  YAML::Node block = q["weight_block_size"];
  if (block && block.IsSequence() && block.size() == 2) {
    f.layout = ScaleLayout::block;
    f.block_rows = positive(block[0], "weight_block_size");
    f.block_cols = positive(block[1], "weight_block_size");
  } else {
    f.layout = ScaleLayout::tensor;
    if (text(q, "activation_scheme") == "static") {
      f.matrix_bytes = 4; // input_scale
    }
  }
  std::vector<std::string> skip = strings(q, "modules_to_not_convert");
  for (const auto& s : strings(q, "ignored_layers")) {
    skip.push_back(s);
  }
  return [=](const TensorGroup& t, const std::vector<std::string>& paths) {
    if (!t.linear || t.name == "moe.router" || any_match(skip, paths, Match::module)) {
      return std::optional<WeightFormat>();
    }
    return std::optional<WeightFormat>(f);
  };
}

std::string upper(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](char c) {
    return static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
  });
  return s;
}

/// One ModelOpt quant_algo's layout.
WeightFormat modelopt_format(const std::string& algo, u64 group) {
  WeightFormat f;
  if (algo == "FP8") {
    f.element = DType::fp8_e4m3;
    f.layout = ScaleLayout::tensor;
    f.scale_bytes = 4;
    f.matrix_bytes = 4; // input_scale
  } else if (algo == "FP8_PER_CHANNEL_PER_TOKEN") {
    f.element = DType::fp8_e4m3;
    f.layout = ScaleLayout::row;
    f.scale_bytes = 4;
  } else if (algo == "FP8_PB_WO") {
    f = WeightFormat::of(DType::fp8_e4m3);
  } else if (algo == "NVFP4" || algo == "W4A16_NVFP4") {
    f.element = DType::nvfp4;
    f.layout = ScaleLayout::group;
    f.group = group > 0 ? group : 16;
    f.scale_bytes = 1;
    f.matrix_bytes = algo == "NVFP4" ? 8 : 4; // weight_scale_2, input_scale
  } else {
    throw Unmodelled{"ModelOpt quant_algo '" + algo + "'"};
  }
  return f;
}

Decide modelopt(const YAML::Node& q) {
  std::string algo = upper(text(q, "quant_algo"));
  u64 group = number(q, "group_size", 0);
  if (YAML::Node g = q["config_groups"]; g && g.IsMap()) {
    for (const auto& entry : g) {
      if (YAML::Node w = entry.second["weights"]; w && w.IsMap()) {
        group = number(w, "group_size", group);
      }
    }
  }
  std::vector<std::string> exclude = strings(q, "exclude_modules");
  for (const auto& s : strings(q, "ignore")) {
    exclude.push_back(s);
  }
  // ModelOpt's own defaults leave routers and the head unquantized.
  for (const char* s :
       {"*lm_head*", "*router*", "*mlp.gate", "*block_sparse_moe.gate", "*shared_expert_gate*"}) {
    exclude.emplace_back(s);
  }
  std::vector<std::pair<std::string, WeightFormat>> per_module;
  if (algo == "MIXED_PRECISION") {
    YAML::Node layers = q["quantized_layers"];
    if (!layers || !layers.IsMap()) {
      throw Unmodelled{"MIXED_PRECISION without quantized_layers"};
    }
    for (const auto& entry : layers) {
      per_module.emplace_back(entry.first.Scalar(),
                              modelopt_format(upper(text(entry.second, "quant_algo")),
                                              number(entry.second, "group_size", 0)));
    }
  }
  std::optional<WeightFormat> uniform;
  if (algo != "MIXED_PRECISION") {
    uniform = modelopt_format(algo, group);
  }
  return [=](const TensorGroup& t, const std::vector<std::string>& paths) {
    if (!per_module.empty()) {
      // A listed module wins over the exclusions: ModelOpt lists what it quantized.
      for (const auto& [name, f] : per_module) {
        if (any_match({name}, paths, Match::wildcard)) {
          return std::optional<WeightFormat>(f);
        }
      }
      return std::optional<WeightFormat>();
    }
    if (!t.linear && t.name != "lm_head") {
      return std::optional<WeightFormat>();
    }
    if (any_match(exclude, paths, Match::wildcard)) {
      return std::optional<WeightFormat>();
    }
    return uniform;
  };
}

/// The first layer that holds `t`'s kind (its first MoE layer for experts, ...), and the last.
std::pair<u64, u64> layer_span(const TensorGroup& t, const Model& m) {
  if (t.mtp) {
    return {m.layers, m.layers};
  }
  std::function<bool(u64)> holds = [](u64) { return true; };
  if (t.name.starts_with("moe.")) {
    holds = [&](u64 i) { return m.ffn_types[i] == FfnType::moe; };
  } else if (t.name.starts_with("mlp.")) {
    holds = [&](u64 i) { return m.ffn_types[i] == FfnType::dense; };
  } else if (t.name.starts_with("state.")) {
    holds = [&](u64 i) { return m.layer_types[i] == LayerType::state; };
  } else if (t.name.starts_with("attention.") || t.name.starts_with("indexer.")) {
    holds = [&](u64 i) {
      return m.layer_types[i] != LayerType::state && m.layer_types[i] != LayerType::none;
    };
  }
  u64 first = 0;
  while (first + 1 < m.layers && !holds(first)) {
    ++first;
  }
  u64 last = m.layers - 1;
  while (last > first && !holds(last)) {
    --last;
  }
  return {first, last};
}

} // namespace

void read_quantization(const YAML::Node& config, Model& m, Diagnostics& diag) {
  std::string method = text(config, "quant_method");
  if (method.empty() && config["quant_algo"]) {
    method = "modelopt"; // hf_quant_config.json's `quantization` map
  }
  auto unmodelled = [&](const std::string& why) {
    diag.warnings.push_back("quantization_config quant_method '" + method + "'" +
                            (why.empty() ? "" : " (" + why + ")") +
                            " is not modelled: weights taken as " +
                            std::string(dtype_name(m.dtype)) +
                            "; give their storage with --weight-dtype (a plan's weight_dtype): "
                            "int4, int8, fp8, nvfp4 or mxfp4");
  };
  Decide decide;
  try {
    if (!config.IsMap()) {
      throw InputError("quantization_config must be a map (quant_method, ...)");
    }
    if (method == "awq" || method == "gptq") {
      decide = awq_or_gptq(config, method == "gptq");
    } else if (method == "compressed-tensors") {
      decide = compressed_tensors(config, m.dtype);
    } else if (method == "bitsandbytes") {
      decide = bitsandbytes(config);
    } else if (method == "mxfp4") {
      decide = mxfp4(config);
    } else if (method == "fp8") {
      decide = fp8_blocks(config);
    } else if (method == "modelopt") {
      decide = modelopt(config);
    } else {
      unmodelled("");
      return;
    }
  } catch (const Unmodelled& u) {
    unmodelled(u.why);
    return;
  } catch (const YAML::Exception& e) {
    throw InputError("quantization_config (" + method + ") is malformed: " + e.msg);
  }

  ParamCount params = count_params(m);
  u64 largest = 0;
  bool varies = false;
  for (const TensorGroup& t : params.tensors) {
    if (!is_matrix(t)) {
      continue;
    }
    auto [first, last] = layer_span(t, m);
    std::optional<WeightFormat> f;
    try {
      f = decide(t, module_paths(t, first));
      // A list that names some layers of a kind and not others: the first layer's choice is
      // taken for all, and said.
      varies = varies || (last != first && f != decide(t, module_paths(t, last)));
    } catch (const YAML::Exception& e) {
      throw InputError("quantization_config (" + method + ") is malformed: " + e.msg);
    }
    if (!f) {
      continue;
    }
    m.weight_formats[format_key(t)] = *f;
    if (t.params() > largest) {
      largest = t.params();
      m.weight_dtype = f->element;
    }
  }
  m.quantization = method;
  if (m.weight_formats.empty()) {
    diag.warnings.push_back("quantization_config (" + method +
                            ") quantizes none of the weights kvcalc counts: they stay " +
                            std::string(dtype_name(m.dtype)));
  }
  if (varies) {
    diag.warnings.push_back("quantization_config (" + method +
                            ") treats some layers of a kind differently from others; kvcalc "
                            "applies each tensor's first layer's format to all its layers");
  }
}

} // namespace kvcalc::model
