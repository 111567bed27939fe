// The plain rules: the GPU's memory less the weights and a reserve is the pool, and each
// sequence takes its exact bytes, windows and states included (docs/formulas.md, "Capacity").

#include <kvcalc/core/units.hpp>

#include "engine_rules.hpp"

namespace kvcalc::kv::detail {

namespace {

class PlainPool : public Pool {
public:
  PlainPool(std::vector<CacheGroup> groups, u64 pool, u64 block_size, u64 dcp)
      : m_groups(std::move(groups)), m_pool(pool), m_block_size(block_size), m_dcp(dcp) {}

  [[nodiscard]] ContextCapacity at(u64 tokens) const override {
    ContextCapacity c;
    c.tokens = tokens;
    u64 on_rank = ceil_div(tokens, m_dcp);
    for (const auto& g : m_groups) {
      u64 per_layer = g.spec.bytes_at(on_rank);
      if (m_block_size > 0 && is_per_token(g)) {
        u64 held = checked_mul(ceil_div(g.spec.held_tokens(on_rank), m_block_size), m_block_size);
        per_layer = checked_mul(held, g.spec.bytes_per_token, "paged KV bytes");
      }
      c.bytes_per_sequence =
          checked_add(c.bytes_per_sequence, checked_mul(per_layer, g.layers), "bytes per sequence");
    }
    if (m_block_size > 0) {
      c.blocks_per_sequence = ceil_div(on_rank, m_block_size);
    }
    if (c.bytes_per_sequence == 0) {
      return c;
    }
    c.max_concurrency = static_cast<double>(m_pool) / static_cast<double>(c.bytes_per_sequence);
    c.max_sequences = m_pool / c.bytes_per_sequence;
    return c;
  }

private:
  std::vector<CacheGroup> m_groups;
  u64 m_pool;
  u64 m_block_size;
  u64 m_dcp;
};

class PlainRules : public EngineRules {
public:
  [[nodiscard]] std::string_view version() const override {
    return "plain (exact bytes, no engine)";
  }

  [[nodiscard]] Budget budget(const BudgetInputs& in, Derivation& why) const override {
    Budget b;
    b.budget_bytes = in.gpu.memory_bytes;
    b.non_kv_bytes =
        in.settings.non_kv_bytes.value_or(checked_add(in.weights_per_gpu, in.reserve_bytes));
    b.pool_bytes = signed_difference(in.gpu.memory_bytes, b.non_kv_bytes);
    why.add("plain: ", bytes(in.gpu.memory_bytes), " usable − non-KV ", bytes(b.non_kv_bytes),
            in.settings.non_kv_bytes    ? " (given)"
            : in.settings.reserve_bytes ? " (weights + given reserve)"
                                        : " (weights + reserve estimate)");
    return b;
  }

  [[nodiscard]] std::unique_ptr<Pool> plan(const PlanInputs& in, CapacityResult& r,
                                           Derivation& why) const override {
    u64 block = in.settings.block_size.value_or(0);
    u64 per_token = bytes_per_token(in.groups);
    u64 state = state_bytes(in.groups);
    r.block_size = block;
    r.kv_tokens = per_token ? in.pool_bytes / per_token * in.parallel.dcp : 0;
    r.state_slots = per_token == 0 && state > 0 ? in.pool_bytes / state : 0;
    // A serving run draws bytes: each group's blocks (or tokens) at its per-token bytes, a
    // state at its bytes; with dcp each rank holds 1/dcp of a sequence's tokens.
    SequencePool bytes_pool{"bytes", "bytes", in.pool_bytes, {}};
    u64 granule = std::max<u64>(block, 1);
    for (const auto& g : in.groups) {
      r.pool_groups.push_back(
          {g.name, g.layers, 1, is_per_token(g) ? block : 0,
           is_per_token(g) ? g.spec.bytes_per_token * granule : g.spec.state_bytes, 0});
      u64 per_block = is_per_token(g)
                          ? checked_mul(checked_mul(g.spec.bytes_per_token, g.layers), granule)
                          : checked_mul(g.spec.state_bytes, g.layers);
      bytes_pool.terms.push_back({g.spec.kind, g.spec.window, granule,
                                  ceil_div(per_block, is_per_token(g) ? in.parallel.dcp : 1)});
    }
    r.sequence_pools.push_back(std::move(bytes_pool));
    if (per_token) {
      why.add("plain: ", bytes(in.pool_bytes), " // ", bytes(per_token),
              " per token = ", num(r.kv_tokens), " tokens");
    } else if (state) {
      why.add("plain: ", bytes(in.pool_bytes), " // ", bytes(state),
              " of state per sequence = ", num(r.state_slots), " sequences");
    }
    if (in.parallel.dcp > 1) {
      why.add("decode context parallel ", num(in.parallel.dcp), ": each rank holds 1/",
              num(in.parallel.dcp), " of every sequence's tokens");
    }
    return std::make_unique<PlainPool>(in.groups, in.pool_bytes, block, in.parallel.dcp);
  }
};

} // namespace

const EngineRules& plain_rules() {
  static const PlainRules rules;
  return rules;
}

} // namespace kvcalc::kv::detail
