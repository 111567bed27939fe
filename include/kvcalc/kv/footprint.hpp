#pragma once
/// Exact KV-cache bytes of one model: per token, per layer kind, and at given context lengths
/// (docs/formulas.md, "Footprint"). A pure function of its inputs.

#include <string>
#include <vector>

#include <kvcalc/kv/cache_format.hpp>
#include <kvcalc/model/model.hpp>

namespace kvcalc {

struct FootprintOptions {
  CacheRequest cache;
  std::vector<u64> contexts; ///< tokens per sequence
  u64 block_size = 0;        ///< tokens per page; 0: no paging
};

/// Layers that keep the same thing per token.
struct LayerGroup {
  LayerType type = LayerType::full;
  u64 layers = 0;
  u64 window = 0;                    ///< tokens held, for sliding layers
  u64 bytes_per_token_per_layer = 0; ///< 0 for linear layers
  u64 state_bytes_per_layer = 0;     ///< per sequence, for linear layers
};

struct ContextFootprint {
  u64 tokens = 0;
  u64 kv_bytes = 0;                ///< true bytes of one sequence at this length
  u64 paged_kv_bytes = 0;          ///< with every layer's tokens rounded up to whole blocks
  std::vector<u64> group_kv_bytes; ///< true bytes per LayerGroup, same order
};

struct Footprint {
  CacheFormat format;
  u64 bytes_per_token_per_layer = 0; ///< one full-attention layer
  u64 bytes_per_token = 0;           ///< every attention layer at the full rate, no window cap
  u64 state_bytes_per_sequence = 0;  ///< linear-attention / SSM state, all layers
  std::vector<LayerGroup> groups;
  std::vector<ContextFootprint> contexts;
  u64 block_size = 0;
  std::vector<std::string> derivation; ///< the arithmetic, one line per term (--explain)
  std::vector<std::string> notes;      ///< for people: contexts past max_context, ignored flags
};

/// Bytes one full-attention layer stores per token in format `f`.
[[nodiscard]] u64 kv_bytes_per_token_per_layer(const Model& m, const CacheFormat& f);

[[nodiscard]] Footprint compute_footprint(const Model& m, const FootprintOptions& options);

} // namespace kvcalc
