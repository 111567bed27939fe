#include <kvcalc/model/model.hpp>

#include <algorithm>
#include <cctype>
#include <string>

#include <kvcalc/core/spell.hpp>
#include <kvcalc/core/units.hpp>

namespace kvcalc {

std::string_view attention_kind_name(AttentionKind k) {
  switch (k) {
  case AttentionKind::mha:
    return "mha";
  case AttentionKind::mqa:
    return "mqa";
  case AttentionKind::gqa:
    return "gqa";
  case AttentionKind::mla:
    return "mla";
  }
  return "?";
}

std::string_view layer_type_name(LayerType t) {
  switch (t) {
  case LayerType::full:
    return "full";
  case LayerType::sliding:
    return "sliding";
  case LayerType::linear:
    return "linear";
  }
  return "?";
}

std::string attention_label(const Model& m) {
  bool mixed = std::adjacent_find(m.layer_types.begin(), m.layer_types.end(),
                                  std::not_equal_to<>()) != m.layer_types.end();
  return mixed ? "hybrid" : std::string(attention_kind_name(m.attention.kind));
}

namespace {

const std::vector<std::string>& layer_type_words() {
  static const std::vector<std::string> words{"full", "sliding", "linear"};
  return words;
}

[[noreturn]] void bad_pattern(std::string_view pattern, const std::string& why) {
  throw InputError("invalid layer_pattern '" + std::string(pattern) + "': " + why +
                   "; expected 'full', 'sliding', 'linear', 'alternating', 'N:M' (N sliding "
                   "then M full) or a cycle such as 'sliding*5, full'");
}

LayerType parse_layer_type(std::string_view word, std::string_view pattern) {
  for (LayerType t : {LayerType::full, LayerType::sliding, LayerType::linear}) {
    if (word == layer_type_name(t)) {
      return t;
    }
  }
  bad_pattern(pattern, "unknown layer type '" + std::string(word) + "'" +
                           did_you_mean(word, layer_type_words()));
}

u64 parse_small_count(std::string_view digits, std::string_view pattern) {
  if (digits.empty() || digits.size() > 6 || !std::all_of(digits.begin(), digits.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c)) != 0;
      })) {
    bad_pattern(pattern, "'" + std::string(digits) + "' is not a repeat count");
  }
  u64 n = std::stoull(std::string(digits));
  if (n == 0) {
    bad_pattern(pattern, "a repeat count must be at least 1");
  }
  return n;
}

std::vector<LayerType> cycle_of(std::string_view pattern) {
  std::string_view p = trim(pattern);
  if (p.empty()) {
    bad_pattern(pattern, "empty pattern");
  }
  if (p == "alternating") {
    return {LayerType::sliding, LayerType::full};
  }
  std::vector<LayerType> cycle;
  if (auto colon = p.find(':'); colon != std::string_view::npos) {
    u64 local = parse_small_count(trim(p.substr(0, colon)), pattern);
    u64 global = parse_small_count(trim(p.substr(colon + 1)), pattern);
    cycle.insert(cycle.end(), local, LayerType::sliding);
    cycle.insert(cycle.end(), global, LayerType::full);
    return cycle;
  }
  std::size_t start = 0;
  while (start <= p.size()) {
    std::size_t comma = p.find(',', start);
    std::string_view term = trim(p.substr(start, comma - start));
    u64 repeat = 1;
    if (auto star = term.find('*'); star != std::string_view::npos) {
      repeat = parse_small_count(trim(term.substr(star + 1)), pattern);
      term = trim(term.substr(0, star));
    }
    cycle.insert(cycle.end(), repeat, parse_layer_type(term, pattern));
    if (cycle.size() > k_max_layers) {
      bad_pattern(pattern, "the cycle is longer than " + group_digits(k_max_layers) + " layers");
    }
    if (comma == std::string_view::npos) {
      break;
    }
    start = comma + 1;
  }
  return cycle;
}

} // namespace

void check_layer_count(u64 layers) {
  if (layers > k_max_layers) {
    throw InputError("'layers' = " + group_digits(layers) + " is more than kvcalc takes (at most " +
                     group_digits(k_max_layers) + "; real models have a few hundred)");
  }
}

std::vector<LayerType> expand_layer_pattern(std::string_view pattern, u64 layers) {
  check_layer_count(layers);
  std::vector<LayerType> cycle = cycle_of(pattern);
  std::vector<LayerType> out;
  out.reserve(layers);
  for (u64 i = 0; i < layers; ++i) {
    out.push_back(cycle[i % cycle.size()]);
  }
  return out;
}

std::optional<std::string> describe_layer_pattern(const std::vector<LayerType>& types) {
  if (std::all_of(types.begin(), types.end(), [](LayerType t) { return t == LayerType::full; })) {
    return std::string{};
  }
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
      out += (out.empty() ? "" : ", ") + std::string(layer_type_name(types[i]));
      if (run > 1) {
        out += "*" + std::to_string(run);
      }
      i += run;
    }
    return out;
  }
  return std::nullopt;
}

void validate_model(const Model& m, const Locator& where) {
  auto fail = [&](std::string_view key, const std::string& message) {
    throw InputError(where(key), message);
  };
  auto positive = [&](std::string_view key, u64 value, std::string_view meaning) {
    if (value == 0) {
      fail(key, "'" + std::string(key) + "' must be at least 1 (" + std::string(meaning) + ")");
    }
  };

  if (m.name.empty()) {
    fail("name", "'name' must not be empty");
  }
  for (char c : m.name) {
    if (!(std::islower(static_cast<unsigned char>(c)) ||
          std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_')) {
      fail("name",
           "'name' may use only lowercase letters, digits, '-', '.' and '_'; got '" + m.name + "'");
    }
  }
  positive("layers", m.layers, "the number of transformer layers");
  try {
    check_layer_count(m.layers);
  } catch (const InputError& e) {
    fail("layers", e.what());
  }
  positive("norms_per_layer", m.norms_per_layer, "norm layers in each transformer block");
  positive("hidden_size", m.hidden_size, "the model width");
  positive("vocab_size", m.vocab_size, "the vocabulary size");

  const Attention& a = m.attention;
  positive("attention.heads", a.heads, "query heads");
  switch (a.kind) {
  case AttentionKind::mha:
    if (a.kv_heads != a.heads) {
      fail("attention.kv_heads", "kind mha needs kv_heads equal to heads (" +
                                     std::to_string(a.heads) + "), got " +
                                     std::to_string(a.kv_heads) + "; use kind gqa or mqa");
    }
    break;
  case AttentionKind::mqa:
    if (a.kv_heads != 1) {
      fail("attention.kv_heads",
           "kind mqa has exactly 1 KV head, got " + std::to_string(a.kv_heads) + "; use kind gqa");
    }
    break;
  case AttentionKind::gqa:
    positive("attention.kv_heads", a.kv_heads, "key/value heads");
    if (a.heads % a.kv_heads != 0) {
      fail("attention.kv_heads", "heads (" + std::to_string(a.heads) +
                                     ") must be a multiple of kv_heads (" +
                                     std::to_string(a.kv_heads) + ")");
    }
    break;
  case AttentionKind::mla:
    positive("attention.kv_lora_rank", a.mla.kv_lora_rank, "the latent width d_c; MLA needs it");
    positive("attention.qk_rope_head_dim", a.mla.qk_rope_head_dim,
             "the decoupled RoPE width d_R; MLA needs it");
    positive("attention.qk_nope_head_dim", a.mla.qk_nope_head_dim,
             "the per-head non-RoPE width d_nope; MLA needs it");
    positive("attention.v_head_dim", a.mla.v_head_dim,
             "the per-head value width d_v; MLA needs it");
    break;
  }
  positive("attention.head_dim", a.head_dim, "the key width per head");
  positive("attention.v_head_dim", a.v_head_dim, "the value width per head");

  if (m.layer_types.size() != m.layers) {
    fail("layer_pattern", "layer_pattern lists " + std::to_string(m.layer_types.size()) +
                              " layers but the model has " + std::to_string(m.layers));
  }
  auto has = [&](LayerType t) {
    return std::find(m.layer_types.begin(), m.layer_types.end(), t) != m.layer_types.end();
  };
  if (has(LayerType::sliding) && m.sliding_window == 0) {
    fail("layer_pattern", "some layers slide but 'sliding_window' (tokens) is not set");
  }
  if (!has(LayerType::sliding) && m.sliding_window != 0) {
    fail("layer_pattern", "'sliding_window' is set but layer_pattern has no sliding layer; "
                          "remove sliding_window or set layer_pattern (e.g. 'sliding')");
  }
  if (has(LayerType::linear) && !m.linear_state) {
    fail("linear_state", "some layers are linear but 'linear_state' (elements per sequence) "
                         "is not set");
  }
  if (m.linear_state) {
    if (!has(LayerType::linear)) {
      fail("linear_state", "'linear_state' is set but layer_pattern has no linear layer");
    }
    positive("linear_state.elements", m.linear_state->elements, "state elements per sequence");
  }

  if (m.moe) {
    const Moe& e = *m.moe;
    positive("moe.routed_experts", e.routed_experts, "routed experts");
    positive("moe.experts_per_token", e.experts_per_token, "experts each token is routed to");
    positive("moe.expert_intermediate_size", e.expert_intermediate_size, "the expert MLP width");
    if (e.experts_per_token > e.routed_experts) {
      fail("moe.experts_per_token", "experts_per_token (" + std::to_string(e.experts_per_token) +
                                        ") exceeds routed_experts (" +
                                        std::to_string(e.routed_experts) + ")");
    }
    if (e.first_dense_layers > m.layers) {
      fail("moe.first_dense_layers", "first_dense_layers (" + std::to_string(e.first_dense_layers) +
                                         ") exceeds layers (" + std::to_string(m.layers) + ")");
    }
    if (e.first_dense_layers > 0) {
      positive("mlp.intermediate_size", m.mlp.intermediate_size,
               "the width of the first dense layers");
    }
  } else {
    positive("mlp.intermediate_size", m.mlp.intermediate_size, "the MLP width");
  }

  // The widest cache kvcalc can be asked for (fp32, expanded MLA, every layer) must fit in 64
  // bits per token, so no later product of these sizes silently wraps.
  try {
    u64 per_layer = checked_mul(checked_mul(a.kv_heads, checked_add(a.head_dim, a.v_head_dim)), 4);
    if (a.kind == AttentionKind::mla) {
      per_layer = checked_add(
          per_layer, checked_mul(checked_add(a.mla.kv_lora_rank, a.mla.qk_rope_head_dim), 4));
    }
    (void)checked_mul(per_layer, m.layers);
    if (m.linear_state) {
      (void)checked_mul(checked_mul(m.linear_state->elements, 4), m.layers);
    }
  } catch (const OverflowError&) {
    fail("attention", "the KV cache per token of these sizes does not fit in 64 bits; check "
                      "heads, head dims and layers for absurd values");
  }
}

} // namespace kvcalc
