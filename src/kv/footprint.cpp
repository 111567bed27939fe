#include <kvcalc/kv/footprint.hpp>

#include <algorithm>

#include <kvcalc/core/units.hpp>

using namespace kvcalc::model;

namespace kvcalc::kv {

namespace {

/// One sequence of `tokens` tokens over the groups of `out`, with its derivation line.
ContextFootprint context_footprint(const Footprint& out, u64 tokens, u64 block_size,
                                   Derivation& why) {
  ContextFootprint c;
  c.tokens = tokens;
  DerivationLine terms{"at ", num(tokens), " tokens: "};
  DerivationLine paged_terms{"  paged in blocks of ", num(block_size), " tokens: "};
  bool first = true;
  for (const auto& group : out.groups) {
    const CacheSpec& s = group.spec;
    u64 held_bytes = checked_mul(group.layers, s.bytes_at(tokens), "cache bytes at this context");
    u64 paged = held_bytes;
    if (!first) {
      terms.emplace_back(" + ");
    }
    if (s.kind == CacheKind::state) {
      terms.insert(terms.end(),
                   {num(group.layers), " " + group.name + " × ", bytes(s.state_bytes)});
    } else {
      u64 held = s.held_tokens(tokens);
      u64 paged_tokens = held;
      if (block_size > 0) {
        paged_tokens = checked_mul(ceil_div(held, block_size), block_size, "paged tokens");
        paged = checked_mul(checked_mul(paged_tokens, s.bytes_per_token, "paged KV bytes"),
                            group.layers, "paged KV bytes");
        if (paged_terms.size() > 3) {
          paged_terms.emplace_back(" + ");
        }
        paged_terms.insert(paged_terms.end(), {num(group.layers), " × ", bytes(s.bytes_per_token),
                                               " × ", num(paged_tokens)});
      }
      terms.insert(terms.end(), {num(group.layers), " " + group.name + " × ",
                                 bytes(s.bytes_per_token), " × ", num(held), " tokens"});
      if (held < tokens) {
        terms.emplace_back(s.kind == CacheKind::sliding ? " (window)" : " (chunk)");
      }
    }
    first = false;
    c.group_kv_bytes.push_back(held_bytes);
    c.kv_bytes = checked_add(c.kv_bytes, held_bytes, "KV bytes at this context");
    c.paged_kv_bytes = checked_add(c.paged_kv_bytes, paged, "paged KV bytes");
  }
  if (out.groups.empty()) {
    terms.emplace_back("no layer keeps a cache");
  }
  terms.insert(terms.end(), {" = ", bytes(c.kv_bytes)});
  why.add_line(std::move(terms));
  if (block_size > 0) {
    if (paged_terms.size() == 3) {
      paged_terms.emplace_back("no paged layers");
    }
    if (out.state_bytes_per_sequence) {
      paged_terms.emplace_back(" + state");
    }
    paged_terms.insert(paged_terms.end(), {" = ", bytes(c.paged_kv_bytes), ", waste ",
                                           bytes(c.paged_kv_bytes - c.kv_bytes)});
    why.add_line(std::move(paged_terms));
  }
  return c;
}

} // namespace

Footprint compute_footprint(const Model& m, const FootprintOptions& options) {
  Footprint out;
  out.format = resolve_cache_format(options.cache, m);
  out.block_size = options.block_size;
  out.derivation = Derivation(options.explain);
  Derivation& why = out.derivation;
  CacheLayout layout;
  layout.cache = options.cache;
  out.groups = cache_groups(m, layout);
  why.add(m.display_name + ": " + attention_label(m) + ", ", num(m.layers),
          " layers, KV cache " + describe(out.format));
  explain_groups(out.groups, why);

  for (const auto& g : out.groups) {
    if (g.spec.kind != CacheKind::indexer && g.spec.kind != CacheKind::state) {
      out.bytes_per_token_per_layer = g.spec.bytes_per_token;
      break;
    }
  }
  out.bytes_per_token = bytes_per_token(out.groups);
  out.state_bytes_per_sequence = state_bytes(out.groups);
  if (why.enabled()) {
    DerivationLine sum{"per token, every per-token group at the full rate: "};
    bool first = true;
    for (const auto& g : out.groups) {
      if (g.spec.kind == CacheKind::state) {
        continue;
      }
      sum.insert(sum.end(), {first ? "" : " + ", num(g.layers), " " + g.name + " × ",
                             bytes(g.spec.bytes_per_token)});
      first = false;
    }
    sum.insert(sum.end(), {first ? "none" : "", " = ", bytes(out.bytes_per_token)});
    why.add_line(std::move(sum));
    if (out.state_bytes_per_sequence) {
      why.add("per sequence, every state layer: ", bytes(out.state_bytes_per_sequence),
              ", whatever the context");
    }
  }

  for (u64 tokens : options.contexts) {
    try {
      out.contexts.push_back(context_footprint(out, tokens, options.block_size, why));
    } catch (const OverflowError&) {
      throw OverflowError(m.name + ": the KV cache of one sequence of " + group_digits(tokens) +
                          " tokens does not fit in 64 bits (over 16 EiB); use a smaller "
                          "--context");
    }
    if (m.max_context != 0 && tokens > m.max_context) {
      out.notes.push_back(m.name + ": context " + group_digits(tokens) +
                          " exceeds its max_context of " + group_digits(m.max_context) + " tokens");
    }
  }
  return out;
}

} // namespace kvcalc::kv
