#include <kvcalc/model/model.hpp>

#include <algorithm>
#include <cctype>
#include <string>

#include <kvcalc/core/spell.hpp>
#include <kvcalc/core/units.hpp>

namespace kvcalc::model {

bool has_attention(const Model& m) {
  return std::any_of(m.layer_types.begin(), m.layer_types.end(), is_attention);
}

const Attention& attention_of(const Model& m, LayerType t) {
  return t == LayerType::sliding && m.sliding_attention ? *m.sliding_attention : m.attention;
}

u64 count_layers(const Model& m, LayerType t) {
  return static_cast<u64>(std::count(m.layer_types.begin(), m.layer_types.end(), t));
}

std::string attention_label(const Model& m) {
  bool mixed = std::adjacent_find(m.layer_types.begin(), m.layer_types.end(),
                                  std::not_equal_to<>()) != m.layer_types.end();
  if (mixed) {
    return "hybrid";
  }
  return has_attention(m) ? std::string(attention_kind_name(m.attention.kind)) : "ssm";
}

namespace {

/// One pattern grammar for layer and feed-forward types (docs/model-format.md, "Layer
/// patterns"): a type, or a cycle "type*n, type, ..." repeated over the layers.
template <class E, std::size_t N> class PatternReader {
public:
  PatternReader(const NameTable<E, N>& table, std::string_view key, std::string_view expected)
      : m_table(table), m_key(key), m_expected(expected) {}

  [[noreturn]] void fail(std::string_view pattern, const std::string& why) const {
    throw InputError("invalid " + std::string(m_key) + " '" + std::string(pattern) + "': " + why +
                     "; expected " + std::string(m_expected));
  }

  [[nodiscard]] E type(std::string_view word, std::string_view pattern) const {
    if (auto t = m_table.find(word)) {
      return *t;
    }
    fail(pattern, "unknown type '" + std::string(word) + "'" + did_you_mean(word, m_table.names()));
  }

  [[nodiscard]] u64 repeat(std::string_view digits, std::string_view pattern) const {
    if (digits.empty() || digits.size() > 6 ||
        !std::all_of(digits.begin(), digits.end(),
                     [](char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; })) {
      fail(pattern, "'" + std::string(digits) + "' is not a repeat count");
    }
    u64 n = std::stoull(std::string(digits));
    if (n == 0) {
      fail(pattern, "a repeat count must be at least 1");
    }
    return n;
  }

  /// The cycle of "type*n, type, ...".
  [[nodiscard]] std::vector<E> cycle(std::string_view pattern) const {
    std::string_view p = trim(pattern);
    if (p.empty()) {
      fail(pattern, "empty pattern");
    }
    std::vector<E> out;
    std::size_t start = 0;
    while (start <= p.size()) {
      std::size_t comma = p.find(',', start);
      std::string_view term = trim(p.substr(start, comma - start));
      u64 n = 1;
      if (auto star = term.find('*'); star != std::string_view::npos) {
        n = repeat(trim(term.substr(star + 1)), pattern);
        term = trim(term.substr(0, star));
      }
      E t = type(term, pattern);
      if (out.size() + n > k_max_layers) {
        fail(pattern, "the cycle is longer than " + group_digits(k_max_layers) + " layers");
      }
      out.insert(out.end(), n, t);
      if (comma == std::string_view::npos) {
        break;
      }
      start = comma + 1;
    }
    return out;
  }

private:
  const NameTable<E, N>& m_table;
  std::string_view m_key;
  std::string_view m_expected;
};

template <class E> std::vector<E> repeat_over(const std::vector<E>& cycle, u64 layers) {
  check_layer_count(layers);
  std::vector<E> out;
  out.reserve(layers);
  for (u64 i = 0; i < layers; ++i) {
    out.push_back(cycle[i % cycle.size()]);
  }
  return out;
}

/// The shortest cycle that reproduces `types`, or nullopt when only the whole list does.
template <class E, std::size_t N>
std::optional<std::string> describe_cycle(const std::vector<E>& types,
                                          const NameTable<E, N>& table) {
  for (std::size_t period = 1; period <= types.size() / 2 || period == types.size(); ++period) {
    bool repeats = true;
    for (std::size_t i = period; i < types.size() && repeats; ++i) {
      repeats = types[i] == types[i - period];
    }
    if (!repeats) {
      continue;
    }
    if (period == types.size() && types.size() > 1) {
      return std::nullopt;
    }
    std::string out;
    for (std::size_t i = 0; i < period;) {
      std::size_t run = 1;
      while (i + run < period && types[i + run] == types[i]) {
        ++run;
      }
      out += (out.empty() ? "" : ", ") + std::string(table.name(types[i]));
      if (run > 1) {
        out += "*" + std::to_string(run);
      }
      i += run;
    }
    return out;
  }
  return std::nullopt;
}

constexpr std::string_view k_layer_pattern_help =
    "a layer type (full, sliding, chunked, state, none), 'alternating', 'N:M' (N sliding then "
    "M full) or a cycle such as 'sliding*5, full'";

} // namespace

void check_layer_count(u64 layers) {
  if (layers > k_max_layers) {
    throw InputError("'layers' = " + group_digits(layers) + " is more than kvcalc takes (at most " +
                     group_digits(k_max_layers) + "; real models have a few hundred)");
  }
}

std::vector<LayerType> expand_layer_pattern(std::string_view pattern, u64 layers) {
  check_layer_count(layers);
  PatternReader reader(k_layer_types, "layer_pattern", k_layer_pattern_help);
  std::string_view p = trim(pattern);
  if (p.find("linear") != std::string_view::npos) {
    reader.fail(pattern, "layer type 'linear' is now 'state' (the mixer's shape goes under "
                         "'state:', docs/model-format.md)");
  }
  std::vector<LayerType> cycle;
  if (p == "alternating") {
    cycle = {LayerType::sliding, LayerType::full};
  } else if (auto colon = p.find(':'); colon != std::string_view::npos) {
    u64 local = reader.repeat(trim(p.substr(0, colon)), pattern);
    u64 global = reader.repeat(trim(p.substr(colon + 1)), pattern);
    if (local + global > k_max_layers) {
      reader.fail(pattern, "the cycle is longer than " + group_digits(k_max_layers) + " layers");
    }
    cycle.insert(cycle.end(), local, LayerType::sliding);
    cycle.insert(cycle.end(), global, LayerType::full);
  } else {
    cycle = reader.cycle(pattern);
  }
  return repeat_over(cycle, layers);
}

std::vector<FfnType> expand_ffn_pattern(std::string_view pattern, u64 layers) {
  check_layer_count(layers);
  PatternReader reader(k_ffn_types, "ffn_pattern",
                       "a feed-forward type (dense, moe, none) or a cycle such as 'dense, moe'");
  return repeat_over(reader.cycle(pattern), layers);
}

std::optional<std::string> describe_layer_pattern(const std::vector<LayerType>& types) {
  if (std::all_of(types.begin(), types.end(), [](LayerType t) { return t == LayerType::full; })) {
    return std::string{};
  }
  return describe_cycle(types, k_layer_types);
}

std::optional<std::string> describe_ffn_pattern(const std::vector<FfnType>& types) {
  return describe_cycle(types, k_ffn_types);
}

std::vector<FfnType> ffn_types_of(std::optional<std::string_view> pattern, u64 layers,
                                  const std::optional<Moe>& moe) {
  std::vector<FfnType> out =
      pattern ? expand_ffn_pattern(*pattern, layers)
              : std::vector<FfnType>(layers, moe ? FfnType::moe : FfnType::dense);
  if (moe) {
    for (u64 i = 0; i < std::min<u64>(moe->first_dense_layers, layers); ++i) {
      if (out[i] == FfnType::moe) {
        out[i] = FfnType::dense;
      }
    }
  }
  return out;
}

namespace {

/// Located failures of a model's rules: each names the key path at fault, which `where` locates
/// in the file the model came from.
class Checker {
public:
  explicit Checker(const Locator& where) : m_where(where) {}

  [[noreturn]] void fail(std::string_view key, const std::string& message) const {
    throw InputError(m_where(key), message);
  }

  /// `key` must be at least 1; `meaning` says what it counts.
  void positive(std::string_view key, u64 value, std::string_view meaning) const {
    if (value == 0) {
      fail(key, "'" + std::string(key) + "' must be at least 1 (" + std::string(meaning) + ")");
    }
  }

private:
  const Locator& m_where;
};

/// The rules of one attention geometry (`attention` or `sliding_attention`, at `path`).
void validate_attention(const Attention& a, const std::string& path, const Checker& check) {
  auto key = [&](std::string_view name) { return path + "." + std::string(name); };
  check.positive(key("heads"), a.heads, "query heads");
  switch (a.kind) {
  case AttentionKind::mha:
    if (a.kv_heads != a.heads) {
      check.fail(key("kv_heads"), "kind mha needs kv_heads equal to heads (" +
                                      std::to_string(a.heads) + "), got " +
                                      std::to_string(a.kv_heads) + "; use kind gqa or mqa");
    }
    break;
  case AttentionKind::mqa:
    if (a.kv_heads != 1) {
      check.fail(key("kv_heads"), "kind mqa has exactly 1 KV head, got " +
                                      std::to_string(a.kv_heads) + "; use kind gqa");
    }
    break;
  case AttentionKind::gqa:
    check.positive(key("kv_heads"), a.kv_heads, "key/value heads");
    if (a.heads % a.kv_heads != 0) {
      check.fail(key("kv_heads"), "heads (" + std::to_string(a.heads) +
                                      ") must be a multiple of kv_heads (" +
                                      std::to_string(a.kv_heads) + ")");
    }
    break;
  case AttentionKind::mla:
    check.positive(key("kv_lora_rank"), a.mla.kv_lora_rank, "the latent width d_c; MLA needs it");
    check.positive(key("qk_rope_head_dim"), a.mla.qk_rope_head_dim,
                   "the decoupled RoPE width d_R; MLA needs it");
    check.positive(key("qk_nope_head_dim"), a.mla.qk_nope_head_dim,
                   "the per-head non-RoPE width d_nope; MLA needs it");
    check.positive(key("v_head_dim"), a.mla.v_head_dim,
                   "the per-head value width d_v; MLA needs it");
    break;
  }
  check.positive(key("head_dim"), a.head_dim, "the key width per head");
  check.positive(key("v_head_dim"), a.v_head_dim, "the value width per head");
}

/// The sizes each state kind's formula reads (docs/formulas.md, "Per-sequence state").
void validate_state(const StateSpec& s, const Checker& check) {
  auto need = [&](std::string_view key, u64 value, std::string_view meaning) {
    if (value == 0) {
      check.fail("state." + std::string(key),
                 "state kind " + std::string(k_state_kinds.name(s.kind)) + " needs '" +
                     std::string(key) + "' of at least 1 (" + std::string(meaning) + ")");
    }
  };
  switch (s.kind) {
  case StateKind::mamba1:
    need("inner", s.inner, "d_inner, the expanded width");
    need("state_size", s.state_size, "d_state");
    need("conv_kernel", s.conv_kernel, "the causal convolution width");
    break;
  case StateKind::mamba2:
    need("inner", s.inner, "d_inner, the expanded width");
    need("heads", s.heads, "SSM heads");
    need("head_dim", s.head_dim, "the SSM head width");
    need("groups", s.groups, "n_groups of B and C");
    need("state_size", s.state_size, "d_state");
    need("conv_kernel", s.conv_kernel, "the causal convolution width");
    if (s.heads % s.groups != 0) {
      check.fail("state.groups", "state heads (" + std::to_string(s.heads) +
                                     ") must be a multiple of groups (" + std::to_string(s.groups) +
                                     ")");
    }
    break;
  case StateKind::gated_deltanet:
    need("heads", s.heads, "value heads");
    need("head_dim", s.head_dim, "the value head width");
    need("key_heads", s.key_heads, "key heads");
    need("key_head_dim", s.key_head_dim, "the key head width");
    need("conv_kernel", s.conv_kernel, "the causal convolution width");
    break;
  case StateKind::kda:
    need("heads", s.heads, "heads");
    need("head_dim", s.head_dim, "the head width");
    need("conv_kernel", s.conv_kernel, "the short convolution width");
    break;
  case StateKind::lightning:
    need("heads", s.heads, "heads");
    need("head_dim", s.head_dim, "the head width");
    break;
  case StateKind::custom:
    need("elements", s.elements, "state elements per layer per sequence");
    break;
  }
}

/// The registry key: lowercase letters, digits, '-', '.' and '_', not empty.
void validate_name(const Model& m, const Checker& check) {
  if (m.name.empty()) {
    check.fail("name", "'name' must not be empty");
  }
  for (char c : m.name) {
    if (!(std::islower(static_cast<unsigned char>(c)) ||
          std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_')) {
      check.fail("name", "'name' may use only lowercase letters, digits, '-', '.' and '_'; got '" +
                             m.name + "'");
    }
  }
}

void validate_sizes(const Model& m, const Checker& check) {
  check.positive("layers", m.layers, "the number of transformer layers");
  try {
    check_layer_count(m.layers);
  } catch (const InputError& e) {
    check.fail("layers", e.what());
  }
  check.positive("norms_per_layer", m.norms_per_layer, "norm layers in each transformer block");
  check.positive("hidden_size", m.hidden_size, "the model width");
}

/// One mixer per layer, and each kind of mixer the layers use described, with none described
/// that no layer uses: attention, sliding attention and its window, the chunk, the state, the
/// indexer.
void validate_mixers(const Model& m, const Checker& check) {
  if (m.layer_types.size() != m.layers) {
    check.fail("layer_pattern", "layer_pattern lists " + std::to_string(m.layer_types.size()) +
                                    " layers but the model has " + std::to_string(m.layers));
  }
  auto has = [&](LayerType t) { return count_layers(m, t) > 0; };
  if (has_attention(m)) {
    validate_attention(m.attention, "attention", check);
  } else if (m.attention.heads != 0) {
    check.fail("attention", "'attention' is set but no layer attends (layer_pattern has no full, "
                            "sliding or chunked layer)");
  }
  if (m.sliding_attention) {
    if (!has(LayerType::sliding)) {
      check.fail("sliding_attention", "'sliding_attention' is set but layer_pattern has no "
                                      "sliding layer");
    }
    if (m.sliding_attention->kind == AttentionKind::mla) {
      check.fail("sliding_attention.kind", "sliding_attention is softmax attention over per-head "
                                           "K and V: kind mha, mqa or gqa");
    }
    validate_attention(*m.sliding_attention, "sliding_attention", check);
  }
  if (has(LayerType::sliding) && m.sliding_window == 0) {
    check.fail("layer_pattern", "some layers slide but 'sliding_window' (tokens) is not set");
  }
  if (!has(LayerType::sliding) && m.sliding_window != 0) {
    check.fail("layer_pattern", "'sliding_window' is set but layer_pattern has no sliding layer; "
                                "remove sliding_window or set layer_pattern (e.g. 'sliding')");
  }
  if (has(LayerType::chunked) && m.attention_chunk == 0) {
    check.fail("layer_pattern",
               "some layers are chunked but 'attention_chunk' (tokens) is not set");
  }
  if (!has(LayerType::chunked) && m.attention_chunk != 0) {
    check.fail("attention_chunk",
               "'attention_chunk' is set but layer_pattern has no chunked layer");
  }
  if (has(LayerType::state) && !m.state) {
    check.fail("layer_pattern", "some layers are state layers but 'state' (the mixer's shape) is "
                                "not set");
  }
  if (m.state) {
    if (!has(LayerType::state)) {
      check.fail("state", "'state' is set but layer_pattern has no state layer");
    }
    validate_state(*m.state, check);
  }
  if (m.indexer) {
    if (!has_attention(m) || m.attention.kind != AttentionKind::mla) {
      check.fail("indexer", "'indexer' is DeepSeek sparse attention's key cache beside an MLA "
                            "latent; the model needs attention kind mla");
    }
    check.positive("indexer.heads", m.indexer->heads, "indexer query heads");
    check.positive("indexer.head_dim", m.indexer->head_dim, "the indexer key width");
    check.positive("indexer.topk", m.indexer->topk, "tokens each query attends to");
  }
}

/// Layers that share an earlier layer's KV, and MTP layers: both need attention layers.
void validate_shared_and_mtp_layers(const Model& m, const Checker& check) {
  u64 attending =
      static_cast<u64>(std::count_if(m.layer_types.begin(), m.layer_types.end(), is_attention));
  if (m.kv_shared_layers >= std::max<u64>(attending, 1) && m.kv_shared_layers > 0) {
    check.fail("kv_shared_layers", "kv_shared_layers (" + std::to_string(m.kv_shared_layers) +
                                       ") must be below the " + std::to_string(attending) +
                                       " attention layers: shared layers read an earlier layer's "
                                       "KV");
  }
  if (m.mtp_layers > 0 && !has_attention(m)) {
    check.fail("mtp_layers",
               "multi-token-prediction layers are attention blocks; the model has none");
  }
}

/// One feed-forward part per layer, the experts set exactly where some layer (or an MTP layer)
/// is MoE, the MLP width where some layer is dense.
void validate_ffn(const Model& m, const Checker& check) {
  if (m.ffn_types.size() != m.layers) {
    check.fail("ffn_pattern", "ffn_pattern lists " + std::to_string(m.ffn_types.size()) +
                                  " layers but the model has " + std::to_string(m.layers));
  }
  bool any_moe =
      std::find(m.ffn_types.begin(), m.ffn_types.end(), FfnType::moe) != m.ffn_types.end();
  bool any_dense =
      std::find(m.ffn_types.begin(), m.ffn_types.end(), FfnType::dense) != m.ffn_types.end();
  if (any_moe && !m.moe) {
    check.fail("ffn_pattern", "ffn_pattern has moe layers but 'moe' is not set");
  }
  if (m.moe) {
    const Moe& e = *m.moe;
    if (!any_moe && m.mtp_layers == 0) {
      check.fail("moe",
                 "'moe' is set but no layer is an MoE layer (ffn_pattern, first_dense_layers)");
    }
    check.positive("moe.routed_experts", e.routed_experts, "routed experts");
    check.positive("moe.experts_per_token", e.experts_per_token, "experts each token is routed to");
    check.positive("moe.expert_intermediate_size", e.expert_intermediate_size,
                   "the expert MLP width");
    if (e.experts_per_token > e.routed_experts) {
      check.fail("moe.experts_per_token",
                 "experts_per_token (" + std::to_string(e.experts_per_token) +
                     ") exceeds routed_experts (" + std::to_string(e.routed_experts) + ")");
    }
    if (e.first_dense_layers > m.layers) {
      check.fail("moe.first_dense_layers",
                 "first_dense_layers (" + std::to_string(e.first_dense_layers) +
                     ") exceeds layers (" + std::to_string(m.layers) + ")");
    }
  }
  if (any_dense) {
    check.positive("mlp.intermediate_size", m.mlp.intermediate_size,
                   m.moe ? "the width of the dense layers" : "the MLP width");
  }
}

/// The widest cache kvcalc can be asked for (fp32, expanded MLA, every layer) must fit in 64
/// bits per token, so no later product of these sizes silently wraps.
void check_cache_fits_64_bits(const Model& m, const Checker& check) {
  try {
    u64 per_layer = 0;
    for (const Attention* a :
         {&m.attention, m.sliding_attention ? &*m.sliding_attention : nullptr}) {
      if (a == nullptr) {
        continue;
      }
      u64 rate = checked_mul(checked_mul(a->kv_heads, checked_add(a->head_dim, a->v_head_dim)), 4);
      if (a->kind == AttentionKind::mla) {
        rate = checked_add(
            rate, checked_mul(checked_add(a->mla.kv_lora_rank, a->mla.qk_rope_head_dim), 4));
      }
      per_layer = std::max(per_layer, rate);
    }
    if (m.indexer) {
      per_layer = checked_add(per_layer, checked_mul(m.indexer->head_dim, 2));
    }
    (void)checked_mul(per_layer, checked_add(m.layers, m.mtp_layers));
    if (m.state) {
      const StateSpec& s = *m.state;
      // Every kind's state is a sum of at most four products of a width and two dims, in at
      // most 4-byte elements.
      u64 widest = std::max({s.heads, s.key_heads, s.inner, s.groups, u64{1}});
      u64 dims = std::max({s.head_dim, s.key_head_dim, s.state_size, s.conv_kernel, u64{1}});
      u64 each = checked_mul(checked_mul(widest, dims), dims);
      u64 bytes = checked_mul(checked_add(checked_mul(each, 4), s.elements), 4);
      (void)checked_mul(bytes, m.layers);
    }
  } catch (const OverflowError&) {
    check.fail("attention", "the cache per token or per sequence of these sizes does not fit in "
                            "64 bits; check heads, head dims, state sizes and layers for absurd "
                            "values");
  }
}

} // namespace

void validate_model(const Model& m, const Locator& where) {
  Checker check(where);
  validate_name(m, check);
  validate_sizes(m, check);
  validate_mixers(m, check);
  validate_shared_and_mtp_layers(m, check);
  validate_ffn(m, check);
  check_cache_fits_64_bits(m, check);
}

} // namespace kvcalc::model
