#pragma once
/// Exact cache bytes of one model: per token and per sequence of each layer group, and at given
/// context lengths (docs/formulas.md §3–§6). A pure function of its inputs.

#include <string>
#include <vector>

#include <kvcalc/core/derivation.hpp>
#include <kvcalc/kv/cache_format.hpp>
#include <kvcalc/kv/cache_spec.hpp>
#include <kvcalc/model/model.hpp>

namespace kvcalc::kv {

struct FootprintOptions {
  CacheRequest cache;
  std::vector<u64> contexts; ///< tokens per sequence
  u64 block_size = 0;        ///< tokens per page; 0: no paging
  bool explain = false;      ///< record the derivation
};

struct ContextFootprint {
  u64 tokens = 0;
  u64 kv_bytes = 0;                ///< true bytes of one sequence at this length, every group
  u64 paged_kv_bytes = 0;          ///< with every layer's tokens rounded up to whole blocks
  std::vector<u64> group_kv_bytes; ///< true bytes per CacheGroup, same order
};

struct Footprint {
  CacheFormat format;
  std::vector<CacheGroup> groups;    ///< on one GPU, no parallelism
  u64 bytes_per_token_per_layer = 0; ///< one layer of the first attention group; 0 without one
  u64 bytes_per_token = 0;           ///< every per-token group at the full rate, no window cap
  u64 state_bytes_per_sequence = 0;  ///< recurrent state, all layers
  std::vector<ContextFootprint> contexts;
  u64 block_size = 0;
  Derivation derivation;          ///< the arithmetic, when FootprintOptions::explain
  std::vector<std::string> notes; ///< for people: contexts past max_context
};

[[nodiscard]] Footprint compute_footprint(const model::Model& m, const FootprintOptions& options);

} // namespace kvcalc::kv
