#pragma once
/// How many sequences fit: usable GPU memory → weights share → non-KV reserve → KV pool →
/// tokens → blocks → sequences at each context, with the budget rules of a plain calculation,
/// vLLM, SGLang or TensorRT-LLM (docs/formulas.md, "Capacity"). A pure function.

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <kvcalc/core/derivation.hpp>
#include <kvcalc/device/gpu.hpp>
#include <kvcalc/kv/cache_format.hpp>
#include <kvcalc/kv/cache_spec.hpp>
#include <kvcalc/kv/deployment.hpp>
#include <kvcalc/kv/weights.hpp>
#include <kvcalc/model/model.hpp>

namespace kvcalc::kv {

enum class Engine { plain, vllm, sglang, trtllm };

/// The engines, with the names users type for them (any case).
inline constexpr NameTable<Engine, 8> k_engines{"engine",
                                                {{{Engine::plain, "plain"},
                                                  {Engine::vllm, "vllm"},
                                                  {Engine::sglang, "sglang"},
                                                  {Engine::trtllm, "trtllm"},
                                                  {Engine::sglang, "sgl"},
                                                  {Engine::trtllm, "tensorrt-llm"},
                                                  {Engine::trtllm, "tensorrt_llm"},
                                                  {Engine::trtllm, "trt-llm"}}}};

[[nodiscard]] std::string_view engine_name(Engine e);
[[nodiscard]] Engine parse_engine(std::string_view text);

/// vLLM's mamba_cache_mode: how many state blocks a sequence of a hybrid model holds.
enum class MambaCacheMode {
  none,  ///< one state block per sequence (prefix caching off)
  align, ///< two: the running state and the last block-aligned one (prefix caching)
};
inline constexpr NameTable<MambaCacheMode, 2> k_mamba_cache_modes{
    "mamba cache mode", {{{MambaCacheMode::none, "none"}, {MambaCacheMode::align, "align"}}}};

struct EngineSettings {
  Engine engine = Engine::plain;
  /// vLLM gpu_memory_utilization (0.9), SGLang mem_fraction_static (derived from the GPU),
  /// TensorRT-LLM free_gpu_memory_fraction (0.9); unused by plain.
  std::optional<double> memory_fraction;
  std::optional<u64> block_size;         ///< tokens per page; engine default when unset
  std::optional<u64> max_batched_tokens; ///< tokens per step; engine default when unset
  std::optional<u64> max_seqs;           ///< running sequences per step; engine default
  std::optional<u64> reserve_bytes;  ///< activations and workspace per GPU (overrides the estimate)
  std::optional<u64> non_kv_bytes;   ///< everything but KV per GPU, as the engine measured it
  std::optional<u64> kv_cache_bytes; ///< the KV pool per GPU, as the engine reported it
  MambaCacheMode mamba_cache_mode = MambaCacheMode::none; ///< vLLM, hybrid models
  /// The longest request the engine is started for (vLLM --max-model-len, SGLang
  /// --context-length, TensorRT-LLM max_seq_len); the model's max_context when unset.
  std::optional<u64> max_model_len;
  /// vLLM's `--max-model-len auto`: the longest request the pool holds, up to the model's
  /// max_context, the null block held back.
  bool max_model_len_auto = false;
  std::optional<u64> num_gpu_blocks; ///< vLLM --num-gpu-blocks-override: the pool's block count
};

struct CapacityRequest {
  model::Model model;
  device::Gpu gpu;
  CacheRequest cache;
  std::optional<DType> weight_dtype; ///< nullopt: the model's
  Parallelism parallel;
  EngineSettings engine;
  bool mtp = false; ///< load the MTP module (its weights and its layer's KV)
  std::vector<u64> contexts;
  std::optional<u64> max_context_at; ///< find the longest context with this many sequences
  bool explain = false;              ///< record the derivation
};

struct ContextCapacity {
  u64 tokens = 0;              ///< context length of every sequence
  u64 blocks_per_sequence = 0; ///< paged engines: blocks one sequence needs
  u64 bytes_per_sequence = 0;  ///< KV (and state) one sequence takes on one GPU
  double max_concurrency = 0;  ///< the engine's fractional figure for one KV pool
  u64 max_sequences = 0;       ///< whole sequences, whole deployment
  std::string too_long; ///< why no sequence of this length fits where the deployment does; else ""
};

/// One group of the engine's pool on one GPU, as the engine's own log and code name it: vLLM's
/// KV cache groups, SGLang's full / sliding-window / state pools, TensorRT-LLM's pools.
struct PoolGroup {
  std::string kind;   ///< "full", "sliding", "chunked", "mla+indexer", "state", ...
  u64 layers = 0;     ///< layers of one GPU the group holds (vLLM: of one group)
  u64 groups = 1;     ///< groups of this kind (vLLM splits a kind into groups of group_size)
  u64 block_size = 0; ///< tokens per block; 0: token-granular
  u64 page_bytes = 0; ///< one block of one layer (a state: one sequence's state of one layer)
  u64 capacity = 0;   ///< SGLang: tokens of the pool, or state slots; TensorRT-LLM: blocks
};

/// What one layer group costs a sequence in one engine pool: `units_per_block` units for each
/// block of `block_size` tokens it holds (a state: for its one block).
struct PoolTerm {
  CacheKind kind = CacheKind::full;
  u64 window = 0;          ///< sliding: the window; chunked: the chunk
  u64 block_size = 1;      ///< tokens per block (1: token-granular)
  u64 units_per_block = 1; ///< pool units one block of this term takes
};

/// One pool of the engine as a serving run uses it: a capacity in units (blocks, tokens or
/// bytes) and the terms that say how many a sequence holds (docs/simulate.md, "KV pools").
struct SequencePool {
  std::string name;
  std::string unit = "blocks"; ///< what capacity counts: blocks, tokens, bytes or slots
  u64 capacity = 0;            ///< units of one KV pool (per attention-DP rank)
  std::vector<PoolTerm> terms;

  /// Units a sequence with `tokens` tokens in its cache holds: each term's blocks (full: all
  /// tokens; sliding: the blocks the window overlaps, the rest freed; chunked: the blocks of the
  /// current chunk; state: one).
  [[nodiscard]] u64 units_at(u64 tokens) const;
  /// The most tokens, from `tokens` on, at which a sequence still holds `units_at(tokens)`:
  /// until then a growing sequence needs no new unit and frees none.
  [[nodiscard]] u64 stable_until(u64 tokens) const;
  /// Units of the first `blocks` blocks of its full-attention terms: what a shared prefix of
  /// that many blocks stands for.
  [[nodiscard]] u64 prefix_units(u64 blocks) const;
  /// Tokens per block of its first full-attention term (0 when it has none): prefixes are
  /// shared in whole blocks of it.
  [[nodiscard]] u64 prefix_block_size() const;
};

struct CapacityResult {
  Engine engine = Engine::plain;
  std::string gpu;
  Parallelism parallel;       ///< resolved (gpus, ep filled in)
  u64 replicas = 1;           ///< model copies: gpus / (tp × pp)
  u64 kv_pools = 1;           ///< independent KV pools in the deployment
  u64 memory_bytes = 0;       ///< usable per GPU
  double memory_fraction = 0; ///< the engine's fraction as applied (0 for plain)
  u64 budget_bytes = 0;       ///< what the engine plans within: total × fraction, or free memory
  u64 weights_bytes_per_gpu = 0;
  u64 other_non_kv_bytes_per_gpu = 0; ///< activations, workspace, runtime
  bool non_kv_estimated = true;       ///< the reserve is kvcalc's estimate, not a given figure
  u64 kv_pool_bytes_per_gpu = 0;
  u64 kv_bytes_per_token_per_gpu = 0; ///< this GPU's layers and heads, full rate
  u64 kv_tokens = 0;                  ///< per pool, as the engine reports its token capacity
  u64 block_size = 0;                 ///< 0: not paged
  u64 num_blocks = 0;                 ///< per pool, when paged
  u64 max_batched_tokens = 0;
  u64 max_seqs = 0; ///< running sequences per step, the engine's default unless set
  CacheFormat cache;
  DType weight_dtype = DType::bf16;
  bool fits = true;
  std::string reason; ///< why not, when !fits
  std::vector<ContextCapacity> contexts;
  std::optional<u64> max_context_at; ///< longest context holding the requested sequences
  /// What ends that context: "kv_cache", or the length the search stops at: "max_model_len"
  /// (given), "max_context" (the model's) or "search_limit" (2^24 tokens, the model gives none).
  std::string max_context_limited_by;
  u64 max_model_len = 0;            ///< the engine's, as applied (0: the model gives none)
  bool max_model_len_given = false; ///< set by the user, not the model's max_context
  /// The longest request one pool holds, up to max_model_len (vLLM's "estimated maximum model
  /// length"); unset when the model gives no length or nothing fits.
  std::optional<u64> longest_request;
  std::vector<CacheGroup> cache_groups;     ///< the cache as one GPU holds it
  std::vector<PoolGroup> pool_groups;       ///< the engine's grouping of it
  std::vector<SequencePool> sequence_pools; ///< how a serving run draws on the pools
  u64 state_slots = 0;            ///< sequences whose recurrent state the pool holds; 0: none
  std::string engine_rules;       ///< which engine version the rules reproduce
  Derivation derivation;          ///< the arithmetic, when CapacityRequest::explain
  std::vector<std::string> notes; ///< for people: approximations, limits
};

[[nodiscard]] CapacityResult compute_capacity(const CapacityRequest& request);

/// Whether the deployment holds the model and at least one sequence of every context asked
/// (and of --max-context-at's answer): what every command calls "fits".
[[nodiscard]] bool holds_every_context(const CapacityResult& r);

/// The smallest power-of-two tensor parallelism above the request's at which it fits (with
/// gpus = tp × pp, one copy), or nullopt when none up to 64 does.
[[nodiscard]] std::optional<Parallelism> smallest_fitting_tp(const CapacityRequest& request);

/// SGLang's default mem_fraction_static for this GPU and parallelism (v0.5.3+ rule).
[[nodiscard]] double sglang_mem_fraction_static(const device::Gpu& gpu, u64 tp, u64 pp,
                                                bool dp_attention);

} // namespace kvcalc::kv
