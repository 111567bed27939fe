// The kvcalc model YAML format: reading (strict, located errors) and writing (for `import`).

#include <kvcalc/model/loader.hpp>

#include <algorithm>
#include <array>
#include <ostream>
#include <sstream>

#include <kvcalc/core/spell.hpp>
#include <kvcalc/model/params.hpp>

#include "../core/yaml_support.hpp"

namespace kvcalc::model {

namespace {

using detail::MapReader;

DType located_dtype(const MapReader& r, std::string_view key, DType fallback) {
  auto text = r.text(key);
  if (!text) {
    return fallback;
  }
  try {
    return parse_dtype(*text, r.path_of(key));
  } catch (const InputError& e) {
    throw InputError(r.where(key), e.what());
  }
}

/// One of a fixed set of words; an unknown one is a located error with a did-you-mean.
template <class E>
E read_choice(const MapReader& r, std::string_view key,
              std::initializer_list<std::pair<std::string_view, E>> choices,
              std::optional<E> fallback) {
  std::vector<std::string> names;
  std::string list;
  for (const auto& [name, value] : choices) {
    names.emplace_back(name);
    list += (list.empty() ? "" : ", ") + std::string(name);
  }
  auto text = fallback ? r.text(key) : std::optional(r.required_text(key, list));
  if (!text) {
    return *fallback;
  }
  for (const auto& [name, value] : choices) {
    if (*text == name) {
      return value;
    }
  }
  r.fail(key, "unknown " + r.path_of(key) + " '" + *text + "'" + did_you_mean(*text, names) +
                  " (one of: " + list + ")");
}

Attention read_attention(const MapReader& r, u64 hidden_size) {
  r.allow_only({"kind", "heads", "kv_heads", "head_dim", "v_head_dim", "q_lora_rank",
                "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "bias", "qk_norm", "sinks",
                "output_gate"});
  Attention a;
  a.kind = read_choice<AttentionKind>(r, "kind",
                                      {{"mha", AttentionKind::mha},
                                       {"mqa", AttentionKind::mqa},
                                       {"gqa", AttentionKind::gqa},
                                       {"mla", AttentionKind::mla}},
                                      std::nullopt);
  a.heads = r.required_count("heads", "query heads");
  a.bias = read_choice<AttentionBias>(
      r, "bias",
      {{"none", AttentionBias::none}, {"qkv", AttentionBias::qkv}, {"all", AttentionBias::all}},
      AttentionBias::none);
  a.qk_norm = r.flag("qk_norm").value_or(false);
  a.sinks = r.flag("sinks").value_or(false);
  a.output_gate = r.flag("output_gate").value_or(false);
  if (a.kind == AttentionKind::mla) {
    for (std::string_view key : {"kv_heads", "head_dim"}) {
      if (r.has(key)) {
        r.fail(key, "'" + std::string(key) +
                        "' does not apply to kind mla: its key width is qk_nope_head_dim + "
                        "qk_rope_head_dim and every head reads the shared latent");
      }
    }
    a.mla.q_lora_rank = r.count("q_lora_rank").value_or(0);
    if (r.count("q_lora_rank") == u64{0}) {
      r.fail("q_lora_rank", "'attention.q_lora_rank' is 0, a query compressed to nothing; write "
                            "null (or leave it out) for a model whose queries are not compressed");
    }
    a.mla.kv_lora_rank = r.required_count("kv_lora_rank", "MLA latent width d_c");
    a.mla.qk_nope_head_dim = r.required_count("qk_nope_head_dim", "MLA per-head non-RoPE width");
    a.mla.qk_rope_head_dim = r.required_count("qk_rope_head_dim", "MLA decoupled RoPE width");
    a.mla.v_head_dim = r.required_count("v_head_dim", "MLA per-head value width");
    a.kv_heads = a.heads;
    a.head_dim = checked_add(a.mla.qk_nope_head_dim, a.mla.qk_rope_head_dim);
    a.v_head_dim = a.mla.v_head_dim;
    return a;
  }
  for (std::string_view key :
       {"q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim"}) {
    if (r.has(key)) {
      r.fail(key, "'" + std::string(key) + "' applies only to kind mla");
    }
  }
  switch (a.kind) {
  case AttentionKind::mha:
    a.kv_heads = r.count("kv_heads").value_or(a.heads);
    break;
  case AttentionKind::mqa:
    a.kv_heads = r.count("kv_heads").value_or(1);
    break;
  default:
    a.kv_heads = r.required_count("kv_heads", "key/value heads of a gqa model");
    break;
  }
  if (auto head_dim = r.count("head_dim")) {
    a.head_dim = *head_dim;
  } else if (a.heads == 0) {
    a.head_dim = 0; // validate_model reports the heads
  } else if (hidden_size % a.heads == 0) {
    a.head_dim = hidden_size / a.heads;
  } else {
    r.fail("heads", "head_dim is not given and hidden_size (" + std::to_string(hidden_size) +
                        ") is not a multiple of heads (" + std::to_string(a.heads) +
                        "); set attention.head_dim");
  }
  a.v_head_dim = r.count("v_head_dim").value_or(a.head_dim);
  return a;
}

/// A pattern key as a string (a cycle) or a list (one entry per layer), joined into the string
/// form that `expand` reads.
template <class Expand>
auto read_pattern(const MapReader& r, std::string_view key, u64 layers, Expand expand) {
  YAML::Node node = r.node(key);
  if (node.IsSequence()) {
    std::string joined;
    for (const auto& item : node) {
      if (!item.IsScalar()) {
        throw InputError(detail::location_of(item, r.locations()->file()),
                         std::string(key) + " entries must be type names");
      }
      joined += (joined.empty() ? "" : ",") + item.Scalar();
    }
    if (node.size() != layers) {
      r.fail(key, std::string(key) + " lists " + std::to_string(node.size()) +
                      " layers but the model has " + std::to_string(layers) +
                      "; give one entry per layer, or a cycle as a string such as "
                      "'sliding*5, full'");
    }
    try {
      return expand(joined, layers);
    } catch (const InputError& e) {
      r.fail(key, e.what());
    }
  }
  std::string pattern = r.required_text(key, "a pattern");
  try {
    return expand(pattern, layers);
  } catch (const InputError& e) {
    r.fail(key, e.what());
  }
}

/// `sliding_attention`: the sliding layers' heads and widths, each defaulting to `attention`'s.
Attention read_sliding_attention(const MapReader& r, const Attention& main) {
  r.allow_only({"heads", "kv_heads", "head_dim", "v_head_dim"});
  if (main.kind == AttentionKind::mla) {
    r.fail("heads", "sliding_attention overrides per-head K and V widths; it does not apply "
                    "when attention is kind mla");
  }
  Attention a = main;
  a.heads = r.count("heads").value_or(main.heads);
  a.kv_heads = r.count("kv_heads").value_or(main.kv_heads);
  a.head_dim = r.count("head_dim").value_or(main.head_dim);
  a.v_head_dim = r.count("v_head_dim").value_or(r.has("head_dim") ? a.head_dim : main.v_head_dim);
  a.kind = a.kv_heads == a.heads ? AttentionKind::mha
           : a.kv_heads == 1     ? AttentionKind::mqa
                                 : AttentionKind::gqa;
  return a;
}

StateSpec read_state(const MapReader& r, DType model_dtype, u64 hidden_size) {
  r.allow_only({"kind", "heads", "head_dim", "key_heads", "key_head_dim", "inner", "groups",
                "state_size", "conv_kernel", "elements", "conv_dtype", "ssm_dtype", "dt_rank",
                "conv_bias", "inner_norms"});
  StateSpec s;
  s.kind = r.parsed("kind", [](const std::string& t) { return k_state_kinds.parse(t); });
  s.heads = r.count("heads").value_or(0);
  s.head_dim = r.count("head_dim").value_or(0);
  s.key_heads = r.count("key_heads").value_or(0);
  s.key_head_dim = r.count("key_head_dim").value_or(0);
  s.inner = r.count("inner").value_or(0);
  s.groups = r.count("groups").value_or(0);
  s.state_size = r.count("state_size").value_or(0);
  s.conv_kernel = r.count("conv_kernel").value_or(0);
  s.elements = r.count("elements").value_or(0);
  // transformers' "auto" rank of Mamba's Δ projection: ⌈hidden_size / 16⌉.
  s.dt_rank =
      r.count("dt_rank").value_or(s.kind == StateKind::mamba1 ? ceil_div(hidden_size, 16) : 0);
  s.conv_bias = r.flag("conv_bias").value_or(true);
  s.inner_norms = r.flag("inner_norms").value_or(false);
  if (r.has("conv_dtype")) {
    s.conv_dtype = located_dtype(r, "conv_dtype", model_dtype);
  }
  if (r.has("ssm_dtype")) {
    s.ssm_dtype = located_dtype(r, "ssm_dtype", model_dtype);
  }
  // Sizes another kind reads are errors here, so a typo in `kind` cannot hide behind defaults.
  auto used = [&](std::string_view key) {
    switch (s.kind) {
    case StateKind::mamba1:
      return key == "inner" || key == "state_size" || key == "conv_kernel" || key == "dt_rank" ||
             key == "conv_bias" || key == "inner_norms";
    case StateKind::mamba2:
      return key == "inner" || key == "heads" || key == "head_dim" || key == "groups" ||
             key == "state_size" || key == "conv_kernel" || key == "conv_bias";
    case StateKind::gated_deltanet:
      return key == "heads" || key == "head_dim" || key == "key_heads" || key == "key_head_dim" ||
             key == "conv_kernel";
    case StateKind::kda:
      return key == "heads" || key == "head_dim" || key == "conv_kernel";
    case StateKind::lightning:
      return key == "heads" || key == "head_dim";
    case StateKind::custom:
      return key == "elements";
    }
    return false;
  };
  for (std::string_view key :
       {"heads", "head_dim", "key_heads", "key_head_dim", "inner", "groups", "state_size",
        "conv_kernel", "elements", "dt_rank", "conv_bias", "inner_norms"}) {
    if (r.has(key) && !used(key)) {
      r.fail(key, "'" + std::string(key) + "' does not apply to state kind " +
                      std::string(k_state_kinds.name(s.kind)) + " (docs/model-format.md, state)");
    }
  }
  if (s.kind == StateKind::lightning && r.has("conv_dtype")) {
    r.fail("conv_dtype", "state kind lightning has no convolution");
  }
  return s;
}

/// Every key of a model file (docs/model-format.md).
constexpr std::array<std::string_view, 33> k_model_keys{
    "name",
    "display_name",
    "aliases",
    "source",
    "architecture",
    "dtype",
    "weight_dtype",
    "layers",
    "hidden_size",
    "vocab_size",
    "max_context",
    "tie_word_embeddings",
    "lm_head_bias",
    "attention",
    "mlp",
    "moe",
    "sliding_window",
    "attention_chunk",
    "layer_pattern",
    "ffn_pattern",
    "sliding_attention",
    "state",
    "indexer",
    "kv_shared_layers",
    "linear_state",
    "mtp_layers",
    "params",
    "quantized_weights",
    "weight_formats",
    "quantization",
    "learned_position_embeddings",
    "norm",
    "norms_per_layer",
};

/// What names the model and where its numbers come from: name, display_name, source,
/// architecture, aliases.
void read_identity(const MapReader& r, Model& m) {
  m.name = r.required_text("name", "the registry key, e.g. llama-3.1-8b");
  m.display_name = r.text("display_name").value_or(m.name);
  m.source = r.required_text("source", "where the numbers come from: a URL or a paper");
  m.architecture = r.text("architecture").value_or("");
  if (r.has("aliases")) {
    YAML::Node aliases = r.node("aliases");
    if (!aliases.IsSequence()) {
      r.fail("aliases", "'aliases' must be a list of names");
    }
    for (const auto& a : aliases) {
      if (!a.IsScalar()) {
        throw InputError(detail::location_of(a, r.locations()->file()),
                         "each alias must be a name");
      }
      m.aliases.push_back(a.Scalar());
    }
  }
}

/// The dtypes and the sizes every model has: layers, width, vocabulary, context.
void read_sizes(const MapReader& r, Model& m) {
  m.dtype = located_dtype(r, "dtype", DType::bf16);
  if (r.has("weight_dtype")) {
    m.weight_dtype = located_dtype(r, "weight_dtype", m.dtype);
  }
  m.layers = r.required_count("layers", "the number of transformer layers");
  try {
    check_layer_count(m.layers);
  } catch (const InputError& e) {
    r.fail("layers", e.what());
  }
  m.hidden_size = r.required_count("hidden_size", "the model width");
  m.vocab_size = r.count("vocab_size").value_or(0);
  m.max_context = r.count("max_context").value_or(0);
  if (r.has("max_context") && r.count("max_context") == u64{0}) {
    r.fail("max_context", "'max_context' is 0 tokens; give the longest context the model takes, "
                          "or leave it out when unknown");
  }
}

/// The terms only the weights and the parameter count see: tied embeddings, the head's bias,
/// position tables, the stored formats of the tensors, the norms.
void read_weight_terms(const MapReader& r, Model& m) {
  m.tie_word_embeddings = r.flag("tie_word_embeddings").value_or(false);
  m.lm_head_bias = r.flag("lm_head_bias").value_or(false);
  m.learned_position_embeddings = r.flag("learned_position_embeddings").value_or(false);
  m.quantized_weights = read_choice<QuantizedWeights>(
      r, "quantized_weights",
      {{"linear", QuantizedWeights::linear}, {"experts", QuantizedWeights::experts}},
      QuantizedWeights::linear);
  if (auto formats = r.map("weight_formats")) {
    for (const auto& entry : formats->yaml()) {
      std::string key = entry.first.as<std::string>();
      m.weight_formats[key] =
          formats->parsed(key, [](const std::string& t) { return parse_format_spec(t); });
    }
    if (m.weight_formats.empty()) {
      r.fail("weight_formats", "'weight_formats' needs at least one tensor: name → format");
    }
  }
  m.quantization = r.text("quantization").value_or("");
  m.norm = read_choice<NormKind>(r, "norm", {{"rms", NormKind::rms}, {"layer", NormKind::layer}},
                                 NormKind::rms);
  m.norms_per_layer = r.count("norms_per_layer").value_or(2);
}

Mlp read_mlp(const MapReader& r) {
  r.allow_only({"kind", "intermediate_size", "bias"});
  Mlp p;
  p.kind = read_choice<MlpKind>(r, "kind", {{"gated", MlpKind::gated}, {"plain", MlpKind::plain}},
                                MlpKind::gated);
  p.bias = r.flag("bias").value_or(false);
  p.intermediate_size = r.count("intermediate_size").value_or(0);
  return p;
}

Moe read_moe(const MapReader& r) {
  r.allow_only({"routed_experts", "shared_experts", "experts_per_token", "expert_intermediate_size",
                "shared_expert_intermediate_size", "first_dense_layers", "router_bias",
                "shared_expert_gate"});
  Moe e;
  e.routed_experts = r.required_count("routed_experts", "routed experts per MoE layer");
  e.shared_experts = r.count("shared_experts").value_or(0);
  e.experts_per_token = r.required_count("experts_per_token", "experts each token uses");
  e.expert_intermediate_size =
      r.required_count("expert_intermediate_size", "MLP width of one expert");
  e.shared_expert_intermediate_size =
      r.count("shared_expert_intermediate_size")
          .value_or(checked_mul(e.expert_intermediate_size, e.shared_experts));
  e.first_dense_layers = r.count("first_dense_layers").value_or(0);
  e.router_bias = r.flag("router_bias").value_or(false);
  e.shared_gate = r.flag("shared_expert_gate").value_or(false);
  return e;
}

/// The mixer of each layer (layer_pattern; without one, every layer slides where a
/// sliding_window is set, else attends in full), with the window and the chunk.
void read_layer_types(const MapReader& r, Model& m) {
  if (r.has("linear_state")) {
    r.fail("linear_state", "'linear_state' is now 'state' with a kind: 'state: {kind: custom, "
                           "elements: N}', or the mixer's own shape (docs/model-format.md)");
  }
  m.sliding_window = r.count("sliding_window").value_or(0);
  if (r.has("sliding_window") && m.sliding_window == 0) {
    r.fail("sliding_window", "'sliding_window' must be at least 1 token");
  }
  m.attention_chunk = r.count("attention_chunk").value_or(0);
  if (r.has("attention_chunk") && m.attention_chunk == 0) {
    r.fail("attention_chunk", "'attention_chunk' must be at least 1 token");
  }
  m.layer_types = r.has("layer_pattern")
                      ? read_pattern(r, "layer_pattern", m.layers, expand_layer_pattern)
                      : std::vector<LayerType>(m.layers, m.sliding_window != 0 ? LayerType::sliding
                                                                               : LayerType::full);
}

/// The shapes of the layers' mixers: attention (required where a layer attends), the sliding
/// layers' own, the recurrent state, DeepSeek sparse attention's indexer.
void read_mixers(const MapReader& r, Model& m) {
  if (auto attention = r.map("attention")) {
    m.attention = read_attention(*attention, m.hidden_size);
  } else if (has_attention(m)) {
    throw InputError(detail::location_of(r.yaml(), r.locations()->file()),
                     "missing required key 'attention' (a map with kind, heads, ...)");
  }
  if (auto sliding = r.map("sliding_attention")) {
    m.sliding_attention = read_sliding_attention(*sliding, m.attention);
  }
  if (auto state = r.map("state")) {
    m.state = read_state(*state, m.dtype, m.hidden_size);
  }
  if (auto indexer = r.map("indexer")) {
    indexer->allow_only({"heads", "head_dim", "topk"});
    m.indexer = Indexer{indexer->required_count("heads", "indexer query heads (index_n_heads)"),
                        indexer->required_count("head_dim", "the indexer key width"),
                        indexer->required_count("topk", "tokens each query attends to")};
  }
}

/// Every key of weight_formats names a tensor of the (validated) model: a misspelt one would
/// silently change nothing.
void check_weight_format_keys(const MapReader& r, const Model& m) {
  if (m.weight_formats.empty()) {
    return;
  }
  std::vector<std::string> keys;
  for (const TensorGroup& t : count_params(m).tensors) {
    keys.push_back(format_key(t));
  }
  MapReader formats = *r.map("weight_formats");
  for (const auto& [key, f] : m.weight_formats) {
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      formats.fail(key, "'" + key + "' is not a tensor of " + m.name + did_you_mean(key, keys) +
                            " (docs/model-format.md names the tensors)");
    }
  }
}

} // namespace

Model parse_model_yaml(const std::string& text, const std::string& file) {
  YAML::Node root = detail::parse_yaml(text, file);
  if (!root.IsDefined() || root.IsNull()) {
    throw InputError(SourceLocation{file, 0, 0}, "the model file is empty");
  }
  auto locations = std::make_shared<detail::LocationMap>(file, detail::location_of(root, file));
  MapReader r(root, "", locations);
  r.allow_only(k_model_keys);
  Model m;
  read_identity(r, m);
  read_sizes(r, m);
  read_weight_terms(r, m);
  if (auto mlp = r.map("mlp")) {
    m.mlp = read_mlp(*mlp);
  }
  if (auto moe = r.map("moe")) {
    m.moe = read_moe(*moe);
  }
  read_layer_types(r, m);
  read_mixers(r, m);
  m.ffn_types =
      r.has("ffn_pattern")
          ? read_pattern(r, "ffn_pattern", m.layers,
                         [&](std::string_view p, u64 n) { return ffn_types_of(p, n, m.moe); })
          : ffn_types_of(std::nullopt, m.layers, m.moe);
  m.kv_shared_layers = r.count("kv_shared_layers").value_or(0);
  m.mtp_layers = r.count("mtp_layers").value_or(0);
  m.params = r.count("params");

  validate_model(m, locations->locator());
  check_weight_format_keys(r, m);
  return m;
}

namespace {

/// A YAML double-quoted string that reads back as `s`: control characters (a NUL or a line
/// break in a display name or source) are written as \xNN escapes; found by fuzzing.
std::string quoted(std::string_view s) {
  static constexpr char k_hex[] = "0123456789abcdef";
  std::string out = "\"";
  for (char c : s) {
    auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      out += "\\x";
      out += k_hex[byte >> 4];
      out += k_hex[byte & 0xf];
      continue;
    }
    if (c == '"' || c == '\\') {
      out += '\\';
    }
    out += c;
  }
  return out + "\"";
}

template <class E, std::size_t N>
void write_list(std::ostream& y, std::string_view key, const std::vector<E>& types,
                const NameTable<E, N>& table) {
  y << key << ": [";
  for (std::size_t i = 0; i < types.size(); ++i) {
    y << (i ? ", " : "") << table.name(types[i]);
  }
  y << "]\n";
}

void write_state(std::ostream& y, const StateSpec& s) {
  y << "state:\n  kind: " << k_state_kinds.name(s.kind) << "\n";
  auto size = [&](std::string_view key, u64 value) {
    if (value) {
      y << "  " << key << ": " << value << "\n";
    }
  };
  size("heads", s.heads);
  size("head_dim", s.head_dim);
  size("key_heads", s.key_heads);
  size("key_head_dim", s.key_head_dim);
  size("inner", s.inner);
  size("groups", s.groups);
  size("state_size", s.state_size);
  size("conv_kernel", s.conv_kernel);
  size("elements", s.elements);
  if (s.kind == StateKind::mamba1) {
    size("dt_rank", s.dt_rank);
  }
  if (!s.conv_bias && (s.kind == StateKind::mamba1 || s.kind == StateKind::mamba2)) {
    y << "  conv_bias: false\n";
  }
  if (s.inner_norms) {
    y << "  inner_norms: true\n";
  }
  if (s.conv_dtype) {
    y << "  conv_dtype: " << dtype_name(*s.conv_dtype) << "\n";
  }
  if (s.ssm_dtype) {
    y << "  ssm_dtype: " << dtype_name(*s.ssm_dtype) << "\n";
  }
}

void write_attention(std::ostream& y, const Attention& a) {
  y << "attention:\n  kind: " << attention_kind_name(a.kind) << "\n  heads: " << a.heads << "\n";
  if (a.kind == AttentionKind::mla) {
    if (a.mla.q_lora_rank) {
      y << "  q_lora_rank: " << a.mla.q_lora_rank << "\n";
    } else {
      y << "  q_lora_rank: null\n";
    }
    y << "  kv_lora_rank: " << a.mla.kv_lora_rank << "\n";
    y << "  qk_nope_head_dim: " << a.mla.qk_nope_head_dim << "\n";
    y << "  qk_rope_head_dim: " << a.mla.qk_rope_head_dim << "\n";
    y << "  v_head_dim: " << a.mla.v_head_dim << "\n";
  } else {
    y << "  kv_heads: " << a.kv_heads << "\n  head_dim: " << a.head_dim << "\n";
    if (a.v_head_dim != a.head_dim) {
      y << "  v_head_dim: " << a.v_head_dim << "\n";
    }
  }
  if (a.bias != AttentionBias::none) {
    y << "  bias: " << (a.bias == AttentionBias::qkv ? "qkv" : "all") << "\n";
  }
  if (a.qk_norm) {
    y << "  qk_norm: true\n";
  }
  if (a.sinks) {
    y << "  sinks: true\n";
  }
  if (a.output_gate) {
    y << "  output_gate: true\n";
  }
}

} // namespace

std::string model_to_yaml(const Model& m) {
  std::ostringstream y;
  y << "name: " << m.name << "\n";
  y << "display_name: " << quoted(m.display_name) << "\n";
  if (!m.aliases.empty()) {
    y << "aliases: [";
    for (std::size_t i = 0; i < m.aliases.size(); ++i) {
      y << (i ? ", " : "") << quoted(m.aliases[i]);
    }
    y << "]\n";
  }
  y << "source: " << quoted(m.source) << "\n";
  if (!m.architecture.empty()) {
    y << "architecture: " << quoted(m.architecture) << "\n";
  }
  y << "dtype: " << dtype_name(m.dtype) << "\n";
  if (m.weight_dtype) {
    y << "weight_dtype: " << dtype_name(*m.weight_dtype) << "\n";
    if (m.quantized_weights == QuantizedWeights::experts) {
      y << "quantized_weights: experts\n";
    }
  }
  if (!m.quantization.empty()) {
    y << "quantization: " << quoted(m.quantization) << "\n";
  }
  if (!m.weight_formats.empty()) {
    y << "weight_formats:\n";
    for (const auto& [name, f] : m.weight_formats) {
      y << "  " << name << ": " << quoted(format_spec(f)) << "\n";
    }
  }
  y << "layers: " << m.layers << "\n";
  y << "hidden_size: " << m.hidden_size << "\n";
  if (m.vocab_size) {
    y << "vocab_size: " << m.vocab_size << "\n";
  }
  if (m.max_context) {
    y << "max_context: " << m.max_context << "\n";
  }
  y << "tie_word_embeddings: " << (m.tie_word_embeddings ? "true" : "false") << "\n";
  if (m.lm_head_bias) {
    y << "lm_head_bias: true\n";
  }
  if (m.learned_position_embeddings) {
    y << "learned_position_embeddings: true\n";
  }
  if (m.norm == NormKind::layer) {
    y << "norm: layer\n";
  }
  if (m.norms_per_layer != 2) {
    y << "norms_per_layer: " << m.norms_per_layer << "\n";
  }
  if (has_attention(m)) {
    write_attention(y, m.attention);
  }
  if (m.sliding_attention) {
    const Attention& s = *m.sliding_attention;
    y << "sliding_attention:\n  heads: " << s.heads << "\n  kv_heads: " << s.kv_heads
      << "\n  head_dim: " << s.head_dim << "\n  v_head_dim: " << s.v_head_dim << "\n";
  }
  bool dense =
      std::find(m.ffn_types.begin(), m.ffn_types.end(), FfnType::dense) != m.ffn_types.end();
  if (dense || m.mlp.intermediate_size || m.mlp.bias) {
    y << "mlp:\n  kind: " << (m.mlp.kind == MlpKind::gated ? "gated" : "plain")
      << "\n  intermediate_size: " << m.mlp.intermediate_size << "\n";
    if (m.mlp.bias) {
      y << "  bias: true\n";
    }
  }
  if (m.moe) {
    const Moe& e = *m.moe;
    y << "moe:\n  routed_experts: " << e.routed_experts
      << "\n  shared_experts: " << e.shared_experts
      << "\n  experts_per_token: " << e.experts_per_token
      << "\n  expert_intermediate_size: " << e.expert_intermediate_size << "\n";
    if (e.shared_expert_intermediate_size != e.expert_intermediate_size * e.shared_experts) {
      y << "  shared_expert_intermediate_size: " << e.shared_expert_intermediate_size << "\n";
    }
    y << "  first_dense_layers: " << e.first_dense_layers << "\n";
    if (e.router_bias) {
      y << "  router_bias: true\n";
    }
    if (e.shared_gate) {
      y << "  shared_expert_gate: true\n";
    }
  }
  if (m.sliding_window) {
    y << "sliding_window: " << m.sliding_window << "\n";
  }
  if (m.attention_chunk) {
    y << "attention_chunk: " << m.attention_chunk << "\n";
  }
  if (auto pattern = describe_layer_pattern(m.layer_types)) {
    if (!pattern->empty()) {
      y << "layer_pattern: " << quoted(*pattern) << "\n";
    }
  } else {
    write_list(y, "layer_pattern", m.layer_types, k_layer_types);
  }
  if (m.ffn_types != ffn_types_of(std::nullopt, m.layers, m.moe)) {
    if (auto pattern = describe_ffn_pattern(m.ffn_types)) {
      y << "ffn_pattern: " << quoted(*pattern) << "\n";
    } else {
      write_list(y, "ffn_pattern", m.ffn_types, k_ffn_types);
    }
  }
  if (m.state) {
    write_state(y, *m.state);
  }
  if (m.indexer) {
    y << "indexer:\n  heads: " << m.indexer->heads << "\n  head_dim: " << m.indexer->head_dim
      << "\n  topk: " << m.indexer->topk << "\n";
  }
  if (m.kv_shared_layers) {
    y << "kv_shared_layers: " << m.kv_shared_layers << "\n";
  }
  if (m.mtp_layers) {
    y << "mtp_layers: " << m.mtp_layers << "\n";
  }
  if (m.params) {
    y << "params: " << *m.params << "\n";
  }
  return y.str();
}

} // namespace kvcalc::model
