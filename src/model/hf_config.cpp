// HuggingFace config.json → Model, read by what the keys mean: each size under every name the
// families give it, the layer layout from whichever description a config carries (layer_types,
// Nemotron-H's pattern string, MiniMax's attn_type_list, Kimi-Linear's 1-based layer lists,
// Jamba's period and offset, Llama 4's chunked RoPE layers, intervals, windows), the recurrent
// state from the keys of its kind. Family rules only where a family needs them, each said
// where it is applied. A key that would change the cache and that this reader does not read is
// an error naming it (docs/model-format.md, "Importing a config.json").

#include <kvcalc/model/loader.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <filesystem>
#include <initializer_list>
#include <map>
#include <set>

#include <kvcalc/core/file.hpp>
#include <kvcalc/core/units.hpp>

#include "../core/yaml_support.hpp"
#include "hf_quantization.hpp"

namespace kvcalc::model {

namespace {

/// The `quantization` map of ModelOpt's hf_quant_config.json beside `config_file`, where its
/// export left config.json without a quantization_config.
std::optional<YAML::Node> modelopt_file(const std::string& config_file,
                                        const SiblingReader& siblings) {
  std::filesystem::path beside =
      std::filesystem::path(config_file).parent_path() / "hf_quant_config.json";
  std::optional<std::string> text;
  if (siblings) {
    text = siblings("hf_quant_config.json");
  } else if (std::error_code ec;
             !config_file.empty() && std::filesystem::is_regular_file(beside, ec)) {
    text = read_text_file(beside.string());
  }
  if (!text) {
    return std::nullopt;
  }
  YAML::Node root = kvcalc::detail::parse_yaml(*text, beside.string());
  YAML::Node q = root.IsMap() ? root["quantization"] : YAML::Node();
  if (!q || !q.IsMap()) {
    throw InputError(beside.string() + ": ModelOpt's hf_quant_config.json needs a "
                                       "'quantization' map (quant_algo, exclude_modules)");
  }
  return q;
}

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
    TypeDefault{"gemma3_text", "num_attention_heads", 8},
    TypeDefault{"gemma3_text", "num_key_value_heads", 4},
    TypeDefault{"falcon", "max_position_embeddings", 2048},
    TypeDefault{"RefinedWeb", "max_position_embeddings", 2048},
    TypeDefault{"RefinedWebModel", "max_position_embeddings", 2048},
    TypeDefault{"llama4_text", "no_rope_layer_interval", 4},
    TypeDefault{"chatglm", "seq_length", 2048},
};

/// Model types whose MLP is up/down with no gate.
constexpr std::array<std::string_view, 12> k_plain_mlp{
    "falcon", "RefinedWeb", "RefinedWebModel", "gpt_bigcode", "gpt2",       "gpt_neox",
    "gptj",   "opt",        "bloom",           "phi",         "nemotron_h", "mpt"};

/// Model types whose transformers config class ties embeddings by default.
constexpr std::array<std::string_view, 14> k_tied_by_default{"gemma",
                                                             "gemma2",
                                                             "gemma3",
                                                             "gemma3_text",
                                                             "gpt_bigcode",
                                                             "falcon",
                                                             "RefinedWeb",
                                                             "RefinedWebModel",
                                                             "gpt2",
                                                             "minicpm3",
                                                             "MiniCPM3ForCausalLM",
                                                             "mamba",
                                                             "falcon_mamba",
                                                             "mpt"};

/// Families kvcalc knows but does not model, with the reason.
struct Refused {
  std::string_view model_type;
  std::string_view why;
};
constexpr std::array k_refused{
    Refused{"falcon_h1", "runs attention and a Mamba-2 mixer in parallel in every layer"},
    Refused{"zamba2", "shares one attention block between its hybrid layers"},
    Refused{"lfm2", "keeps a short-convolution state kvcalc has no kind for"},
    Refused{"lfm2_moe", "keeps a short-convolution state kvcalc has no kind for"},
    Refused{"plamo2", "interleaves Mamba and attention by a step rule kvcalc does not read"},
    Refused{"minimax_m3", "keeps a sparse-attention index cache kvcalc has no kind for"},
};

/// Parts of a key's name that say it may describe the cache: a key that has one, is not read,
/// and is not on k_unrelated_keys is an error (never silently ignored).
constexpr std::array<std::string_view, 34> k_cache_words{
    "window",      "chunk",          "layer_type",     "block_type",  "override_pattern",
    "attn_type",   "attention_type", "full_attn",      "linear_attn", "kv_",
    "_kv",         "key_value",      "mamba",          "ssm",         "state_size",
    "d_state",     "conv",           "linear_",        "index_",      "kda",
    "lightning",   "shared_layers",  "nextn",          "mtp",         "head_dim",
    "n_head",      "num_heads",      "n_groups",       "num_layers",  "_layers",
    "multi_query", "block_config",   "heads_in_group", "pattern"};

/// A key with a cache word in its name that does not change the cache, and why.
struct UnrelatedKey {
  std::string_view key;
  std::string_view why;
};

/// Keys with a cache word in their name known not to change the cache; any other unread one
/// stops the import.
constexpr std::array<UnrelatedKey, 38> k_unrelated_keys{{
    {"use_cache", "whether generate() keeps a cache, not its layout"},
    {"attention_dropout", "training only"},
    {"conv_bias", "a weight of the convolution, not the state it keeps"},
    {"mamba_proj_bias", "a weight, not the state"},
    {"mamba_hidden_act", "an activation function"},
    {"chunk_size", "the Mamba-2 scan's chunking of a prompt, not a cache"},
    {"mamba_chunk_size", "the Mamba-2 scan's chunking of a prompt, not a cache"},
    {"chunk_size_feed_forward",
     "transformers' PretrainedConfig default: the feed-forward computed in chunks, compute only"},
    {"mtp_use_dedicated_embeddings", "which embedding the MTP module reads, not its layers"},
    {"use_mtp", "a switch; the MTP layers' count is read from their own key"},
    {"layernorm_full_attention_alpha", "a norm's scale"},
    {"layernorm_full_attention_beta", "a norm's shift"},
    {"layernorm_linear_attention_alpha", "a norm's scale"},
    {"layernorm_linear_attention_beta", "a norm's shift"},
    {"rotary_dim", "the rotated part of each head, inside the head the cache stores"},
    {"rotary_pct", "the rotated part of each head, inside the head the cache stores"},
    {"qk_layernorm", "norms on q and k before the cache"},
    {"use_qk_norm", "norms on q and k before the cache"},
    {"attn_logit_softcapping", "a cap on the scores"},
    {"num_logits_to_keep", "logits returned by forward()"},
    {"mla_use_nope", "how MLA's no-RoPE part is computed, not what the latent holds"},
    {"use_mamba_kernels", "which kernels run"},
    {"mamba_d_ssm", "Falcon-H1's SSM width, whose family is refused by name"},
    {"kv_lora_rank_norm", "a norm on the latent"},
    {"moe_layer_freq_offset", "which layers are MoE, a feed-forward matter"},
    {"router_jitter_noise", "training only"},
    {"mamba_step", "a training schedule"},
    {"num_nextn_predict_layers_share", "weight sharing among MTP layers"},
    {"ssm_in_multiplier", "a scale"},
    {"ssm_out_multiplier", "a scale"},
    {"ssm_multipliers", "scales"},
    {"mamba_rms_norm", "a norm"},
    {"mamba_norm_before_gate", "a norm's place"},
    {"mamba_use_mlp", "a feed-forward matter"},
    {"attn_implementation", "which kernels run"},
    {"swa_attention_sink_bias", "a learned bias in the scores"},
    {"add_swa_attention_sink_bias", "a learned bias in the scores"},
    {"use_unified_vision_chunk",
     "how images are cut into chunks for the vision tower (Kimi-K2.5; vLLM's chat_utils.py)"},
}};

template <std::size_t N>
bool contains(const std::array<std::string_view, N>& list, std::string_view value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

/// Reads a config whose architecture keys live in `text_config` (multimodal) or at the top, and
/// remembers every key it looked at, so that what it never read can be checked.
class ConfigView {
public:
  ConfigView(std::vector<MapReader> scopes, std::shared_ptr<detail::LocationMap> locations,
             std::string model_type, std::string file)
      : m_scopes(std::move(scopes)), m_locations(std::move(locations)),
        m_model_type(std::move(model_type)), m_file(std::move(file)) {}

  [[nodiscard]] const std::string& model_type() const { return m_model_type; }
  [[nodiscard]] const std::string& file() const { return m_file; }

  /// The first scope that has any of `keys` (not null), and which key it had.
  [[nodiscard]] std::optional<std::pair<const MapReader*, std::string_view>>
  find(std::initializer_list<std::string_view> keys) const {
    for (auto key : keys) {
      m_read.emplace(key);
    }
    for (const auto& scope : m_scopes) {
      for (auto key : keys) {
        if (scope.has(key)) {
          return std::make_pair(&scope, key);
        }
      }
    }
    return std::nullopt;
  }

  /// An integer under any of `keys`, else the model type's class default; recorded under
  /// `schema_path` for located validation.
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
    m_read.emplace(key);
    return std::any_of(m_scopes.begin(), m_scopes.end(),
                       [&](const MapReader& s) { return s.node(key).IsDefined(); });
  }

  [[nodiscard]] std::optional<MapReader> map(std::string_view key) const {
    m_read.emplace(key);
    for (const auto& scope : m_scopes) {
      if (auto m = scope.map(key)) {
        return m;
      }
    }
    return std::nullopt;
  }

  /// Marks keys as read where their value needs no reading (they do not change the cache).
  void consume(std::initializer_list<std::string_view> keys) const {
    for (auto key : keys) {
      m_read.emplace(key);
    }
  }

  [[nodiscard]] const std::vector<MapReader>& scopes() const { return m_scopes; }
  [[nodiscard]] const std::shared_ptr<detail::LocationMap>& locations() const {
    return m_locations;
  }

  /// Every key of any scope that names a cache word and was never read, in config order.
  [[nodiscard]] std::vector<std::pair<std::string, SourceLocation>> unread_cache_keys() const {
    std::vector<std::pair<std::string, SourceLocation>> out;
    for (const auto& scope : m_scopes) {
      for (const auto& item : scope.yaml()) {
        if (!item.first.IsScalar()) {
          continue;
        }
        std::string key = item.first.Scalar();
        std::string lower;
        for (char ch : key) {
          lower += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        }
        bool unrelated = std::any_of(k_unrelated_keys.begin(), k_unrelated_keys.end(),
                                     [&](const UnrelatedKey& u) { return u.key == lower; });
        if (m_read.count(key) > 0 || unrelated || item.second.IsNull()) {
          continue;
        }
        bool cache =
            std::any_of(k_cache_words.begin(), k_cache_words.end(),
                        [&](std::string_view w) { return lower.find(w) != std::string::npos; });
        if (cache) {
          out.emplace_back(key, scope.where(key));
        }
      }
    }
    return out;
  }

private:
  std::vector<MapReader> m_scopes;
  std::shared_ptr<detail::LocationMap> m_locations;
  std::string m_model_type;
  std::string m_file;
  mutable std::set<std::string, std::less<>> m_read;
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
  // A file of the Hub ("https://huggingface.co/Org/Name/resolve/main/config.json"): its repo.
  if (std::size_t resolve = file.find("/resolve/"); resolve != std::string::npos) {
    std::string repo = file.substr(0, resolve);
    return repo.substr(repo.rfind('/') + 1);
  }
  std::error_code ec;
  std::filesystem::path path = std::filesystem::absolute(file, ec);
  if (ec) {
    path = file;
  }
  if (path.filename() == "config.json" && path.has_parent_path()) {
    // The HF cache: models--Org--Name/snapshots/<commit>/config.json names the repo.
    std::filesystem::path snapshot = path.parent_path();
    std::string repo_dir = snapshot.parent_path().parent_path().filename().string();
    if (snapshot.parent_path().filename() == "snapshots" && repo_dir.starts_with("models--")) {
      return repo_dir.substr(repo_dir.rfind("--") + 2);
    }
    if (!snapshot.filename().empty()) {
      return snapshot.filename().string();
    }
  }
  return path.stem().string();
}

bool is_falcon(const std::string& type) {
  return type == "falcon" || type == "RefinedWeb" || type == "RefinedWebModel";
}

/// The per-layer layout a config describes: the mixer of each layer, the feed-forward part where
/// the description gives it, and which recurrent mixer the state layers are.
struct Layout {
  std::vector<LayerType> types;
  std::vector<FfnType> ffn; ///< empty: from the MoE keys
  std::optional<StateKind> state;
};

/// The state kind the config's keys describe, for layers a layout calls linear or mamba.
std::optional<StateKind> state_kind_of(const ConfigView& c) {
  if (c.present("linear_num_value_heads")) {
    return StateKind::gated_deltanet;
  }
  if (c.present("linear_attn_config")) {
    return StateKind::kda;
  }
  if (c.present("attn_type_list") || c.present("decoder_attention_types") ||
      c.model_type().starts_with("minimax")) {
    return StateKind::lightning;
  }
  if (c.present("mamba_num_heads") || c.present("mamba_n_heads") ||
      (c.present("n_groups") && c.present("num_heads")) || c.model_type() == "mamba2") {
    return StateKind::mamba2;
  }
  if (c.present("mamba_d_state") || c.present("state_size") || c.model_type() == "mamba" ||
      c.model_type() == "falcon_mamba") {
    return StateKind::mamba1;
  }
  return std::nullopt;
}

/// One word of a `layer_types` (or `layers_block_type`) list: the mixer and, for Nemotron-H's
/// MLP-only and MoE-only blocks, the feed-forward part.
std::pair<LayerType, std::optional<FfnType>> layer_word(const YAML::Node& item,
                                                        const MapReader& scope) {
  std::string word = detail::scalar_of(item, scope.locations()->file(), "each layer type");
  if (word == "full_attention" || word == "attention" || word == "global" ||
      word == "deepseek_sparse_attention") {
    return {LayerType::full, std::nullopt};
  }
  if (word == "sliding_attention" || word == "local" || word == "sliding") {
    return {LayerType::sliding, std::nullopt};
  }
  if (word == "chunked_attention") {
    return {LayerType::chunked, std::nullopt};
  }
  if (word == "linear_attention" || word == "mamba") {
    return {LayerType::state, std::nullopt};
  }
  if (word == "mlp") {
    return {LayerType::none, FfnType::dense};
  }
  if (word == "moe") {
    return {LayerType::none, FfnType::moe};
  }
  throw InputError(detail::location_of(item, scope.locations()->file()),
                   "layer type '" + word +
                       "' is not one kvcalc models (full_attention, sliding_attention, "
                       "chunked_attention, linear_attention, mamba, mlp, moe); write a kvcalc "
                       "YAML with layer_pattern (docs/model-format.md)");
}

/// A list of per-layer integers (attn_type_list, no_rope_layers).
std::vector<u64> int_list(const MapReader& scope, std::string_view key, u64 layers,
                          bool exact_length) {
  YAML::Node list = scope.node(key);
  if (!list.IsSequence() || (exact_length && list.size() != layers)) {
    scope.fail(key, std::string(key) + " must list one value per layer (" + std::to_string(layers) +
                        " layers)");
  }
  std::vector<u64> out;
  for (const auto& item : list) {
    std::string s = detail::scalar_of(item, scope.locations()->file(), "each entry");
    if (s.empty() || !std::all_of(s.begin(), s.end(), [](char ch) {
          return std::isdigit(static_cast<unsigned char>(ch)) != 0;
        })) {
      throw InputError(detail::location_of(item, scope.locations()->file()),
                       std::string(key) + " entries must be non-negative integers, got '" + s +
                           "'");
    }
    out.push_back(std::stoull(s));
  }
  return out;
}

/// Stops at a family kvcalc knows but does not model (k_refused), saying why.
void refuse_unmodelled_family(const ConfigView& c) {
  const std::string& type = c.model_type();
  for (const auto& r : k_refused) {
    if (type == r.model_type) {
      throw InputError(SourceLocation{c.file(), 1, 1},
                       "model_type '" + type + "' " + std::string(r.why) +
                           "; kvcalc does not model it — write a kvcalc YAML that approximates "
                           "it (docs/model-format.md)");
    }
  }
}

// One decoder per encoding of the layer layout. Each reads its own keys only and gives nullopt
// when the config does not use its encoding; read_layout tries them in k_layout_decoders' order.

/// Nemotron-H's `hybrid_override_pattern`, one character per layer: M a Mamba-2 mixer,
/// * attention, - an MLP-only block, E an MoE-only block.
std::optional<Layout> hybrid_override_layout(const ConfigView& c, u64 layers,
                                             Diagnostics& /*diag*/) {
  auto hit = c.find({"hybrid_override_pattern"});
  if (!hit) {
    return std::nullopt;
  }
  const MapReader& scope = *hit->first;
  c.locations()->add("layer_pattern", scope.where(hit->second));
  std::string pattern = *scope.text(hit->second);
  if (pattern.size() != layers) {
    scope.fail(hit->second, "hybrid_override_pattern has " + std::to_string(pattern.size()) +
                                " characters but the model has " + std::to_string(layers) +
                                " layers");
  }
  Layout out;
  for (char ch : pattern) {
    switch (ch) {
    case 'M':
      out.types.push_back(LayerType::state);
      out.ffn.push_back(FfnType::none);
      break;
    case '*':
      out.types.push_back(LayerType::full);
      out.ffn.push_back(FfnType::none);
      break;
    case '-':
      out.types.push_back(LayerType::none);
      out.ffn.push_back(FfnType::dense);
      break;
    case 'E':
      out.types.push_back(LayerType::none);
      out.ffn.push_back(FfnType::moe);
      break;
    default:
      scope.fail(hit->second, std::string("hybrid_override_pattern character '") + ch +
                                  "' is not one kvcalc reads (M: Mamba-2, *: attention, -: "
                                  "MLP, E: MoE)");
    }
  }
  out.state = StateKind::mamba2;
  return out;
}

/// `layer_types` (or `layers_block_type`), one word per layer (layer_word); the feed-forward
/// parts only where a word names an MLP-only or MoE-only block, the state kind from the keys.
std::optional<Layout> layer_types_layout(const ConfigView& c, u64 layers, Diagnostics& /*diag*/) {
  auto hit = c.find({"layer_types", "layers_block_type"});
  if (!hit) {
    return std::nullopt;
  }
  const MapReader& scope = *hit->first;
  c.locations()->add("layer_pattern", scope.where(hit->second));
  YAML::Node list = scope.node(hit->second);
  if (!list.IsSequence() || list.size() != layers) {
    scope.fail(hit->second, std::string(hit->second) + " must list one type per layer (" +
                                std::to_string(layers) + " layers)");
  }
  Layout out;
  bool ffn = false;
  for (const auto& item : list) {
    auto [mixer, part] = layer_word(item, scope);
    out.types.push_back(mixer);
    ffn = ffn || part.has_value();
    out.ffn.push_back(part.value_or(FfnType::none));
  }
  if (!ffn) {
    out.ffn.clear();
  }
  out.state = state_kind_of(c);
  return out;
}

/// MiniMax's `attn_type_list` (or `decoder_attention_types`), one entry per layer: 0 lightning
/// (linear) attention, 1 softmax attention.
std::optional<Layout> attn_type_list_layout(const ConfigView& c, u64 layers,
                                            Diagnostics& /*diag*/) {
  auto hit = c.find({"attn_type_list", "decoder_attention_types"});
  if (!hit) {
    return std::nullopt;
  }
  Layout out;
  for (u64 v : int_list(*hit->first, hit->second, layers, true)) {
    if (v > 1) {
      hit->first->fail(hit->second,
                       std::string(hit->second) + " entries must be 0 (linear) or 1 (softmax)");
    }
    out.types.push_back(v == 1 ? LayerType::full : LayerType::state);
  }
  out.state = StateKind::lightning;
  return out;
}

/// Kimi-Linear's `linear_attn_config`: `kda_layers` and `full_attn_layers`, 1-based layer
/// numbers of the KDA and the full-attention (MLA) layers, together naming each layer once.
std::optional<Layout> kda_layers_layout(const ConfigView& c, u64 layers, Diagnostics& /*diag*/) {
  auto linear = c.map("linear_attn_config");
  if (!linear || !linear->has("kda_layers")) {
    return std::nullopt;
  }
  Layout out;
  out.types.assign(layers, LayerType::none);
  std::vector<bool> seen(layers, false);
  for (auto [key, t] : {std::pair{"kda_layers", LayerType::state},
                        std::pair{"full_attn_layers", LayerType::full}}) {
    if (!linear->has(key)) {
      continue;
    }
    for (u64 one_based : int_list(*linear, key, layers, false)) {
      if (one_based == 0 || one_based > layers || seen[one_based - 1]) {
        linear->fail(key, std::string(key) + " entries are 1-based layer numbers from 1 to " +
                              std::to_string(layers) + ", each once; got " +
                              std::to_string(one_based));
      }
      seen[one_based - 1] = true;
      out.types[one_based - 1] = t;
    }
  }
  if (std::find(seen.begin(), seen.end(), false) != seen.end()) {
    linear->fail("kda_layers", "kda_layers and full_attn_layers must name every layer");
  }
  out.state = StateKind::kda;
  return out;
}

/// Qwen3-Next's `full_attention_interval` (a config without layer_types): every interval-th
/// layer is full attention, the others are state layers of the kind the keys describe.
std::optional<Layout> full_attention_interval_layout(const ConfigView& c, u64 layers,
                                                     Diagnostics& /*diag*/) {
  auto interval = c.count({"full_attention_interval"}, "layer_pattern");
  if (!interval) {
    return std::nullopt;
  }
  if (*interval == 0) {
    throw InputError(c.scopes().front().where("full_attention_interval"),
                     "full_attention_interval must be at least 1");
  }
  Layout out;
  for (u64 i = 0; i < layers; ++i) {
    out.types.push_back((i + 1) % *interval == 0 ? LayerType::full : LayerType::state);
  }
  out.state = state_kind_of(c);
  return out;
}

/// Jamba's `attn_layer_period` and `attn_layer_offset` (default 0): attention where
/// i % period == offset, Mamba elsewhere.
std::optional<Layout> attn_layer_period_layout(const ConfigView& c, u64 layers,
                                               Diagnostics& /*diag*/) {
  auto period = c.count({"attn_layer_period"}, "layer_pattern");
  if (!period) {
    return std::nullopt;
  }
  u64 offset = c.count({"attn_layer_offset"}, "layer_pattern").value_or(0);
  if (*period == 0 || offset >= *period) {
    throw InputError(c.scopes().front().where("attn_layer_period"),
                     "attn_layer_period must be at least 1 and above attn_layer_offset");
  }
  Layout out;
  for (u64 i = 0; i < layers; ++i) {
    out.types.push_back(i % *period == offset ? LayerType::full : LayerType::state);
  }
  out.state = StateKind::mamba1;
  return out;
}

/// Bamba's `attn_layer_indices`: attention on the listed (0-based) layers, Mamba-2 elsewhere.
std::optional<Layout> attn_layer_indices_layout(const ConfigView& c, u64 layers,
                                                Diagnostics& /*diag*/) {
  auto hit = c.find({"attn_layer_indices"});
  if (!hit) {
    return std::nullopt;
  }
  Layout out;
  out.types.assign(layers, LayerType::state);
  for (u64 i : int_list(*hit->first, hit->second, layers, false)) {
    if (i >= layers) {
      hit->first->fail(hit->second,
                       "attn_layer_indices entries must be below " + std::to_string(layers));
    }
    out.types[i] = LayerType::full;
  }
  out.state = StateKind::mamba2;
  return out;
}

/// MiMo-V2's `hybrid_layer_pattern`, one entry per layer: 1 a sliding-window layer, 0 a full
/// one (vLLM's mimo_v2_flash.py); its attention_chunk_size is not read by the model.
std::optional<Layout> hybrid_layer_pattern_layout(const ConfigView& c, u64 layers,
                                                  Diagnostics& /*diag*/) {
  auto hit = c.find({"hybrid_layer_pattern"});
  if (!hit) {
    return std::nullopt;
  }
  c.locations()->add("layer_pattern", hit->first->where(hit->second));
  Layout out;
  for (u64 v : int_list(*hit->first, hit->second, layers, true)) {
    if (v > 1) {
      hit->first->fail(hit->second, "hybrid_layer_pattern entries must be 0 (full) or 1 (sliding)");
    }
    out.types.push_back(v == 1 ? LayerType::sliding : LayerType::full);
  }
  c.consume({"attention_chunk_size"});
  return out;
}

/// The attention-free families, by model_type alone (mamba, mamba2, falcon_mamba): every layer
/// is a Mamba mixer with no feed-forward part.
std::optional<Layout> attention_free_layout(const ConfigView& c, u64 layers,
                                            Diagnostics& /*diag*/) {
  const std::string& type = c.model_type();
  if (type != "mamba" && type != "mamba2" && type != "falcon_mamba") {
    return std::nullopt;
  }
  Layout out;
  out.types.assign(layers, LayerType::state);
  out.ffn.assign(layers, FfnType::none);
  out.state = type == "mamba2" ? StateKind::mamba2 : StateKind::mamba1;
  return out;
}

/// Llama 4's `attention_chunk_size` (when above 0): RoPE layers attend over their chunk, NoPE
/// layers over everything. `no_rope_layers` marks each layer (0: NoPE); without it every
/// `no_rope_layer_interval`-th layer is NoPE (4, transformers' default, with a warning).
std::optional<Layout> chunked_attention_layout(const ConfigView& c, u64 layers, Diagnostics& diag) {
  auto chunk = c.count({"attention_chunk_size"}, "attention_chunk");
  if (!chunk || *chunk == 0) {
    return std::nullopt;
  }
  std::vector<u64> rope;
  if (auto hit = c.find({"no_rope_layers"})) {
    rope = int_list(*hit->first, hit->second, layers, false);
    if (!rope.empty() && rope.size() != layers) {
      hit->first->fail(hit->second, "no_rope_layers must list one value per layer (" +
                                        std::to_string(layers) + ") or be empty");
    }
  }
  if (rope.empty()) {
    u64 interval = c.count({"no_rope_layer_interval"}, "layer_pattern").value_or(4);
    if (interval == 0) {
      throw InputError(SourceLocation{c.file(), 1, 1}, "no_rope_layer_interval must be at least 1");
    }
    for (u64 i = 0; i < layers; ++i) {
      rope.push_back((i + 1) % interval != 0 ? 1 : 0);
    }
    if (!c.present("no_rope_layer_interval")) {
      diag.warnings.push_back("config has attention_chunk_size but no no_rope_layers: every " +
                              std::to_string(interval) +
                              "th layer is taken to be a global (NoPE) layer, as in "
                              "transformers' Llama4TextConfig");
    }
  }
  Layout out;
  for (u64 r : rope) {
    out.types.push_back(r != 0 ? LayerType::chunked : LayerType::full);
  }
  return out;
}

using LayoutDecoder = std::optional<Layout> (*)(const ConfigView&, u64 layers, Diagnostics&);

/// The layout encodings in the order they are tried: the first one a config carries wins.
constexpr std::array<LayoutDecoder, 10> k_layout_decoders{
    hybrid_override_layout,         // hybrid_override_pattern (Nemotron-H)
    hybrid_layer_pattern_layout,    // hybrid_layer_pattern (MiMo-V2)
    layer_types_layout,             // layer_types, layers_block_type
    attn_type_list_layout,          // attn_type_list, decoder_attention_types (MiniMax)
    kda_layers_layout,              // linear_attn_config: kda_layers, full_attn_layers (Kimi)
    full_attention_interval_layout, // full_attention_interval (Qwen3-Next)
    attn_layer_period_layout,       // attn_layer_period, attn_layer_offset (Jamba)
    attn_layer_indices_layout,      // attn_layer_indices (Bamba)
    attention_free_layout,          // model_type mamba, mamba2, falcon_mamba
    chunked_attention_layout,       // attention_chunk_size, no_rope_layers (Llama 4)
};

/// The layout of whichever encoding the config carries; with none, every layer is full
/// attention (read_windows then decides which of them slide).
Layout read_layout(const ConfigView& c, u64 layers, Diagnostics& diag) {
  refuse_unmodelled_family(c);
  for (LayoutDecoder decode : k_layout_decoders) {
    if (std::optional<Layout> layout = decode(c, layers, diag)) {
      return std::move(*layout);
    }
  }
  Layout out;
  out.types.assign(layers, LayerType::full);
  return out;
}

/// The window of sliding layers, and which layers slide when the layout did not say.
void read_windows(const ConfigView& c, Model& m, Diagnostics& diag, bool layout_given) {
  auto window = c.count({"sliding_window", "sliding_window_size"}, "sliding_window");
  if (auto other = c.count({"sliding_window_size"}, "sliding_window"); other && window != other) {
    throw InputError(c.scopes().front().where("sliding_window_size"),
                     "sliding_window and sliding_window_size disagree (" +
                         std::to_string(window.value_or(0)) + " and " + std::to_string(*other) +
                         "); kvcalc cannot tell which window the layers use");
  }
  c.consume({"use_sliding_window", "sliding_window_pattern", "max_window_layers"});
  // Phi-4-mini's full_attn_mod: 1, and neither vLLM nor Microsoft's code reads it; every layer
  // is full attention there. Another value is a layout kvcalc has not seen.
  if (auto mod = c.count({"full_attn_mod"}, "layer_pattern"); mod && *mod != 1) {
    auto hit = c.find({"full_attn_mod"});
    throw InputError(hit->first->where(hit->second),
                     "full_attn_mod " + std::to_string(*mod) +
                         ": kvcalc knows only 1 (Phi-4-mini: every layer full attention); "
                         "write a kvcalc YAML with the layers' types (docs/model-format.md)");
  }
  bool slides = count_layers(m, LayerType::sliding) > 0;
  const std::string& type = c.model_type();
  if (layout_given) {
    if (slides) {
      if (!window || *window == 0) {
        throw InputError(c.locations()->find("layer_pattern"),
                         "layer_types has sliding layers but sliding_window is not set");
      }
      m.sliding_window = *window;
    }
  } else if (window && *window > 0) {
    if (auto use = c.flag({"use_sliding_window"}); use && !*use) {
      diag.warnings.push_back("sliding_window " + std::to_string(*window) +
                              " is ignored because use_sliding_window is false: every layer "
                              "attends to the full context");
    } else if (auto pattern = c.count({"sliding_window_pattern"}, "layer_pattern")) {
      // transformers: layer i is global when (i + 1) % pattern == 0.
      if (*pattern > 1) {
        for (u64 i = 0; i < m.layers; ++i) {
          if ((i + 1) % *pattern != 0 && m.layer_types[i] == LayerType::full) {
            m.layer_types[i] = LayerType::sliding;
          }
        }
      }
    } else if (type == "gemma2") {
      diag.warnings.push_back("gemma2 config without layer_types: even layers slide (window " +
                              std::to_string(*window) +
                              "), odd layers are global, as in transformers' Gemma2");
      for (u64 i = 0; i < m.layers; i += 2) {
        m.layer_types[i] = LayerType::sliding;
      }
    } else if (type == "qwen2" || type == "qwen2_moe" || type == "qwen3" || type == "qwen3_moe") {
      u64 first = c.count({"max_window_layers"}, "layer_pattern").value_or(0);
      for (u64 i = first; i < m.layers; ++i) {
        m.layer_types[i] = LayerType::sliding;
      }
      diag.warnings.push_back("use_sliding_window is on: layers " + std::to_string(first) +
                              " and above slide (max_window_layers), as in transformers' " + type);
    } else if (std::all_of(m.layer_types.begin(), m.layer_types.end(),
                           [](LayerType t) { return t == LayerType::full; })) {
      if (type != "mistral" && type != "mixtral") {
        diag.warnings.push_back("sliding_window " + std::to_string(*window) +
                                " with no layer_types or sliding_window_pattern: every layer is "
                                "taken to slide (as in Mistral)");
      }
      m.layer_types.assign(m.layers, LayerType::sliding);
    }
    slides = count_layers(m, LayerType::sliding) > 0;
    if (slides) {
      m.sliding_window = *window;
    }
  }
  // A window as long as the model's context never binds: the layers attend over everything.
  if (slides && m.max_context != 0 && m.sliding_window >= m.max_context) {
    diag.warnings.push_back("sliding_window " + group_digits(m.sliding_window) +
                            " is not below max_position_embeddings " + group_digits(m.max_context) +
                            ": it never binds, so the sliding layers are read as full attention");
    std::replace(m.layer_types.begin(), m.layer_types.end(), LayerType::sliding, LayerType::full);
    m.sliding_window = 0;
  }
}

/// The attention of the attending layers: heads, KV heads, widths, or MLA's latent.
void read_attention(const ConfigView& c, Model& m, Diagnostics& diag) {
  const std::string& type = c.model_type();
  Attention& a = m.attention;
  a.heads = c.required({"num_attention_heads", "n_head", "num_heads", "n_heads"}, "attention.heads",
                       "query heads");
  if (auto rank = c.count({"kv_lora_rank"}, "attention.kv_lora_rank"); rank && *rank > 0) {
    a.kind = AttentionKind::mla;
    a.mla.kv_lora_rank = *rank;
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
    // The per-head width and KV-head count of an MLA model describe its expanded heads; the
    // cache is the latent (head_dim of Kimi-Linear's config is an unused 72).
    c.consume({"head_dim", "num_key_value_heads", "num_kv_heads"});
    a.kv_heads = a.heads;
    a.head_dim = checked_add(a.mla.qk_nope_head_dim, a.mla.qk_rope_head_dim);
    // GLM-5 states the query-key width; vLLM's DeepSeek code recomputes it from the two parts.
    if (auto qk = c.count({"qk_head_dim"}, "attention.head_dim"); qk && *qk != a.head_dim) {
      auto hit = c.find({"qk_head_dim"});
      throw InputError(hit->first->where(hit->second),
                       "qk_head_dim " + std::to_string(*qk) +
                           " is not qk_nope_head_dim + "
                           "qk_rope_head_dim (" +
                           std::to_string(a.head_dim) +
                           "); kvcalc cannot tell which width the heads have");
    }
    a.v_head_dim = a.mla.v_head_dim;
    return;
  }
  c.consume({"qk_rope_head_dim", "qk_nope_head_dim", "q_lora_rank"});
  if (is_falcon(type)) {
    // Legacy "RefinedWeb" configs (Falcon-40B/180B) predate the flag and mean the new
    // decoder architecture; "RefinedWebModel" (Falcon-7B) the old one.
    bool new_arch = c.flag({"new_decoder_architecture"}).value_or(type == "RefinedWeb");
    if (new_arch) {
      // transformers' FalconAttention: num_kv_heads under the new decoder, multi_query unused.
      a.kv_heads = c.count({"num_kv_heads", "n_head_kv"}, "attention.kv_heads").value_or(a.heads);
      c.consume({"multi_query"});
    } else {
      a.kv_heads = c.flag({"multi_query"}).value_or(true) ? 1 : a.heads;
      c.consume({"num_kv_heads", "n_head_kv"});
    }
  } else if (type == "gpt_bigcode") {
    a.kv_heads = c.flag({"multi_query"}).value_or(true) ? 1 : a.heads;
  } else if (type == "mpt") {
    // MPT's attn_config.attn_type (mosaicml's configuration_mpt.py): multi-query attention
    // keeps one KV head, grouped-query kv_n_heads, multi-head every head.
    std::string kind = c.text({"attn_type"}).value_or("multihead_attention");
    if (kind == "multiquery_attention") {
      a.kv_heads = 1;
    } else if (kind == "grouped_query_attention") {
      a.kv_heads = c.required({"kv_n_heads"}, "attention.kv_heads",
                              "KV heads of grouped-query "
                              "attention");
    } else if (kind == "multihead_attention") {
      a.kv_heads = a.heads;
      c.consume({"kv_n_heads"});
    } else {
      auto hit = c.find({"attn_type"});
      throw InputError(hit->first->where(hit->second),
                       "attn_type '" + kind +
                           "' is not one of MPT's (multihead_attention, "
                           "multiquery_attention, grouped_query_attention)");
    }
  } else if (auto mq = c.flag({"multi_query_attention"})) {
    // ChatGLM: multi_query_group_num KV groups when multi-query attention is on.
    a.kv_heads = *mq ? c.required({"multi_query_group_num"}, "attention.kv_heads",
                                  "KV groups of multi-query attention")
                     : a.heads;
    c.consume({"multi_query_group_num"}); // unused without multi-query attention
  } else if (auto kv = c.count({"num_key_value_heads", "num_kv_heads", "n_head_kv",
                                "multi_query_group_num", "kv_n_heads"},
                               "attention.kv_heads")) {
    a.kv_heads = *kv;
  } else {
    a.kv_heads = a.heads;
  }
  a.kind = a.kv_heads == a.heads ? AttentionKind::mha
           : a.kv_heads == 1     ? AttentionKind::mqa
                                 : AttentionKind::gqa;
  if (auto head_dim =
          c.count({"head_dim", "kv_channels", "attention_head_dim"}, "attention.head_dim")) {
    a.head_dim = *head_dim;
  } else if (a.heads != 0 && m.hidden_size % a.heads == 0) {
    a.head_dim = m.hidden_size / a.heads;
  } else {
    throw InputError(
        m.hidden_size ? c.locations()->find("attention.heads") : SourceLocation{c.file(), 1, 1},
        "config has no head_dim and hidden_size (" + std::to_string(m.hidden_size) +
            ") is not a multiple of num_attention_heads (" + std::to_string(a.heads) + ")");
  }
  a.v_head_dim = c.count({"v_head_dim"}, "attention.v_head_dim").value_or(a.head_dim);
  // Sliding layers with heads or widths of their own (MiMo-V2's swa_* keys).
  if (count_layers(m, LayerType::sliding) > 0) {
    auto kv = c.count({"swa_num_key_value_heads"}, "sliding_attention.kv_heads");
    auto heads = c.count({"swa_num_attention_heads"}, "sliding_attention.heads");
    auto dim = c.count({"swa_head_dim"}, "sliding_attention.head_dim");
    auto v = c.count({"swa_v_head_dim"}, "sliding_attention.v_head_dim");
    if (kv || heads || dim || v) {
      Attention s = a;
      s.heads = heads.value_or(a.heads);
      s.kv_heads = kv.value_or(a.kv_heads);
      s.head_dim = dim.value_or(a.head_dim);
      s.v_head_dim = v.value_or(dim.value_or(a.v_head_dim));
      s.kind = s.kv_heads == s.heads ? AttentionKind::mha
               : s.kv_heads == 1     ? AttentionKind::mqa
                                     : AttentionKind::gqa;
      m.sliding_attention = s;
    }
  }
  a.output_gate = c.flag({"attn_output_gate"}).value_or(type == "qwen3_next");
}

/// The state of the `state` layers, from the keys of their kind.
void read_state(const ConfigView& c, Model& m, std::optional<StateKind> kind, Diagnostics& diag) {
  if (count_layers(m, LayerType::state) == 0) {
    return;
  }
  if (!kind) {
    throw InputError(SourceLocation{c.file(), 1, 1},
                     "config has recurrent (linear or mamba) layers but none of the keys that "
                     "size a state kvcalc knows (linear_num_value_heads, linear_attn_config, "
                     "mamba_num_heads, num_heads with n_groups, state_size, mamba_d_state); "
                     "write a kvcalc YAML with state (docs/model-format.md)");
  }
  StateSpec s;
  s.kind = *kind;
  auto need = [&](std::initializer_list<std::string_view> keys, std::string_view path,
                  std::string_view meaning) { return c.required(keys, path, meaning); };
  switch (*kind) {
  case StateKind::gated_deltanet:
    s.key_heads = need({"linear_num_key_heads"}, "state.key_heads", "Gated DeltaNet key heads");
    s.heads = need({"linear_num_value_heads"}, "state.heads", "Gated DeltaNet value heads");
    s.key_head_dim = need({"linear_key_head_dim"}, "state.key_head_dim", "key head width");
    s.head_dim = need({"linear_value_head_dim"}, "state.head_dim", "value head width");
    s.conv_kernel = need({"linear_conv_kernel_dim"}, "state.conv_kernel", "conv width");
    break;
  case StateKind::kda: {
    auto linear = c.map("linear_attn_config");
    if (!linear) {
      throw InputError(SourceLocation{c.file(), 1, 1},
                       "config has KDA layers but no linear_attn_config to size them");
    }
    s.heads = linear->required_count("num_heads", "KDA heads");
    s.head_dim = linear->required_count("head_dim", "KDA head width");
    s.conv_kernel = linear->count("short_conv_kernel_size").value_or(4);
    break;
  }
  case StateKind::lightning:
    s.heads = need({"num_attention_heads"}, "state.heads", "lightning attention heads");
    s.head_dim = m.attention.head_dim;
    if (s.head_dim == 0) {
      s.head_dim = need({"head_dim"}, "state.head_dim", "lightning attention head width");
    }
    break;
  case StateKind::mamba2: {
    s.heads = need({"mamba_num_heads", "mamba_n_heads", "num_heads"}, "state.heads", "SSM heads");
    s.head_dim = c.count({"mamba_head_dim", "mamba_d_head"}, "state.head_dim").value_or(0);
    if (s.head_dim == 0 && !has_attention(m)) {
      s.head_dim = c.count({"head_dim"}, "state.head_dim").value_or(0);
    }
    s.groups =
        need({"n_groups", "mamba_n_groups", "mamba_ngroups"}, "state.groups", "groups of B and C");
    s.state_size =
        need({"ssm_state_size", "state_size", "mamba_d_state"}, "state.state_size", "d_state");
    s.conv_kernel = need({"conv_kernel", "mamba_d_conv"}, "state.conv_kernel", "conv width");
    if (c.present("mamba_num_heads")) {
      // Nemotron-H: d_inner = mamba_num_heads × mamba_head_dim (its expand is unused).
      s.inner = checked_mul(s.heads, s.head_dim);
      c.consume({"expand"});
    } else {
      u64 expand = need({"mamba_expand", "expand"}, "state.inner", "the SSM expansion factor");
      s.inner = checked_mul(expand, m.hidden_size);
      if (s.head_dim == 0 && s.heads > 0) {
        s.head_dim = s.inner / s.heads;
      }
    }
    break;
  }
  case StateKind::mamba1:
    s.state_size = need({"mamba_d_state", "state_size"}, "state.state_size", "d_state");
    s.conv_kernel = need({"mamba_d_conv", "conv_kernel"}, "state.conv_kernel", "conv width");
    if (auto expand = c.count({"mamba_expand"}, "state.inner")) {
      s.inner = checked_mul(*expand, m.hidden_size); // Jamba: intermediate_size is its MLP
    } else if (auto inner = c.count({"intermediate_size"}, "state.inner");
               inner && !has_attention(m)) {
      s.inner = *inner;
      c.consume({"expand"});
    } else {
      s.inner =
          checked_mul(need({"expand"}, "state.inner", "the SSM expansion factor"), m.hidden_size);
    }
    if (auto rank = c.text({"time_step_rank", "mamba_dt_rank"}); rank && *rank != "auto") {
      s.dt_rank = *c.count({"time_step_rank", "mamba_dt_rank"}, "state.dt_rank");
    } else {
      s.dt_rank = ceil_div(m.hidden_size, 16); // transformers' "auto"
    }
    s.inner_norms = c.model_type() == "jamba"; // Jamba's RMSNorms on Δ, B and C
    break;
  case StateKind::custom:
    break;
  }
  if (*kind == StateKind::mamba1 || *kind == StateKind::mamba2) {
    s.conv_bias = c.flag({"use_conv_bias", "mamba_conv_bias"}).value_or(true);
  }
  if (auto dtype = c.text({"mamba_ssm_cache_dtype", "mamba_ssm_dtype"})) {
    try {
      s.ssm_dtype = parse_dtype(*dtype, "mamba_ssm_cache_dtype");
    } catch (const InputError& e) {
      auto hit = c.find({"mamba_ssm_cache_dtype", "mamba_ssm_dtype"});
      throw InputError(hit->first->where(hit->second), e.what());
    }
  } else if (c.model_type() == "nemotron_h") {
    // NemotronHConfig's class default, which vLLM applies (NemotronHForCausalLMConfig).
    s.ssm_dtype = DType::fp32;
    diag.warnings.push_back("nemotron_h config without mamba_ssm_cache_dtype: the SSM state is "
                            "taken in float32, NemotronHConfig's default");
  }
  m.state = s;
}

/// The experts of a config with `routed` of them. Where the config gives the dense layers a width
/// beside the experts', it goes to m.mlp.intermediate_size (0 where it gives none).
Moe read_experts(const ConfigView& c, Model& m, u64 routed) {
  const std::string& type = c.model_type();
  Moe e;
  e.routed_experts = routed;
  e.experts_per_token = c.required({"num_experts_per_tok", "experts_per_token",
                                    "num_experts_per_token", "moe_topk", "moe_top_k"},
                                   "moe.experts_per_token", "experts each token is routed to");
  if (auto expert = c.count({"moe_intermediate_size"}, "moe.expert_intermediate_size")) {
    e.expert_intermediate_size = *expert;
    m.mlp.intermediate_size =
        c.count({"intermediate_size", "ffn_hidden_size"}, "mlp.intermediate_size").value_or(0);
  } else {
    e.expert_intermediate_size =
        c.required({"intermediate_size", "ffn_hidden_size"}, "moe.expert_intermediate_size",
                   "the MLP width of one expert");
    // Llama 4's dense layers have a width of their own.
    m.mlp.intermediate_size =
        c.count({"intermediate_size_mlp"}, "mlp.intermediate_size").value_or(0);
  }
  e.shared_experts =
      c.count({"n_shared_experts", "num_shared_experts"}, "moe.shared_experts").value_or(0);
  if (type == "llama4_text" || type == "llama4") {
    e.shared_experts = 1; // Llama4TextMoe always has one shared expert of the expert width
  }
  e.shared_expert_intermediate_size = checked_mul(e.shared_experts, e.expert_intermediate_size);
  if (auto shared = c.count({"shared_expert_intermediate_size", "shared_intermediate_size"},
                            "moe.shared_experts")) {
    if (*shared > 0) {
      e.shared_experts = std::max<u64>(e.shared_experts, 1);
    }
    e.shared_expert_intermediate_size = *shared;
    if (*shared == 0) {
      e.shared_experts = 0;
    }
  }
  e.first_dense_layers = c.count({"first_k_dense_replace"}, "moe.first_dense_layers").value_or(0);
  // DeepSeek-V3's noaux_tc routing adds a per-expert correction bias (transformers'
  // DeepseekV3 router always has it); gpt-oss has a router bias.
  e.router_bias = c.text({"topk_method"}).value_or("") == "noaux_tc" || type == "deepseek_v3" ||
                  type == "kimi_k2" || type == "deepseek_v32" || type == "gpt_oss" ||
                  type == "glm4_moe" || type == "kimi_linear";
  // Qwen2-MoE and Qwen3-Next gate their shared expert's output (shared_expert_gate, 1 × h).
  e.shared_gate = e.shared_expert_intermediate_size > 0 &&
                  (type == "qwen2_moe" || type == "qwen3_next" || type == "qwen3_5_moe_text");
  return e;
}

/// The MLP width of a model with no experts; without one in the config, 4 × hidden_size.
void read_dense_width(const ConfigView& c, Model& m, Diagnostics& diag) {
  auto width = c.count({"intermediate_size_mlp", "intermediate_size", "n_inner", "ffn_hidden_size"},
                       "mlp.intermediate_size");
  if (!width && c.model_type() == "mpt") {
    // MPT's MLP is expansion_ratio × d_model wide.
    if (auto ratio = c.count({"expansion_ratio"}, "mlp.intermediate_size")) {
      width = checked_mul(*ratio, m.hidden_size);
    }
  }
  m.mlp.intermediate_size = width && *width > 0 ? *width : checked_mul(4, m.hidden_size);
  if ((!width || *width == 0) && std::any_of(m.layer_types.begin(), m.layer_types.end(),
                                             [](LayerType t) { return t != LayerType::state; })) {
    diag.warnings.push_back("config has no MLP width: taking 4 × hidden_size = " +
                            std::to_string(m.mlp.intermediate_size));
  }
}

/// Which layers of an MoE model are MoE: the rules the config has, each applied over those
/// before it, DeepSeek's first_k_dense_replace and moe_layer_freq (an interval or a per-layer
/// list), Qwen's decoder_sparse_step, Llama 4's interleave_moe_layer_step, Jamba's expert period
/// and offset, Qwen's mlp_only_layers, a list of moe_layers.
std::vector<FfnType> moe_layer_types(const ConfigView& c, const Model& m) {
  u64 first_dense = m.moe->first_dense_layers;
  std::vector<FfnType> out(m.layers, FfnType::moe);
  for (u64 i = 0; i < std::min(first_dense, m.layers); ++i) {
    out[i] = FfnType::dense;
  }
  if (auto hit = c.find({"moe_layer_freq"})) {
    YAML::Node node = hit->first->node(hit->second);
    if (node.IsSequence()) {
      std::vector<u64> flags = int_list(*hit->first, hit->second, m.layers, true);
      for (u64 i = 0; i < m.layers; ++i) {
        out[i] = flags[i] != 0 ? FfnType::moe : FfnType::dense;
      }
    } else if (u64 freq = hit->first->count(hit->second).value_or(1); freq > 1) {
      for (u64 i = first_dense; i < m.layers; ++i) {
        out[i] = i % freq == 0 ? FfnType::moe : FfnType::dense;
      }
    }
  }
  if (auto step = c.count({"decoder_sparse_step"}, "ffn_pattern"); step && *step > 1) {
    for (u64 i = 0; i < m.layers; ++i) {
      out[i] = (i + 1) % *step == 0 ? out[i] : FfnType::dense;
    }
  }
  if (auto step = c.count({"interleave_moe_layer_step"}, "ffn_pattern"); step && *step > 1) {
    for (u64 i = 0; i < m.layers; ++i) {
      out[i] = (i + 1) % *step == 0 ? FfnType::moe : FfnType::dense;
    }
  }
  if (auto period = c.count({"expert_layer_period"}, "ffn_pattern")) {
    u64 offset = c.count({"expert_layer_offset"}, "ffn_pattern").value_or(0);
    if (*period == 0 || offset >= *period) {
      throw InputError(c.locations()->find("ffn_pattern"),
                       "expert_layer_period must be at least 1 and above expert_layer_offset");
    }
    for (u64 i = 0; i < m.layers; ++i) {
      out[i] = i % *period == offset ? FfnType::moe : FfnType::dense;
    }
  }
  for (auto key : {"mlp_only_layers", "moe_layers"}) {
    auto hit = c.find({key});
    if (!hit || !hit->first->node(hit->second).IsSequence()) {
      continue;
    }
    std::vector<u64> listed = int_list(*hit->first, hit->second, m.layers, false);
    if (std::string_view(key) == "moe_layers") {
      std::fill(out.begin(), out.end(), FfnType::dense);
    }
    for (u64 i : listed) {
      if (i >= m.layers) {
        hit->first->fail(hit->second,
                         std::string(key) + " entries must be below " + std::to_string(m.layers));
      }
      out[i] = std::string_view(key) == "moe_layers" ? FfnType::moe : FfnType::dense;
    }
  }
  return out;
}

/// The feed-forward part of each layer and its sizes: the MLP, the experts, and which layers
/// are MoE, from the layout where it gives the parts, else from the MoE keys.
void read_ffn(const ConfigView& c, Model& m, const Layout& layout, Diagnostics& diag) {
  m.mlp.kind = contains(k_plain_mlp, c.model_type()) ? MlpKind::plain : MlpKind::gated;
  auto routed = c.count({"n_routed_experts", "num_local_experts", "num_experts", "moe_num_experts"},
                        "moe.routed_experts");
  bool moe = routed && *routed > 1;
  if (moe) {
    m.moe = read_experts(c, m, *routed);
  } else {
    read_dense_width(c, m, diag);
  }
  c.consume({"moe_layer_freq", "decoder_sparse_step", "mlp_only_layers",
             "interleave_moe_layer_step", "moe_layers", "expert_layer_period",
             "expert_layer_offset"});
  if (!layout.ffn.empty()) {
    m.ffn_types = layout.ffn;
    if (std::find(m.ffn_types.begin(), m.ffn_types.end(), FfnType::dense) == m.ffn_types.end()) {
      m.mlp.intermediate_size = 0; // no dense layer: an intermediate_size is the state's
    }
    if (m.moe &&
        std::find(m.ffn_types.begin(), m.ffn_types.end(), FfnType::moe) == m.ffn_types.end()) {
      m.moe.reset();
    }
    return;
  }
  if (!moe) {
    m.ffn_types.assign(m.layers, FfnType::dense);
    return;
  }
  std::vector<FfnType> out = moe_layer_types(c, m);
  if (std::find(out.begin(), out.end(), FfnType::dense) != out.end() &&
      m.mlp.intermediate_size == 0) {
    m.mlp.intermediate_size =
        c.required({"intermediate_size"}, "mlp.intermediate_size", "the width of the dense layers");
  }
  m.ffn_types = out;
}

/// The terms that only the parameter count sees: biases, norms, sinks, position tables.
void read_block_details(const ConfigView& c, Model& m) {
  const std::string& type = c.model_type();
  bool gpt_style = type == "gpt_bigcode" || type == "gpt2";
  bool falcon = is_falcon(type);
  bool neox = type == "gpt_neox" || type == "gptj";
  if (gpt_style || falcon || neox) {
    m.norm = NormKind::layer;
  }
  if (type == "gemma2" || type == "gemma3" || type == "gemma3_text") {
    m.norms_per_layer = 4;
  }
  if ((falcon && !c.flag({"new_decoder_architecture"}).value_or(type == "RefinedWeb") &&
       c.flag({"parallel_attn"}).value_or(true)) ||
      type == "gptj" || type == "nemotron_h" || type == "mamba" || type == "mamba2" ||
      type == "falcon_mamba") {
    // One norm feeds a parallel block (Falcon-7B, GPT-J) or the block's one mixer.
    m.norms_per_layer = 1;
  }
  m.learned_position_embeddings = gpt_style;
  bool glm = type == "glm4_moe" || type == "glm4";
  if (glm && c.flag({"attention_bias"}).value_or(false)) {
    m.attention.bias = AttentionBias::qkv; // GLM-4's attention_bias: q, k and v; o has none
  } else if (gpt_style || type == "gpt_oss" || type == "gpt_neox" ||
             c.flag({"attention_bias"}).value_or(false) ||
             (falcon && c.flag({"bias"}).value_or(false))) {
    m.attention.bias = AttentionBias::all;
  } else if (type == "qwen2" || type == "qwen2_moe" ||
             c.flag({"add_qkv_bias", "qkv_bias"}).value_or(false)) {
    m.attention.bias = AttentionBias::qkv;
  }
  // Llama 4's use_qk_norm is a weightless L2 norm; GLM-4.5's an RMSNorm with weights.
  bool llama4 = type == "llama4_text" || type == "llama4";
  m.attention.qk_norm = type == "qwen3" || type == "qwen3_moe" || type == "qwen3_next" ||
                        type == "qwen3_5_text" || type == "gemma3" || type == "gemma3_text" ||
                        (!llama4 && c.flag({"use_qk_norm"}).value_or(false));
  m.attention.sinks = type == "gpt_oss";
  m.mlp.bias = gpt_style || type == "gpt_oss" || neox || c.flag({"mlp_bias"}).value_or(false);
  m.lm_head_bias = type == "gptj"; // GPT-J's lm_head is a Linear with a bias
}

/// The scopes a config's architecture is read from, in order: the language model's own config
/// where a multimodal one nests it (text_config, llm_config), then the top level.
std::vector<MapReader> architecture_scopes(const MapReader& top, Diagnostics& diag) {
  std::vector<MapReader> scopes;
  for (auto nested : {"text_config", "llm_config"}) {
    if (auto inner = top.map(nested)) {
      scopes.push_back(*inner);
      diag.warnings.push_back("config nests its language model in " + std::string(nested) +
                              ": reading the architecture from there (vision tower not "
                              "counted)");
      break;
    }
  }
  scopes.push_back(top);
  // DBRX (and MPT) keep the attention's and the feed-forward's keys in maps of their own.
  for (auto nested : {"attn_config", "ffn_config"}) {
    if (auto inner = top.map(nested); inner && inner->yaml().IsMap()) {
      scopes.push_back(*inner);
    }
  }
  return scopes;
}

/// The family a config names: its model_type, and the first class of its `architectures`.
struct Family {
  std::string model_type;
  std::string architecture;
};

/// The first scope's model_type and architecture class; a config without a model_type is read
/// as the family its architecture class names (some remote-code configs omit it).
Family family_of(const std::vector<MapReader>& scopes, Diagnostics& diag) {
  Family f;
  for (const auto& s : scopes) {
    if (auto t = s.text("model_type")) {
      f.model_type = *t;
      break;
    }
  }
  for (const auto& s : scopes) {
    if (!s.has("architectures")) {
      continue;
    }
    if (YAML::Node arch = s.node("architectures");
        arch.IsSequence() && arch.size() > 0 && arch[0].IsScalar()) {
      f.architecture = arch[0].Scalar();
      break;
    }
  }
  if (f.model_type.empty()) {
    f.model_type = f.architecture;
    // Falcon's remote-code configs name their family by class alone: RWForCausalLM is the
    // legacy RefinedWeb code, the new decoder (Falcon-40B/180B) where it gives n_head_kv and
    // the old one (Falcon-7B, multi-query) where it does not (tiiuae's configuration_RW.py).
    if (f.architecture == "RWForCausalLM") {
      bool new_decoder = std::any_of(scopes.begin(), scopes.end(),
                                     [](const MapReader& s) { return s.has("n_head_kv"); });
      f.model_type = new_decoder ? "RefinedWeb" : "RefinedWebModel";
    } else if (f.architecture == "FalconForCausalLM") {
      f.model_type = "falcon";
    }
    diag.warnings.push_back(
        "config has no model_type: reading it as " +
        (f.model_type.empty() ? std::string("a generic decoder") : "'" + f.model_type + "'") +
        (f.model_type != f.architecture ? " (its architecture, " + f.architecture + ")"
                                        : std::string()));
  }
  return f;
}

/// The model dtype from torch_dtype (or dtype); float32, an unknown name or none is taken as
/// bf16 (the Model's default), with a warning.
void read_dtype(const ConfigView& c, Model& m, Diagnostics& diag) {
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
}

/// The checkpoint's quantization block: quantization_config, compressed-tensors' legacy
/// compression_config, else ModelOpt's hf_quant_config.json beside the config.
std::optional<YAML::Node> quantization_block(const ConfigView& c, const SiblingReader& siblings) {
  if (auto q = c.map("quantization_config")) {
    return q->yaml();
  }
  if (auto legacy = c.map("compression_config")) {
    return legacy->yaml(); // compressed-tensors before 2025
  }
  return modelopt_file(c.file(), siblings);
}

/// The number of layers; newer Nemotron-H configs give it only as their pattern's length, and
/// Nemotron-3's only as the length of its list of layer types.
u64 layer_count(const ConfigView& c) {
  std::optional<u64> layers =
      c.count({"num_hidden_layers", "n_layer", "num_layers", "n_layers"}, "layers");
  if (!layers) {
    if (auto pattern = c.text({"hybrid_override_pattern"})) {
      layers = pattern->size();
    }
  }
  if (!layers) {
    // Nemotron-3 lists its layers' types and gives no count: one entry per layer.
    if (auto hit = c.find({"layers_block_type", "layer_types"})) {
      YAML::Node list = hit->first->node(hit->second);
      if (list.IsSequence() && list.size() > 0) {
        layers = list.size();
      }
    }
  }
  if (!layers) {
    (void)c.required({"num_hidden_layers", "n_layer", "num_layers", "n_layers"}, "layers",
                     "the number of layers");
  }
  try {
    check_layer_count(*layers);
  } catch (const InputError& e) {
    auto hit = c.find({"num_hidden_layers", "n_layer", "num_layers", "n_layers"});
    throw InputError(hit ? hit->first->where(hit->second) : SourceLocation{c.file(), 1, 1},
                     e.what());
  }
  return *layers;
}

/// The sizes every model has: layers, width, vocabulary, context and tied embeddings.
void read_sizes(const ConfigView& c, Model& m, Diagnostics& diag) {
  m.layers = layer_count(c);
  m.hidden_size =
      c.required({"hidden_size", "n_embd", "d_model"}, "hidden_size", "the model width");
  m.vocab_size = c.count({"vocab_size", "padded_vocab_size"}, "vocab_size").value_or(0);
  if (m.vocab_size == 0) {
    diag.warnings.push_back("config has no vocab_size: footprints need none; weights and "
                            "capacity do (set vocab_size in a kvcalc YAML)");
  }
  m.max_context = c.count({"max_position_embeddings", "n_positions", "seq_length",
                           "max_sequence_length", "model_max_length", "max_seq_len"},
                          "max_context")
                      .value_or(0);
  if (auto tied = c.flag({"tie_word_embeddings"})) {
    m.tie_word_embeddings = *tied;
  } else {
    m.tie_word_embeddings = contains(k_tied_by_default, c.model_type());
  }
}

/// The chunk of the chunked layers; a chunk as long as the context never binds, and those
/// layers are read as full attention.
void read_chunk(const ConfigView& c, Model& m, Diagnostics& diag) {
  if (count_layers(m, LayerType::chunked) == 0) {
    c.consume({"attention_chunk_size", "no_rope_layers", "no_rope_layer_interval"});
    return;
  }
  auto chunk = c.count({"attention_chunk_size"}, "attention_chunk");
  if (!chunk || *chunk == 0) {
    throw InputError(c.locations()->find("layer_pattern"),
                     "layer_types has chunked layers but attention_chunk_size (tokens) is not "
                     "set");
  }
  m.attention_chunk = *chunk;
  if (m.max_context != 0 && m.attention_chunk >= m.max_context) {
    diag.warnings.push_back("attention_chunk_size " + group_digits(m.attention_chunk) +
                            " is not below max_position_embeddings: it never binds, so the "
                            "chunked layers are read as full attention");
    std::replace(m.layer_types.begin(), m.layer_types.end(), LayerType::chunked, LayerType::full);
    m.attention_chunk = 0;
  }
}

/// DeepSeek sparse attention's indexer, the multi-token-prediction layers and the layers that
/// share an earlier layer's KV.
void read_extra_layers(const ConfigView& c, Model& m) {
  if (auto topk = c.count({"index_topk"}, "indexer.topk")) {
    m.indexer =
        Indexer{c.required({"index_n_heads"}, "indexer.heads", "indexer query heads"),
                c.required({"index_head_dim"}, "indexer.head_dim", "indexer key width"), *topk};
  }
  m.mtp_layers =
      c.count({"num_nextn_predict_layers", "mtp_num_hidden_layers"}, "mtp_layers").value_or(0);
  if (auto modules = c.count({"num_mtp_modules"}, "mtp_layers")) {
    // MiniMax-M2: modules of mtp_transformer_layers each, loaded apart from the main model.
    m.mtp_layers =
        checked_mul(*modules, c.count({"mtp_transformer_layers"}, "mtp_layers").value_or(1));
  }
  m.kv_shared_layers = c.count({"num_kv_shared_layers"}, "kv_shared_layers").value_or(0);
}

/// Stops at the first key that may change the cache and that nothing read (ConfigView's
/// unread_cache_keys): kvcalc does not guess what they mean. Every such key is named at once,
/// the first at the error's location and the others at theirs in the message.
void refuse_unread_cache_key(const ConfigView& c) {
  auto keys = c.unread_cache_keys();
  if (keys.empty()) {
    return;
  }
  std::string more;
  for (std::size_t i = 1; i < keys.size(); ++i) {
    more += (i == 1 ? "" : ", ") + ("'" + keys[i].first + "' (" + keys[i].second.str() + ")");
  }
  throw InputError(keys.front().second,
                   "config key '" + keys.front().first + "'" +
                       (more.empty() ? std::string() : " and " + more) + " may change the " +
                       "cache and kvcalc does not read " + (more.empty() ? "it" : "them") +
                       " (model_type '" + c.model_type() +
                       "'); rather than guess, kvcalc stops — write a kvcalc YAML "
                       "(docs/model-format.md) or report the family");
}

} // namespace

Model parse_hf_config(const std::string& text, const std::string& file, Diagnostics& diag,
                      const SiblingReader& siblings) {
  YAML::Node root = detail::parse_yaml(text, file);
  auto locations = std::make_shared<detail::LocationMap>(file, detail::location_of(root, file));
  std::vector<MapReader> scopes = architecture_scopes(MapReader(root, "", locations), diag);
  Family family = family_of(scopes, diag);
  ConfigView c(scopes, locations, family.model_type, file);

  Model m;
  m.architecture = family.architecture;
  m.display_name = display_name_for(c, file);
  m.name = registry_name(m.display_name);
  m.source = file;
  read_dtype(c, m, diag);
  // The weights' own layout is read once the model is whole (its tensors named).
  std::optional<YAML::Node> quantization = quantization_block(c, siblings);
  read_sizes(c, m, diag);

  // The layout, then what each kind of layer holds.
  Layout layout = read_layout(c, m.layers, diag);
  m.layer_types = layout.types;
  bool layout_given = c.present("layer_types") || c.present("layers_block_type") ||
                      c.present("hybrid_override_pattern") || c.present("hybrid_layer_pattern");
  read_windows(c, m, diag, layout_given);
  read_chunk(c, m, diag);
  if (has_attention(m)) {
    read_attention(c, m, diag);
  }
  read_state(c, m, layout.state, diag);
  read_ffn(c, m, layout, diag);
  read_block_details(c, m);
  read_extra_layers(c, m);

  refuse_unread_cache_key(c);
  validate_model(m, locations->locator());
  if (quantization) {
    read_quantization(*quantization, m, diag);
  }
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
                          "num_layers", "n_layers", "text_config", "num_attention_heads"}) {
    if (root[key].IsDefined()) {
      return parse_hf_config(text, file, diag);
    }
  }
  throw InputError(SourceLocation{file, 1, 1},
                   "neither a kvcalc model (it has no 'name' or 'attention') nor a HuggingFace "
                   "config.json (it has no 'model_type' or 'num_hidden_layers')");
}

} // namespace kvcalc::model
