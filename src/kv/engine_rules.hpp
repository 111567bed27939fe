#pragma once
// One engine's rules for sizing its cache (private to kv): its defaults, the memory it plans
// within, how it lays its pool out over a model's cache groups, and what one sequence takes.
// compute_capacity resolves the deployment and calls these; each engine's file cites the engine
// source and version it reproduces (docs/formulas.md, "Capacity").

#include <memory>

#include <kvcalc/kv/capacity.hpp>

namespace kvcalc::kv::detail {

inline constexpr u64 k_mib = 1ULL << 20;
inline constexpr u64 k_gib = 1ULL << 30;
/// CUDA context, cuBLAS workspaces and communicator buffers outside the framework's allocator
/// (docs/formulas.md, "Non-KV reserve").
inline constexpr u64 k_runtime_bytes = 512 * k_mib;

/// The scheduler limits that size a step.
struct Scheduler {
  u64 max_batched_tokens = 0;
  u64 max_seqs = 0;
};

/// What the budget rule reads.
struct BudgetInputs {
  const device::Gpu& gpu;
  const EngineSettings& settings;
  const Parallelism& parallel; ///< resolved
  u64 weights_per_gpu = 0;
  u64 reserve_bytes = 0; ///< activations and runtime on top of the weights (estimate or given)
};

/// What the budget rule decides.
struct Budget {
  double memory_fraction = 0; ///< as applied (0 for plain)
  u64 budget_bytes = 0;       ///< what the engine plans within
  u64 non_kv_bytes = 0;       ///< what it takes off for weights and the rest
  long long pool_bytes = 0;   ///< the KV pool per GPU; at most 0 when nothing is left
  bool non_kv_estimated = true;
};

/// What the layout rule reads.
struct PlanInputs {
  const model::Model& model;
  const device::Gpu& gpu;
  const EngineSettings& settings;
  const Parallelism& parallel; ///< resolved
  u64 attention_tp = 1;
  const std::vector<CacheGroup>& groups; ///< the cache of one GPU
  u64 pool_bytes = 0;
  Scheduler scheduler;
};

/// One engine's pool on one GPU, planned: what one sequence of L tokens takes from it.
class Pool {
public:
  virtual ~Pool() = default;
  /// One sequence of `tokens` tokens; max_sequences is per pool.
  [[nodiscard]] virtual ContextCapacity at(u64 tokens) const = 0;
};

/// One request of the engine's max model length against the pool.
struct LongModelLen {
  u64 max_model_len = 0;
  bool given = false;   ///< --max-model-len (a plan's max_model_len); else the model's own
  u64 longest = 0;      ///< the longest request one pool holds (0: none)
  ContextCapacity need; ///< what one request of max_model_len takes
};

class EngineRules {
public:
  virtual ~EngineRules() = default;

  /// "vLLM v0.20 (kv_cache_utils.py @ 001cabc1)": the version the rules reproduce.
  [[nodiscard]] virtual std::string_view version() const = 0;
  [[nodiscard]] virtual HeadSplit head_split() const { return HeadSplit::floor; }
  /// The state dtypes the engine keeps unless the user or the model says otherwise.
  [[nodiscard]] virtual StateDtypeDefaults state_dtypes(const model::Model& /*m*/) const {
    return {};
  }
  /// The cache format the engine stores for what the user asked (vLLM and SGLang store a DSA
  /// model's fp8 cache as fp8_ds_mla).
  [[nodiscard]] virtual CacheRequest cache_request(const CacheRequest& asked, const model::Model& m,
                                                   const device::Gpu& gpu) const;
  [[nodiscard]] virtual Scheduler scheduler(const device::Gpu& gpu, const EngineSettings& s) const;
  [[nodiscard]] virtual Budget budget(const BudgetInputs& in, Derivation& why) const = 0;
  /// Lays the pool out; fills kv_tokens, block_size, num_blocks, pool_groups and state_slots
  /// of `r`.
  [[nodiscard]] virtual std::unique_ptr<Pool> plan(const PlanInputs& in, CapacityResult& r,
                                                   Derivation& why) const = 0;
  /// What the engine does when one request of its max model length does not fit its pool,
  /// whose longest is `longest` tokens: refuse to start (vLLM, and plain with a length given),
  /// or start and serve shorter requests (SGLang, TensorRT-LLM). Fills r.fits / r.reason or
  /// adds a note.
  virtual void long_model_len(const LongModelLen& at, CapacityResult& r) const;
  /// Why one request that takes `need` does not fit, in the engine's terms ("vLLM refuses to
  /// start with --max-model-len 32,768 or more: ..."); `longest` is the longest that does.
  [[nodiscard]] virtual std::string too_long(const ContextCapacity& need, u64 longest,
                                             const CapacityResult& r) const;
};

[[nodiscard]] const EngineRules& engine_rules(Engine e);

const EngineRules& plain_rules();
const EngineRules& vllm_rules();
const EngineRules& sglang_rules();
const EngineRules& trtllm_rules();

/// `budget` − `used` as a signed count: negative when the used part is larger.
[[nodiscard]] long long signed_difference(u64 budget, u64 used);

/// ⌊bytes · fraction⌋.
[[nodiscard]] u64 floor_times(u64 bytes, double fraction);

/// Per-token groups (not states) of `groups`.
[[nodiscard]] bool is_per_token(const CacheGroup& g);

} // namespace kvcalc::kv::detail
