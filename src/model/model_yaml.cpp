// The kvcalc model YAML format: reading (strict, located errors) and writing (for `import`).

#include <kvcalc/model/loader.hpp>

#include <sstream>

#include <kvcalc/core/spell.hpp>

#include "../core/yaml_support.hpp"

namespace kvcalc {

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
                "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "bias", "qk_norm",
                "sinks"});
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
  if (a.kind == AttentionKind::mla) {
    for (std::string_view key : {"kv_heads", "head_dim"}) {
      if (r.has(key)) {
        r.fail(key, "'" + std::string(key) +
                        "' does not apply to kind mla: its key width is qk_nope_head_dim + "
                        "qk_rope_head_dim and every head reads the shared latent");
      }
    }
    a.mla.q_lora_rank = r.count("q_lora_rank").value_or(0);
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

std::vector<LayerType> read_layer_pattern(const MapReader& r, u64 layers, bool has_window) {
  if (!r.has("layer_pattern")) {
    return expand_layer_pattern(has_window ? "sliding" : "full", layers);
  }
  YAML::Node node = r.node("layer_pattern");
  if (node.IsSequence()) {
    std::string joined;
    for (const auto& item : node) {
      if (!item.IsScalar()) {
        throw InputError(detail::location_of(item, r.locations()->file()),
                         "layer_pattern entries must be full, sliding or linear");
      }
      joined += (joined.empty() ? "" : ",") + item.Scalar();
    }
    if (node.size() != layers) {
      r.fail("layer_pattern", "layer_pattern lists " + std::to_string(node.size()) +
                                  " layers but the model has " + std::to_string(layers) +
                                  "; give one entry per layer, or a cycle as a string such as "
                                  "'sliding*5, full'");
    }
    try {
      return expand_layer_pattern(joined, layers);
    } catch (const InputError& e) {
      r.fail("layer_pattern", e.what());
    }
  }
  std::string pattern = *r.text("layer_pattern");
  try {
    return expand_layer_pattern(pattern, layers);
  } catch (const InputError& e) {
    r.fail("layer_pattern", e.what());
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
  r.allow_only({"name",
                "display_name",
                "aliases",
                "source",
                "dtype",
                "weight_dtype",
                "layers",
                "hidden_size",
                "vocab_size",
                "max_context",
                "tie_word_embeddings",
                "attention",
                "mlp",
                "moe",
                "sliding_window",
                "layer_pattern",
                "linear_state",
                "mtp_layers",
                "params",
                "quantized_weights",
                "learned_position_embeddings",
                "norm",
                "norms_per_layer"});
  Model m;
  m.name = r.required_text("name", "the registry key, e.g. llama-3.1-8b");
  m.display_name = r.text("display_name").value_or(m.name);
  m.source = r.required_text("source", "where the numbers come from: a URL or a paper");
  if (r.has("aliases")) {
    YAML::Node aliases = r.node("aliases");
    if (!aliases.IsSequence()) {
      r.fail("aliases", "'aliases' must be a list of names");
    }
    for (const auto& a : aliases) {
      if (!a.IsScalar()) {
        throw InputError(detail::location_of(a, file), "each alias must be a name");
      }
      m.aliases.push_back(a.Scalar());
    }
  }
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
  m.vocab_size = r.required_count("vocab_size", "the vocabulary size");
  m.max_context = r.count("max_context").value_or(0);
  m.tie_word_embeddings = r.flag("tie_word_embeddings").value_or(false);
  m.learned_position_embeddings = r.flag("learned_position_embeddings").value_or(false);
  m.quantized_weights = read_choice<QuantizedWeights>(
      r, "quantized_weights",
      {{"linear", QuantizedWeights::linear}, {"experts", QuantizedWeights::experts}},
      QuantizedWeights::linear);
  m.norm = read_choice<NormKind>(r, "norm", {{"rms", NormKind::rms}, {"layer", NormKind::layer}},
                                 NormKind::rms);
  m.norms_per_layer = r.count("norms_per_layer").value_or(2);

  auto attention = r.map("attention");
  if (!attention) {
    throw InputError(detail::location_of(root, file),
                     "missing required key 'attention' (a map with kind, heads, ...)");
  }
  m.attention = read_attention(*attention, m.hidden_size);

  if (auto mlp = r.map("mlp")) {
    mlp->allow_only({"kind", "intermediate_size", "bias"});
    m.mlp.kind = read_choice<MlpKind>(
        *mlp, "kind", {{"gated", MlpKind::gated}, {"plain", MlpKind::plain}}, MlpKind::gated);
    m.mlp.bias = mlp->flag("bias").value_or(false);
    m.mlp.intermediate_size = mlp->count("intermediate_size").value_or(0);
  }
  if (auto moe = r.map("moe")) {
    moe->allow_only({"routed_experts", "shared_experts", "experts_per_token",
                     "expert_intermediate_size", "shared_expert_intermediate_size",
                     "first_dense_layers", "router_bias"});
    Moe e;
    e.routed_experts = moe->required_count("routed_experts", "routed experts per MoE layer");
    e.shared_experts = moe->count("shared_experts").value_or(0);
    e.experts_per_token = moe->required_count("experts_per_token", "experts each token uses");
    e.expert_intermediate_size =
        moe->required_count("expert_intermediate_size", "MLP width of one expert");
    e.shared_expert_intermediate_size =
        moe->count("shared_expert_intermediate_size")
            .value_or(checked_mul(e.expert_intermediate_size, e.shared_experts));
    e.first_dense_layers = moe->count("first_dense_layers").value_or(0);
    e.router_bias = moe->flag("router_bias").value_or(false);
    m.moe = e;
  }
  m.sliding_window = r.count("sliding_window").value_or(0);
  if (r.has("sliding_window") && m.sliding_window == 0) {
    r.fail("sliding_window", "'sliding_window' must be at least 1 token");
  }
  m.layer_types = read_layer_pattern(r, m.layers, m.sliding_window != 0);
  if (auto state = r.map("linear_state")) {
    state->allow_only({"elements", "dtype"});
    LinearState s;
    s.elements = state->required_count("elements", "state elements per layer per sequence");
    s.dtype = located_dtype(*state, "dtype", m.dtype);
    m.linear_state = s;
  }
  m.mtp_layers = r.count("mtp_layers").value_or(0);
  m.params = r.count("params");

  validate_model(m, locations->locator());
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
  y << "dtype: " << dtype_name(m.dtype) << "\n";
  if (m.weight_dtype) {
    y << "weight_dtype: " << dtype_name(*m.weight_dtype) << "\n";
    if (m.quantized_weights == QuantizedWeights::experts) {
      y << "quantized_weights: experts\n";
    }
  }
  y << "layers: " << m.layers << "\n";
  y << "hidden_size: " << m.hidden_size << "\n";
  y << "vocab_size: " << m.vocab_size << "\n";
  if (m.max_context) {
    y << "max_context: " << m.max_context << "\n";
  }
  y << "tie_word_embeddings: " << (m.tie_word_embeddings ? "true" : "false") << "\n";
  if (m.learned_position_embeddings) {
    y << "learned_position_embeddings: true\n";
  }
  if (m.norm == NormKind::layer) {
    y << "norm: layer\n";
  }
  if (m.norms_per_layer != 2) {
    y << "norms_per_layer: " << m.norms_per_layer << "\n";
  }
  const Attention& a = m.attention;
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
  if (m.mlp.intermediate_size || !m.moe || m.mlp.bias) {
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
  }
  if (m.sliding_window) {
    y << "sliding_window: " << m.sliding_window << "\n";
  }
  if (auto pattern = describe_layer_pattern(m.layer_types)) {
    if (!pattern->empty()) {
      y << "layer_pattern: " << quoted(*pattern) << "\n";
    }
  } else {
    y << "layer_pattern: [";
    for (std::size_t i = 0; i < m.layer_types.size(); ++i) {
      y << (i ? ", " : "") << layer_type_name(m.layer_types[i]);
    }
    y << "]\n";
  }
  if (m.linear_state) {
    y << "linear_state:\n  elements: " << m.linear_state->elements
      << "\n  dtype: " << dtype_name(m.linear_state->dtype) << "\n";
  }
  if (m.mtp_layers) {
    y << "mtp_layers: " << m.mtp_layers << "\n";
  }
  if (m.params) {
    y << "params: " << *m.params << "\n";
  }
  return y.str();
}

} // namespace kvcalc
