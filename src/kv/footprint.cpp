#include <kvcalc/kv/footprint.hpp>

#include <algorithm>

#include <kvcalc/core/units.hpp>

namespace kvcalc {

namespace {

std::string g(u64 v) {
  return group_digits(v);
}

/// "128 × 1 B (fp8_e4m3) + 1 × 4 B scale" — one stored vector, for the
/// derivation.
std::string vector_terms(const CacheFormat& f, u64 elements) {
  std::string out;
  unsigned bits = dtype_bits(f.dtype);
  if (bits % 8 == 0) {
    out = g(elements) + " × " + std::to_string(bits / 8) + " B";
  } else {
    out = "⌈" + g(elements) + " × " + std::to_string(bits) + " bit / 8⌉ B";
  }
  out += " (" + std::string(dtype_name(f.dtype)) + ")";
  u64 scales = scales_per_vector(f.scale, elements);
  if (scales > 0) {
    out += " + " + g(scales) + " × " + std::to_string(dtype_bits(f.scale.dtype) / 8) + " B (" +
           std::string(dtype_name(f.scale.dtype)) + " scale" + (scales > 1 ? "s" : "") + ")";
    out = "(" + out + ")";
  }
  return out;
}

/// Bytes per token per full-attention layer, with the derivation line.
u64 per_layer_rate(const Model& m, const CacheFormat& f, std::vector<std::string>* why) {
  const Attention& a = m.attention;
  auto say = [&](std::string line) {
    if (why != nullptr) {
      why->push_back(std::move(line));
    }
  };
  if (f.mla && f.mla_format == MlaCacheFormat::fp8_ds_mla) {
    // FlashMLA's fp8 MLA layout: fp8 latent, one fp32 scale per 128 latent
    // values, and the RoPE part kept in bf16 (docs/formulas.md, "fp8_ds_mla").
    u64 d_c = a.mla.kv_lora_rank;
    u64 d_r = a.mla.qk_rope_head_dim;
    u64 bytes = checked_add(checked_add(d_c, checked_mul(d_c / 128, 4)), checked_mul(d_r, 2));
    say("per layer per token (fp8_ds_mla): kv_lora_rank " + g(d_c) + " × 1 B (fp8_e4m3) + " +
        g(d_c / 128) + " × 4 B (fp32 scale per 128) + qk_rope_head_dim " + g(d_r) +
        " × 2 B (bf16) = " + g(bytes) + " B");
    return bytes;
  }
  if (f.mla && f.mla_format == MlaCacheFormat::latent) {
    u64 width = checked_add(a.mla.kv_lora_rank, a.mla.qk_rope_head_dim);
    u64 bytes = vector_bytes(f, width);
    say("per layer per token (MLA latent, one stream, no factor 2): "
        "(kv_lora_rank " +
        g(a.mla.kv_lora_rank) + " + qk_rope_head_dim " + g(a.mla.qk_rope_head_dim) +
        ") = " + vector_terms(f, width) + " = " + g(bytes) + " B");
    return bytes;
  }
  u64 k = vector_bytes(f, a.head_dim);
  u64 v = vector_bytes(f, a.v_head_dim);
  u64 bytes = checked_mul(a.kv_heads, checked_add(k, v), "KV bytes per token per layer");
  std::string heads =
      f.mla ? "heads " + g(a.kv_heads) + " (MLA expanded)" : "kv_heads " + g(a.kv_heads);
  if (k == v) {
    say("per layer per token: " + heads + " × 2 (K and V) × " + vector_terms(f, a.head_dim) +
        " = " + g(bytes) + " B");
  } else {
    std::string k_dims = f.mla ? "(qk_nope " + g(a.mla.qk_nope_head_dim) + " + qk_rope " +
                                     g(a.mla.qk_rope_head_dim) + ")"
                               : "head_dim " + g(a.head_dim);
    say("per layer per token: " + heads + " × (K: " + k_dims + " → " + vector_terms(f, a.head_dim) +
        " + V: v_head_dim → " + vector_terms(f, a.v_head_dim) + ") = " + g(bytes) + " B");
  }
  return bytes;
}

/// One sequence of `tokens` tokens over the layer groups of `out`, with its
/// derivation lines.
ContextFootprint context_footprint(const Footprint& out, u64 tokens, u64 block_size,
                                   std::vector<std::string>& why) {
  ContextFootprint c;
  c.tokens = tokens;
  std::string terms;
  std::string paged_terms;
  for (const auto& group : out.groups) {
    u64 held = 0;
    u64 bytes = 0;
    u64 paged = 0;
    if (group.type == LayerType::linear) {
      bytes = checked_mul(group.state_bytes_per_layer, group.layers, "state bytes");
      paged = bytes;
      terms += (terms.empty() ? "" : " + ") + g(group.layers) + " linear × " +
               g(group.state_bytes_per_layer) + " B";
    } else {
      held = group.type == LayerType::sliding ? std::min(tokens, group.window) : tokens;
      u64 per_token = checked_mul(group.layers, group.bytes_per_token_per_layer, "KV bytes");
      bytes = checked_mul(held, per_token, "KV bytes at this context");
      u64 paged_tokens = held;
      if (block_size > 0) {
        paged_tokens = checked_mul(ceil_div(held, block_size), block_size, "paged tokens");
      }
      paged = checked_mul(paged_tokens, per_token, "paged KV bytes");
      terms += (terms.empty() ? "" : " + ") + g(group.layers) + " " +
               std::string(layer_type_name(group.type)) + " × " +
               g(group.bytes_per_token_per_layer) + " B × " + g(held) + " tokens";
      if (group.type == LayerType::sliding && held < tokens) {
        terms += " (window)";
      }
      if (block_size > 0) {
        paged_terms += (paged_terms.empty() ? "" : " + ") + g(group.layers) + " × " +
                       g(group.bytes_per_token_per_layer) + " B × " + g(paged_tokens);
      }
    }
    c.group_kv_bytes.push_back(bytes);
    c.kv_bytes = checked_add(c.kv_bytes, bytes, "KV bytes at this context");
    c.paged_kv_bytes = checked_add(c.paged_kv_bytes, paged, "paged KV bytes");
  }
  why.push_back("at " + g(tokens) + " tokens: " + terms + " = " + g(c.kv_bytes) + " B");
  if (block_size > 0) {
    why.push_back("  paged in blocks of " + g(block_size) +
                  " tokens: " + (paged_terms.empty() ? "no paged layers" : paged_terms) +
                  (out.state_bytes_per_sequence ? " + state" : "") + " = " + g(c.paged_kv_bytes) +
                  " B, waste " + g(c.paged_kv_bytes - c.kv_bytes) + " B");
  }
  return c;
}

} // namespace

u64 kv_bytes_per_token_per_layer(const Model& m, const CacheFormat& f) {
  return per_layer_rate(m, f, nullptr);
}

Footprint compute_footprint(const Model& m, const FootprintOptions& options) {
  Footprint out;
  out.format = resolve_cache_format(options.cache, m);
  out.block_size = options.block_size;
  std::vector<std::string>& why = out.derivation;
  why.push_back(m.display_name + ": " + attention_label(m) + ", " + g(m.layers) +
                " layers, KV cache " + describe(out.format));
  out.bytes_per_token_per_layer = per_layer_rate(m, out.format, &why);

  for (LayerType type : {LayerType::full, LayerType::sliding, LayerType::linear}) {
    auto count = static_cast<u64>(std::count(m.layer_types.begin(), m.layer_types.end(), type));
    if (count == 0) {
      continue;
    }
    LayerGroup group{type, count, 0, 0, 0};
    if (type == LayerType::linear) {
      group.state_bytes_per_layer =
          dtype_storage_bytes(m.linear_state->dtype, m.linear_state->elements);
      u64 total = checked_mul(group.state_bytes_per_layer, count, "state bytes per sequence");
      out.state_bytes_per_sequence = total;
      why.push_back("linear layers: " + g(count) + " × state " + g(m.linear_state->elements) +
                    " elements × " + std::to_string(dtype_bits(m.linear_state->dtype)) +
                    " bit = " + g(total) + " B per sequence, whatever the context");
    } else {
      group.bytes_per_token_per_layer = out.bytes_per_token_per_layer;
      group.window = type == LayerType::sliding ? m.sliding_window : 0;
      u64 rate = checked_mul(count, out.bytes_per_token_per_layer, "KV bytes per token");
      out.bytes_per_token = checked_add(out.bytes_per_token, rate, "KV bytes per token");
    }
    out.groups.push_back(group);
  }
  {
    std::string sum;
    for (const auto& group : out.groups) {
      if (group.type == LayerType::linear) {
        continue;
      }
      sum += (sum.empty() ? "" : " + ") + g(group.layers) + " " +
             std::string(layer_type_name(group.type)) + " × " + g(out.bytes_per_token_per_layer) +
             " B";
    }
    why.push_back("per token, all attention layers: " + sum + " = " + g(out.bytes_per_token) +
                  " B");
  }

  for (u64 tokens : options.contexts) {
    try {
      out.contexts.push_back(context_footprint(out, tokens, options.block_size, why));
    } catch (const OverflowError&) {
      throw OverflowError(m.name + ": the KV cache of one sequence of " + g(tokens) +
                          " tokens does not fit in 64 bits (over 16 EiB); use a smaller "
                          "--context");
    }
    if (m.max_context != 0 && tokens > m.max_context) {
      out.notes.push_back(m.name + ": context " + g(tokens) + " exceeds its max_context of " +
                          g(m.max_context) + " tokens");
    }
  }
  return out;
}

} // namespace kvcalc
