// HuggingFace config.json → Model. Field names and defaults follow the transformers config
// classes; every reading of an ambiguous config is reported as a warning (docs/model-format.md,
// "Importing a config.json").

#include <kvcalc/model/loader.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <filesystem>
#include <initializer_list>
#include <map>

#include <kvcalc/core/units.hpp>

#include "../core/yaml_support.hpp"

namespace kvcalc {

namespace {

using detail::MapReader;

/// Defaults of transformers config classes for keys that published configs omit.
struct TypeDefault {
  std::string_view model_type;
  std::string_view key;
  u64 value;
};
constexpr std::array k_type_defaults{
    TypeDefault{"gemma3_text", "vocab_size", 262208},
    TypeDefault{"gemma3_text", "max_position_embeddings", 131072},
    TypeDefault{"gemma3_text", "sliding_window_pattern", 6},
    TypeDefault{"gemma3_text", "head_dim", 256},
    TypeDefault{"gemma3_text", "sliding_window", 4096},
    TypeDefault{"falcon", "max_position_embeddings", 2048},
    TypeDefault{"RefinedWeb", "max_position_embeddings", 2048},
    TypeDefault{"RefinedWebModel", "max_position_embeddings", 2048},
};

/// Model types whose MLP is up/down with no gate.
constexpr std::array<std::string_view, 10> k_plain_mlp{
    "falcon", "RefinedWeb", "RefinedWebModel", "gpt_bigcode", "gpt2", "gpt_neox",
    "gptj",   "opt",        "bloom",           "phi"};

/// Model types whose transformers config class ties embeddings by default.
constexpr std::array<std::string_view, 11> k_tied_by_default{
    "gemma",      "gemma2",          "gemma3", "gemma3_text", "gpt_bigcode",        "falcon",
    "RefinedWeb", "RefinedWebModel", "gpt2",   "minicpm3",    "MiniCPM3ForCausalLM"};

template <std::size_t N>
bool contains(const std::array<std::string_view, N>& list, std::string_view value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

/// Reads a config whose architecture keys live in `text_config` (multimodal) or at the top.
class ConfigView {
public:
  ConfigView(std::vector<MapReader> scopes, std::shared_ptr<detail::LocationMap> locations,
             std::string model_type, std::string file)
      : m_scopes(std::move(scopes)), m_locations(std::move(locations)),
        m_model_type(std::move(model_type)), m_file(std::move(file)) {}

  [[nodiscard]] const std::string& model_type() const { return m_model_type; }

  /// The first scope that has any of `keys`, and which key it had.
  [[nodiscard]] std::optional<std::pair<const MapReader*, std::string_view>>
  find(std::initializer_list<std::string_view> keys) const {
    for (const auto& scope : m_scopes) {
      for (auto key : keys) {
        if (scope.has(key)) {
          return std::make_pair(&scope, key);
        }
      }
    }
    return std::nullopt;
  }

  /// An integer under any of `keys`; recorded under `schema_path` for located validation.
  [[nodiscard]] std::optional<u64> count(std::initializer_list<std::string_view> keys,
                                         std::string_view schema_path) const {
    if (auto hit = find(keys)) {
      m_locations->add(std::string(schema_path), hit->first->where(hit->second));
      return hit->first->count(hit->second);
    }
    for (auto key : keys) {
      for (const auto& d : k_type_defaults) {
        if (d.model_type == m_model_type && d.key == key) {
          return d.value;
        }
      }
    }
    return std::nullopt;
  }

  [[nodiscard]] u64 required(std::initializer_list<std::string_view> keys,
                             std::string_view schema_path, std::string_view meaning) const {
    if (auto value = count(keys, schema_path)) {
      return *value;
    }
    std::string names;
    for (auto key : keys) {
      names += (names.empty() ? "'" : " or '") + std::string(key) + "'";
    }
    throw InputError(SourceLocation{m_file, 1, 1},
                     "config has no " + names + " (" + std::string(meaning) +
                         "); kvcalc cannot size this model from it — write a kvcalc YAML "
                         "instead (docs/model-format.md)");
  }

  [[nodiscard]] std::optional<bool> flag(std::initializer_list<std::string_view> keys) const {
    auto hit = find(keys);
    return hit ? hit->first->flag(hit->second) : std::nullopt;
  }

  [[nodiscard]] std::optional<std::string>
  text(std::initializer_list<std::string_view> keys) const {
    auto hit = find(keys);
    return hit ? hit->first->text(hit->second) : std::nullopt;
  }

  /// The key exists (a null value counts as present).
  [[nodiscard]] bool present(std::string_view key) const {
    return std::any_of(m_scopes.begin(), m_scopes.end(),
                       [&](const MapReader& s) { return s.node(key).IsDefined(); });
  }

  [[nodiscard]] std::optional<MapReader> map(std::string_view key) const {
    for (const auto& scope : m_scopes) {
      if (auto m = scope.map(key)) {
        return m;
      }
    }
    return std::nullopt;
  }

  [[nodiscard]] const std::vector<MapReader>& scopes() const { return m_scopes; }

private:
  std::vector<MapReader> m_scopes;
  std::shared_ptr<detail::LocationMap> m_locations;
  std::string m_model_type;
  std::string m_file;
};

std::string registry_name(std::string_view raw) {
  std::string out;
  for (char c : raw) {
    auto u = static_cast<unsigned char>(c);
    if (std::isalnum(u) != 0) {
      out += static_cast<char>(std::tolower(u));
    } else if (c == '.' || c == '_' || c == '-') {
      out += c;
    } else if (!out.empty() && out.back() != '-') {
      out += '-';
    }
  }
  while (!out.empty() && out.back() == '-') {
    out.pop_back();
  }
  return out.empty() ? std::string("imported-model") : out;
}

std::string display_name_for(const ConfigView& c, const std::string& file) {
  if (auto path = c.text({"_name_or_path"}); path && !path->empty()) {
    std::string p = *path;
    while (!p.empty() && p.back() == '/') {
      p.pop_back();
    }
    auto slash = p.rfind('/');
    return slash == std::string::npos ? p : p.substr(slash + 1);
  }
  std::filesystem::path path(file);
  if (path.filename() == "config.json" && path.has_parent_path() &&
      !path.parent_path().filename().empty()) {
    return path.parent_path().filename().string();
  }
  return path.stem().string();
}

LayerType layer_type_from_hf(const std::string& word, const MapReader& scope) {
  if (word == "full_attention" || word == "attention" || word == "global") {
    return LayerType::full;
  }
  if (word == "sliding_attention" || word == "local" || word == "sliding") {
    return LayerType::sliding;
  }
  if (word == "linear_attention" || word == "mamba") {
    return LayerType::state;
  }
  scope.fail("layer_types", "layer type '" + word +
                                "' is not one kvcalc models (full_attention, sliding_attention, "
                                "linear_attention); write a kvcalc YAML with layer_pattern");
}

/// Which layers slide or hold a linear state, and the window.
void read_layer_types(const ConfigView& c, Model& m, Diagnostics& diag) {
  auto window = c.count({"sliding_window"}, "sliding_window");
  if (auto hit = c.find({"layer_types"})) {
    const MapReader& scope = *hit->first;
    YAML::Node list = scope.node("layer_types");
    if (!list.IsSequence() || list.size() != m.layers) {
      scope.fail("layer_types", "layer_types must list one type per layer (" +
                                    std::to_string(m.layers) + " layers)");
    }
    for (const auto& item : list) {
      m.layer_types.push_back(layer_type_from_hf(
          detail::scalar_of(item, scope.locations()->file(), "each layer type"), scope));
    }
    bool slides = std::find(m.layer_types.begin(), m.layer_types.end(), LayerType::sliding) !=
                  m.layer_types.end();
    if (slides) {
      if (!window || *window == 0) {
        scope.fail("layer_types", "layer_types has sliding layers but sliding_window is not set");
      }
      m.sliding_window = *window;
    }
    return;
  }
  if (auto interval = c.count({"full_attention_interval"}, "layer_pattern")) {
    if (*interval == 0) {
      throw InputError(c.scopes().front().where("full_attention_interval"),
                       "full_attention_interval must be at least 1");
    }
    m.layer_types =
        expand_layer_pattern("state*" + std::to_string(*interval - 1) + ", full", m.layers);
    if (*interval == 1) {
      m.layer_types.assign(m.layers, LayerType::full);
    }
    return;
  }
  m.layer_types.assign(m.layers, LayerType::full);
  if (!window || *window == 0) {
    return;
  }
  if (auto use = c.flag({"use_sliding_window"}); use && !*use) {
    diag.warnings.push_back("sliding_window " + std::to_string(*window) +
                            " is ignored because use_sliding_window is false: every layer "
                            "attends to the full context");
    return;
  }
  m.sliding_window = *window;
  const std::string& type = c.model_type();
  if (auto pattern = c.count({"sliding_window_pattern"}, "layer_pattern")) {
    // transformers: layer i is global when (i + 1) % pattern == 0.
    if (*pattern <= 1) {
      m.layer_types.assign(m.layers, LayerType::full);
      m.sliding_window = 0;
    } else {
      m.layer_types = expand_layer_pattern(std::to_string(*pattern - 1) + ":1", m.layers);
    }
    return;
  }
  if (type == "gemma2") {
    diag.warnings.push_back("gemma2 config without layer_types: even layers slide (window " +
                            std::to_string(*window) +
                            "), odd layers are global, as in "
                            "transformers' Gemma2");
    m.layer_types = expand_layer_pattern("alternating", m.layers);
    return;
  }
  if (type == "qwen2" || type == "qwen2_moe" || type == "qwen3" || type == "qwen3_moe") {
    u64 first = c.count({"max_window_layers"}, "layer_pattern").value_or(0);
    for (u64 i = first; i < m.layers; ++i) {
      m.layer_types[i] = LayerType::sliding;
    }
    diag.warnings.push_back("use_sliding_window is on: layers " + std::to_string(first) +
                            " and above slide (max_window_layers), as in transformers' " + type);
    if (first >= m.layers) {
      m.sliding_window = 0;
    }
    return;
  }
  if (type != "mistral" && type != "mixtral") {
    diag.warnings.push_back("sliding_window " + std::to_string(*window) +
                            " with no layer_types or sliding_window_pattern: every layer is "
                            "taken to slide (as in Mistral)");
  }
  m.layer_types.assign(m.layers, LayerType::sliding);
}

void read_linear_state(const ConfigView& c, Model& m) {
  if (count_layers(m, LayerType::state) == 0) {
    return;
  }
  auto key_heads = c.count({"linear_num_key_heads"}, "state.key_heads");
  auto value_heads = c.count({"linear_num_value_heads"}, "state.heads");
  auto key_dim = c.count({"linear_key_head_dim"}, "state.key_head_dim");
  auto value_dim = c.count({"linear_value_head_dim"}, "state.head_dim");
  auto kernel = c.count({"linear_conv_kernel_dim"}, "state.conv_kernel");
  if (!key_heads || !value_heads || !key_dim || !value_dim || !kernel || *kernel == 0) {
    throw InputError(SourceLocation{c.scopes().front().locations()->file(), 1, 1},
                     "config has linear-attention layers but not the linear_num_key_heads, "
                     "linear_num_value_heads, linear_key_head_dim, linear_value_head_dim and "
                     "linear_conv_kernel_dim that size their state; write a kvcalc YAML with "
                     "state (docs/model-format.md)");
  }
  StateSpec s;
  s.kind = StateKind::gated_deltanet;
  s.key_heads = *key_heads;
  s.heads = *value_heads;
  s.key_head_dim = *key_dim;
  s.head_dim = *value_dim;
  s.conv_kernel = *kernel;
  m.state = s;
}

/// The terms that only the parameter count sees: biases, norms, sinks, position tables.
void read_block_details(const ConfigView& c, Model& m) {
  const std::string& type = c.model_type();
  bool gpt_style = type == "gpt_bigcode" || type == "gpt2";
  bool falcon = type == "falcon" || type == "RefinedWeb" || type == "RefinedWebModel";
  if (gpt_style || falcon) {
    m.norm = NormKind::layer;
  }
  if (type == "gemma2" || type == "gemma3" || type == "gemma3_text") {
    m.norms_per_layer = 4;
  }
  if (falcon && !c.flag({"new_decoder_architecture"}).value_or(type == "RefinedWeb") &&
      c.flag({"parallel_attn"}).value_or(true)) {
    m.norms_per_layer = 1; // Falcon-7B: one LayerNorm feeds attention and MLP in parallel
  }
  m.learned_position_embeddings = gpt_style;
  if (gpt_style || type == "gpt_oss" || c.flag({"attention_bias"}).value_or(false) ||
      (falcon && c.flag({"bias"}).value_or(false))) {
    m.attention.bias = AttentionBias::all;
  } else if (type == "qwen2" || type == "qwen2_moe") {
    m.attention.bias = AttentionBias::qkv;
  }
  m.attention.qk_norm = type == "qwen3" || type == "qwen3_moe" || type == "qwen3_next" ||
                        type == "gemma3" || type == "gemma3_text";
  m.attention.sinks = type == "gpt_oss";
  m.mlp.bias = gpt_style || type == "gpt_oss" || c.flag({"mlp_bias"}).value_or(false);
}

} // namespace

Model parse_hf_config(const std::string& text, const std::string& file, Diagnostics& diag) {
  YAML::Node root = detail::parse_yaml(text, file);
  auto locations = std::make_shared<detail::LocationMap>(file, detail::location_of(root, file));
  MapReader top(root, "", locations);
  std::vector<MapReader> scopes;
  if (auto text_config = top.map("text_config")) {
    scopes.push_back(*text_config);
    diag.warnings.push_back("config nests its language model in text_config: reading the "
                            "architecture from there (vision tower not counted)");
  }
  scopes.push_back(top);
  std::string model_type;
  for (const auto& s : scopes) {
    if (auto t = s.text("model_type")) {
      model_type = *t;
      break;
    }
  }
  if (model_type.empty()) {
    // Some remote-code configs omit model_type; the architecture class names the family.
    if (YAML::Node arch = root["architectures"];
        arch.IsSequence() && arch.size() > 0 && arch[0].IsScalar()) {
      model_type = arch[0].Scalar();
    }
    diag.warnings.push_back(
        "config has no model_type: reading it as " +
        (model_type.empty() ? std::string("a generic decoder") : "'" + model_type + "'"));
  }
  ConfigView c(scopes, locations, model_type, file);

  Model m;
  for (const auto& scope : c.scopes()) {
    if (!scope.has("architectures")) {
      continue;
    }
    if (YAML::Node arch = scope.node("architectures");
        arch.IsSequence() && arch.size() > 0 && arch[0].IsScalar()) {
      m.architecture = arch[0].Scalar();
    }
  }
  m.display_name = display_name_for(c, file);
  m.name = registry_name(m.display_name);
  m.source = file;

  if (auto dtype = c.text({"torch_dtype", "dtype"})) {
    try {
      m.dtype = parse_dtype(*dtype, "torch_dtype");
      if (m.dtype == DType::fp32) {
        // vLLM and SGLang serve float32 checkpoints in half precision unless told otherwise.
        m.dtype = DType::bf16;
        diag.warnings.push_back("torch_dtype is float32: taking bf16, the dtype serving "
                                "engines cast float32 checkpoints to (use --kv-dtype fp32 for "
                                "a float32 cache)");
      }
    } catch (const InputError&) {
      diag.warnings.push_back("torch_dtype '" + *dtype +
                              "' is not a dtype kvcalc knows: "
                              "taking bf16");
    }
  } else {
    diag.warnings.push_back("config has no torch_dtype: taking bf16 as the model dtype");
  }
  if (auto q = c.map("quantization_config")) {
    std::string method = q->text("quant_method").value_or("");
    if (method == "fp8") {
      m.weight_dtype = DType::fp8_e4m3;
    } else if (method == "mxfp4") {
      m.weight_dtype = DType::mxfp4;
      m.quantized_weights = QuantizedWeights::experts; // gpt-oss keeps attention in bf16
    } else {
      diag.warnings.push_back("quantization_config quant_method '" + method +
                              "' is not modelled: weights taken as " +
                              std::string(dtype_name(m.dtype)));
    }
  }

  m.layers =
      c.required({"num_hidden_layers", "n_layer", "num_layers"}, "layers", "the number of layers");
  try {
    check_layer_count(m.layers);
  } catch (const InputError& e) {
    auto hit = c.find({"num_hidden_layers", "n_layer", "num_layers"});
    throw InputError(hit ? hit->first->where(hit->second) : SourceLocation{file, 1, 1}, e.what());
  }
  m.hidden_size =
      c.required({"hidden_size", "n_embd", "d_model"}, "hidden_size", "the model width");
  m.vocab_size = c.required({"vocab_size"}, "vocab_size", "the vocabulary size");
  m.max_context =
      c.count({"max_position_embeddings", "n_positions", "seq_length"}, "max_context").value_or(0);
  if (auto tied = c.flag({"tie_word_embeddings"})) {
    m.tie_word_embeddings = *tied;
  } else {
    m.tie_word_embeddings = contains(k_tied_by_default, model_type);
  }

  Attention& a = m.attention;
  a.heads =
      c.required({"num_attention_heads", "n_head", "num_heads"}, "attention.heads", "query heads");
  if (c.count({"kv_lora_rank"}, "attention.kv_lora_rank")) {
    a.kind = AttentionKind::mla;
    a.mla.kv_lora_rank = *c.count({"kv_lora_rank"}, "attention.kv_lora_rank");
    a.mla.q_lora_rank = c.count({"q_lora_rank"}, "attention.q_lora_rank").value_or(0);
    a.mla.qk_rope_head_dim =
        c.required({"qk_rope_head_dim"}, "attention.qk_rope_head_dim", "MLA decoupled RoPE width");
    a.mla.qk_nope_head_dim = c.required({"qk_nope_head_dim"}, "attention.qk_nope_head_dim",
                                        "MLA per-head non-RoPE width");
    if (auto v = c.count({"v_head_dim"}, "attention.v_head_dim")) {
      a.mla.v_head_dim = *v;
    } else if (a.heads != 0 && m.hidden_size % a.heads == 0) {
      a.mla.v_head_dim = m.hidden_size / a.heads;
      diag.warnings.push_back("MLA config has no v_head_dim: taking hidden_size / heads = " +
                              std::to_string(a.mla.v_head_dim));
    } else {
      (void)c.required({"v_head_dim"}, "attention.v_head_dim", "MLA per-head value width");
    }
    a.kv_heads = a.heads;
    a.head_dim = checked_add(a.mla.qk_nope_head_dim, a.mla.qk_rope_head_dim);
    a.v_head_dim = a.mla.v_head_dim;
  } else {
    if (model_type == "falcon" || model_type == "RefinedWeb" || model_type == "RefinedWebModel") {
      // Legacy "RefinedWeb" configs (Falcon-40B/180B) predate the flag and mean the new
      // decoder architecture; "RefinedWebModel" (Falcon-7B) the old one.
      bool new_arch = c.flag({"new_decoder_architecture"}).value_or(model_type == "RefinedWeb");
      if (new_arch) {
        a.kv_heads = c.count({"num_kv_heads", "n_head_kv"}, "attention.kv_heads").value_or(a.heads);
      } else if (c.flag({"multi_query"}).value_or(true)) {
        a.kv_heads = 1;
      } else {
        a.kv_heads = a.heads;
      }
    } else if (model_type == "gpt_bigcode") {
      a.kv_heads = c.flag({"multi_query"}).value_or(true) ? 1 : a.heads;
    } else if (auto kv = c.count({"num_key_value_heads", "num_kv_heads", "n_head_kv"},
                                 "attention.kv_heads")) {
      a.kv_heads = *kv;
    } else {
      a.kv_heads = a.heads;
    }
    if (a.kv_heads == a.heads) {
      a.kind = AttentionKind::mha;
    } else if (a.kv_heads == 1) {
      a.kind = AttentionKind::mqa;
    } else {
      a.kind = AttentionKind::gqa;
    }
    if (auto head_dim = c.count({"head_dim"}, "attention.head_dim")) {
      a.head_dim = *head_dim;
    } else if (a.heads != 0 && m.hidden_size % a.heads == 0) {
      a.head_dim = m.hidden_size / a.heads;
    } else {
      throw InputError(locations->find("attention.heads"),
                       "config has no head_dim and hidden_size (" + std::to_string(m.hidden_size) +
                           ") is not a multiple of num_attention_heads (" +
                           std::to_string(a.heads) + ")");
    }
    a.v_head_dim = a.head_dim;
  }

  m.mlp.kind = contains(k_plain_mlp, model_type) ? MlpKind::plain : MlpKind::gated;
  read_block_details(c, m);
  auto routed =
      c.count({"n_routed_experts", "num_local_experts", "num_experts"}, "moe.routed_experts");
  if (routed && *routed > 0) {
    Moe e;
    e.routed_experts = *routed;
    e.experts_per_token = c.required(
        {"num_experts_per_tok", "experts_per_token", "num_experts_per_token", "moe_topk"},
        "moe.experts_per_token", "experts each token is routed to");
    if (auto expert = c.count({"moe_intermediate_size"}, "moe.expert_intermediate_size")) {
      e.expert_intermediate_size = *expert;
      m.mlp.intermediate_size = c.count({"intermediate_size"}, "mlp.intermediate_size").value_or(0);
    } else {
      e.expert_intermediate_size = c.required({"intermediate_size"}, "moe.expert_intermediate_size",
                                              "the MLP width of one expert");
    }
    e.shared_experts = c.count({"n_shared_experts"}, "moe.shared_experts").value_or(0);
    e.shared_expert_intermediate_size = checked_mul(e.shared_experts, e.expert_intermediate_size);
    if (auto shared = c.count({"shared_expert_intermediate_size"}, "moe.shared_experts");
        shared && *shared > 0) {
      e.shared_experts = std::max<u64>(e.shared_experts, 1);
      e.shared_expert_intermediate_size = *shared;
    }
    e.first_dense_layers = c.count({"first_k_dense_replace"}, "moe.first_dense_layers").value_or(0);
    // DeepSeek-V3's noaux_tc routing adds a per-expert correction bias (transformers'
    // DeepseekV3 router always has it); gpt-oss has a router bias.
    e.router_bias = c.text({"topk_method"}).value_or("") == "noaux_tc" ||
                    model_type == "deepseek_v3" || model_type == "kimi_k2" ||
                    model_type == "gpt_oss";
    for (std::string_view key : {"moe_layer_freq", "decoder_sparse_step"}) {
      if (auto freq = c.count({key}, "moe"); freq && *freq > 1) {
        throw InputError(SourceLocation{file, 1, 1},
                         std::string(key) + " = " + std::to_string(*freq) +
                             ": MoE on every n-th layer is not modelled; write a kvcalc YAML");
      }
    }
    m.moe = e;
  } else {
    auto width =
        c.count({"intermediate_size", "n_inner", "ffn_hidden_size"}, "mlp.intermediate_size");
    m.mlp.intermediate_size = width && *width > 0 ? *width : checked_mul(4, m.hidden_size);
    if (!width || *width == 0) {
      diag.warnings.push_back("config has no MLP width: taking 4 × hidden_size = " +
                              std::to_string(m.mlp.intermediate_size));
    }
  }

  read_layer_types(c, m, diag);
  read_linear_state(c, m);
  m.ffn_types = ffn_types_of(std::nullopt, m.layers, m.moe);
  m.mtp_layers = c.count({"num_nextn_predict_layers"}, "mtp_layers").value_or(0);

  validate_model(m, locations->locator());
  return m;
}

Model parse_model_document(const std::string& text, const std::string& file, Diagnostics& diag) {
  YAML::Node root = detail::parse_yaml(text, file);
  if (!root.IsMap()) {
    throw InputError(detail::location_of(root, file),
                     "expected a model description (a map of keys); see docs/model-format.md");
  }
  if (root["attention"].IsDefined() || root["name"].IsDefined()) {
    return parse_model_yaml(text, file);
  }
  for (const char* key : {"model_type", "architectures", "num_hidden_layers", "n_layer",
                          "text_config", "num_attention_heads"}) {
    if (root[key].IsDefined()) {
      return parse_hf_config(text, file, diag);
    }
  }
  throw InputError(SourceLocation{file, 1, 1},
                   "neither a kvcalc model (it has no 'name' or 'attention') nor a HuggingFace "
                   "config.json (it has no 'model_type' or 'num_hidden_layers')");
}

} // namespace kvcalc
