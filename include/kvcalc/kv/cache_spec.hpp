#pragma once
/// A model's cache as a list of layer groups, each with one spec: what one layer of the group
/// stores per token or per sequence on one GPU (docs/formulas.md, "Cache groups"). Footprint,
/// capacity, the engines' rules, the roofline and the simulator all read a model's cache
/// through this list. A pure function of the model and the layout.

#include <string>
#include <string_view>
#include <vector>

#include <kvcalc/core/derivation.hpp>
#include <kvcalc/kv/cache_format.hpp>
#include <kvcalc/model/model.hpp>

namespace kvcalc::kv {

/// How what a layer keeps grows with the context.
enum class CacheKind {
  full,    ///< every token of the context
  sliding, ///< the last `window` tokens
  chunked, ///< the tokens of the current `window`-token chunk (chunked local attention)
  indexer, ///< DSA indexer keys of every token, beside an MLA latent
  state,   ///< a constant state per sequence
};

inline constexpr NameTable<CacheKind, 5> k_cache_kinds{"cache kind",
                                                       {{{CacheKind::full, "full"},
                                                         {CacheKind::sliding, "sliding"},
                                                         {CacheKind::chunked, "chunked"},
                                                         {CacheKind::indexer, "indexer"},
                                                         {CacheKind::state, "state"}}}};

/// One tensor of a recurrent layer's state, per sequence, on one GPU.
struct StateTensor {
  std::string name;       ///< "conv", "ssm", "recurrent", "conv_k", ...
  std::vector<u64> shape; ///< elements per axis, as the engines allocate it
  DType dtype = DType::bf16;

  [[nodiscard]] u64 elements() const;
  [[nodiscard]] u64 bytes() const;
};

/// What one layer of a group keeps, on one GPU.
struct CacheSpec {
  CacheKind kind = CacheKind::full;
  u64 window = 0; ///< tokens: the window (sliding) or the chunk (chunked); 0 otherwise
  // Per-token kinds (full, sliding, chunked, indexer):
  u64 kv_heads = 0;   ///< vectors of K per token on this GPU (1 for an MLA latent or indexer key)
  u64 k_width = 0;    ///< elements of one K vector (MLA latent: d_c + d_R; indexer: its head_dim)
  u64 v_width = 0;    ///< elements of one V vector; 0 when V is not stored apart (MLA latent)
  bool mla = false;   ///< an MLA latent or expanded MLA cache
  u64 rope_width = 0; ///< MLA latent: d_R, the RoPE part of k_width (the rest is d_c)
  CacheFormat format; ///< dtype and scales of the stored vectors
  u64 bytes_per_token = 0; ///< per layer, scales included
  // State kind:
  model::StateKind state_kind = model::StateKind::custom;
  std::vector<StateTensor> state;
  u64 state_bytes = 0; ///< per layer per sequence

  /// Tokens a layer of this spec holds for a sequence of `context` tokens: the context, capped
  /// by a window or chunk; 0 for a state.
  [[nodiscard]] u64 held_tokens(u64 context) const;
  /// Bytes one layer holds for a sequence of `context` tokens (a state: its constant bytes).
  [[nodiscard]] u64 bytes_at(u64 context) const;
};

/// Layers of one GPU that keep the same thing.
struct CacheGroup {
  std::string name; ///< "full", "sliding", "chunked", "indexer", "state"
  CacheSpec spec;
  u64 layers = 0;             ///< layers of this GPU in the group
  std::vector<u64> layer_ids; ///< their indices in the model (MTP layers follow the last)
  u64 shared_layers = 0;      ///< layers that attend over this group's cache but store none
};

/// How KV heads split over tensor parallelism.
enum class HeadSplit {
  floor,   ///< max(1, ⌊H_kv / tp⌋): vLLM, SGLang (replicated when tp > H_kv)
  ceiling, ///< ⌈H_kv / tp⌉: TensorRT-LLM
};

/// The state dtypes a layout stores, before a model's own and a kind's fixed ones.
struct StateDtypeDefaults {
  std::optional<DType> conv; ///< unset: the model dtype (vLLM's and SGLang's `auto`)
  std::optional<DType> ssm;  ///< unset: as conv
  /// The engine keeps the SSM dtype the model's config gives (StateSpec::ssm_dtype) over its own.
  bool model_ssm = true;
};

/// How one GPU holds the model's cache.
struct CacheLayout {
  CacheRequest cache;   ///< element format; state dtypes the user asked for
  u64 attention_tp = 1; ///< heads, latents and states split over this many GPUs
  HeadSplit head_split = HeadSplit::floor;
  u64 pp = 1;         ///< pipeline stages: this GPU holds the first ⌈layers / pp⌉ layers
  u64 mtp_layers = 0; ///< draft layers loaded beside the model (full attention)
  StateDtypeDefaults state_defaults; ///< the engine's state dtypes, under the user's and model's
};

/// The groups of `m` on one GPU under `layout`, in the order full, sliding, chunked, indexer,
/// state; empty groups are left out. Throws InputError for a tensor parallelism that cannot
/// split the heads or the state as engines do.
[[nodiscard]] std::vector<CacheGroup> cache_groups(const model::Model& m,
                                                   const CacheLayout& layout);

/// The state of one layer of kind `spec` on one of `tp` GPUs (vLLM's MambaStateShapeCalculator
/// shapes; docs/formulas.md, "Per-sequence state"). `conv` and `ssm` are the dtypes of the two
/// parts; Kimi Delta Attention keeps its recurrent state in fp32 whatever is asked.
[[nodiscard]] std::vector<StateTensor> state_tensors(const model::StateSpec& spec, u64 tp,
                                                     DType conv, DType ssm);

/// Bytes per token of all per-token groups at the full rate, no window or chunk cap.
[[nodiscard]] u64 bytes_per_token(const std::vector<CacheGroup>& groups);
/// Bytes per sequence of all state groups.
[[nodiscard]] u64 state_bytes(const std::vector<CacheGroup>& groups);
/// Bytes one sequence of `context` tokens holds over all groups.
[[nodiscard]] u64 bytes_at(const std::vector<CacheGroup>& groups, u64 context);

/// The derivation of each group's spec ("full: 8 KV heads × (K 128 + V 128) × 2 B = 4,096 B").
void explain_groups(const std::vector<CacheGroup>& groups, Derivation& why);

} // namespace kvcalc::kv
