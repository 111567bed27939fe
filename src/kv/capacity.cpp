// Capacity: the deployment resolved once, the cache of one GPU as layer groups, then one engine's
// rules (engine_*.cpp) for its budget, pool layout and per-sequence need.

#include <kvcalc/kv/capacity.hpp>

#include <algorithm>
#include <cmath>

#include <kvcalc/core/units.hpp>

#include "engine_rules.hpp"

using namespace kvcalc::device;
using namespace kvcalc::model;

namespace kvcalc::kv {

std::string_view engine_name(Engine e) {
  return k_engines.name(e);
}

Engine parse_engine(std::string_view text) {
  if (auto e = k_engines.find_any_case(text)) {
    return *e;
  }
  throw InputError(k_engines.unknown(text));
}

u64 SequencePool::units_at(u64 tokens) const {
  u64 total = 0;
  for (const PoolTerm& t : terms) {
    u64 blocks = 0;
    switch (t.kind) {
    case CacheKind::full:
    case CacheKind::indexer:
      blocks = ceil_div(tokens, t.block_size);
      break;
    case CacheKind::sliding:
      // The blocks the window (tokens − window, tokens] overlaps; those before it are freed.
      if (tokens > 0) {
        u64 first = tokens > t.window ? (tokens - t.window) / t.block_size : 0;
        blocks = (tokens - 1) / t.block_size - first + 1;
      }
      break;
    case CacheKind::chunked:
      if (tokens > 0) {
        u64 start = (tokens - 1) / t.window * t.window;
        blocks = ceil_div(tokens - start, t.block_size);
      }
      break;
    case CacheKind::state:
      blocks = 1;
      break;
    }
    total = checked_add(total, checked_mul(blocks, t.units_per_block), "pool units");
  }
  return total;
}

u64 SequencePool::stable_until(u64 tokens) const {
  auto saturating = [](u64 a, u64 b) { return a > ~u64{0} - b ? ~u64{0} : a + b; };
  u64 until = ~u64{0};
  for (const PoolTerm& t : terms) {
    u64 bound = ~u64{0};
    switch (t.kind) {
    case CacheKind::full:
    case CacheKind::indexer:
      // The same blocks until the last one is full.
      bound = ceil_div(tokens, t.block_size) * t.block_size;
      break;
    case CacheKind::sliding:
      if (tokens > 0) {
        // The last block stays until it is full; the first until the window leaves it.
        u64 first = tokens > t.window ? (tokens - t.window) / t.block_size : 0;
        u64 last_full = ((tokens - 1) / t.block_size + 1) * t.block_size;
        bound = std::min(last_full, saturating((first + 1) * t.block_size, t.window - 1));
      } else {
        bound = 0;
      }
      break;
    case CacheKind::chunked:
      if (tokens > 0) {
        u64 start = (tokens - 1) / t.window * t.window;
        bound = std::min(saturating(start, ceil_div(tokens - start, t.block_size) * t.block_size),
                         saturating(start, t.window));
      } else {
        bound = 0;
      }
      break;
    case CacheKind::state:
      break;
    }
    until = std::min(until, bound);
  }
  return until;
}

u64 SequencePool::prefix_units(u64 blocks) const {
  u64 total = 0;
  for (const PoolTerm& t : terms) {
    if (t.kind == CacheKind::full || t.kind == CacheKind::indexer) {
      total = checked_add(total, checked_mul(blocks, t.units_per_block), "pool units");
    }
  }
  return total;
}

u64 SequencePool::prefix_block_size() const {
  for (const PoolTerm& t : terms) {
    if (t.kind == CacheKind::full || t.kind == CacheKind::indexer) {
      return t.block_size;
    }
  }
  return 0;
}

namespace detail {

long long signed_difference(u64 budget, u64 used) {
  return budget >= used ? static_cast<long long>(budget - used)
                        : -static_cast<long long>(used - budget);
}

u64 floor_times(u64 bytes, double fraction) {
  return static_cast<u64>(std::floor(static_cast<double>(bytes) * fraction));
}

bool is_per_token(const CacheGroup& g) {
  return g.spec.kind != CacheKind::state;
}

CacheRequest EngineRules::cache_request(const CacheRequest& asked, const Model& /*m*/,
                                        const Gpu& /*gpu*/) const {
  return asked;
}

Scheduler EngineRules::scheduler(const Gpu& /*gpu*/, const EngineSettings& s) const {
  return {s.max_batched_tokens.value_or(8192), s.max_seqs.value_or(256)};
}

void EngineRules::long_model_len(const LongModelLen& at, CapacityResult& r) const {
  // No engine: a length given is a requirement, the model's own a remark.
  std::string what = "one request of " + group_digits(at.max_model_len) + " tokens (" +
                     (at.given ? "--max-model-len" : "the model's max_context") +
                     ") does not fit in the KV pool: the longest is " + group_digits(at.longest) +
                     " tokens";
  if (at.given) {
    r.fits = false;
    r.reason = what;
  } else {
    r.notes.push_back(what);
  }
}

std::string EngineRules::too_long(const ContextCapacity& need, u64 longest,
                                  const CapacityResult& /*r*/) const {
  return "one sequence of " + group_digits(need.tokens) +
         " tokens does not fit in the KV pool: the longest is " + group_digits(longest) + " tokens";
}

const EngineRules& engine_rules(Engine e) {
  switch (e) {
  case Engine::vllm:
    return vllm_rules();
  case Engine::sglang:
    return sglang_rules();
  case Engine::trtllm:
    return trtllm_rules();
  case Engine::plain:
    break;
  }
  return plain_rules();
}

} // namespace detail

namespace {

using namespace detail;

/// Where --max-context-at stops when the model gives no length: 16M tokens.
constexpr u64 k_search_limit = 1ULL << 24;

/// A documented estimate of the activation peak of one step of `tokens` tokens on one GPU:
/// residual and normed hidden states plus the widest intermediate, in the activation dtype,
/// and fp32 logits for up to `seqs` sequences (docs/formulas.md, "Non-KV reserve").
u64 activation_estimate(const Model& m, u64 tokens, u64 seqs, u64 tp) {
  u64 width = m.mlp.intermediate_size;
  if (m.moe) {
    width = std::max({width, checked_mul(m.moe->experts_per_token, m.moe->expert_intermediate_size),
                      m.moe->shared_expert_intermediate_size});
  }
  u64 gate = m.mlp.kind == MlpKind::gated ? 2 : 1;
  u64 per_token = checked_add(4 * m.hidden_size, ceil_div(checked_mul(gate, width), tp));
  u64 act_bytes = dtype_storage_bytes(m.dtype, 1);
  u64 hidden = checked_mul(checked_mul(tokens, per_token), act_bytes);
  u64 logits = checked_mul(checked_mul(std::min(tokens, seqs), ceil_div(m.vocab_size, tp)), 4);
  return checked_add(hidden, logits);
}

/// How the weights are stored, as the derivation says it: the checkpoint's own layout, tensor
/// by tensor (`dtype_given` false and the model has one), or the one dtype `dtype`.
std::string weight_storage(const Model& m, const ParamCount& params, bool dtype_given,
                           DType dtype) {
  if (m.weight_formats.empty() || dtype_given) {
    return " in " + std::string(dtype_name(dtype)) + " (scales included)";
  }
  std::string main_format;
  u64 largest = 0;
  for (const TensorGroup& t : params.tensors) {
    auto it = m.weight_formats.find(format_key(t));
    if (it != m.weight_formats.end() && t.params() > largest) {
      largest = t.params();
      main_format = describe(it->second);
    }
  }
  return " as the " + (m.quantization.empty() ? std::string("model file") : m.quantization) +
         " checkpoint stores them (" + std::to_string(m.weight_formats.size()) +
         " kinds of tensor, the largest " + main_format + "; the rest " +
         std::string(dtype_name(m.dtype)) + ")";
}

/// The weights on the busiest GPU of one copy of deployment `d`; a note when --mtp finds no
/// module to load.
WeightBytes weights_on_one_gpu(const CapacityRequest& req, const Deployment& d,
                               std::vector<std::string>& notes, Derivation& why) {
  const Model& m = req.model;
  const Parallelism& p = d.parallel;
  ParamCount params = count_params(m);
  if (req.mtp && m.mtp_layers == 0) {
    notes.push_back("--mtp: " + m.name +
                    " has no multi-token-prediction module; nothing is "
                    "added");
  }
  WeightBytes weights = weight_bytes(m, params, req.weight_dtype, weight_sharding(d, req.mtp));
  why.add("weights: ", num(params.main + (req.mtp ? params.mtp : 0)),
          " parameters = ", bytes(weights.total),
          weight_storage(m, params, req.weight_dtype.has_value(), d.weight_dtype) +
              "; on one GPU with tp ",
          num(p.tp), ", pp ", num(p.pp), ", ep ", num(p.ep),
          m.moe && d.expert_tp > 1 ? " (each expert over " + std::to_string(d.expert_tp) + ")" : "",
          p.redundant_experts > 0
              ? ", " + std::to_string(d.experts_per_rank) + " experts per rank with " +
                    std::to_string(p.redundant_experts) + " redundant"
              : "",
          p.dp_attention ? ", all but the routed experts replicated (dp-attention)" : "", ": ",
          bytes(weights.per_gpu));
  return weights;
}

/// The cache as one GPU holds it, in the format the engine stores.
struct GpuCache {
  CacheFormat format;
  std::vector<CacheGroup> groups;
  u64 bytes_per_token = 0; ///< KV per token on one GPU, every layer at the full rate
};

/// The cache of one GPU of deployment `d`, and its derivation.
GpuCache cache_on_one_gpu(const CapacityRequest& req, const EngineRules& rules, const Deployment& d,
                          Derivation& why) {
  const Model& m = req.model;
  CacheLayout layout;
  layout.cache = rules.cache_request(req.cache, m, req.gpu);
  layout.attention_tp = d.attention_tp;
  layout.head_split = rules.head_split();
  layout.pp = d.parallel.pp;
  layout.mtp_layers = req.mtp ? m.mtp_layers : 0;
  layout.state_defaults = rules.state_dtypes(m);
  GpuCache c{resolve_cache_format(layout.cache, m), cache_groups(m, layout), 0};
  c.bytes_per_token = bytes_per_token(c.groups);
  u64 state = state_bytes(c.groups);
  why.add("the cache on one GPU (attention tp ", num(d.attention_tp), ", pp ", num(d.parallel.pp),
          "), " + describe(c.format) + ":");
  explain_groups(c.groups, why);
  why.add("KV per token on one GPU: ", bytes(c.bytes_per_token),
          state ? "; state per sequence: " : "", state ? bytes(state) : Term(""));
  return c;
}

/// What one GPU keeps besides the weights: --reserve, else the activations of one step of the
/// scheduler's size and the runtime (docs/formulas.md, "Non-KV reserve").
u64 non_kv_reserve(const Model& m, const EngineSettings& es, const Scheduler& s, u64 tp) {
  return es.reserve_bytes.value_or(
      checked_add(activation_estimate(m, s.max_batched_tokens, s.max_seqs, tp), k_runtime_bytes));
}

/// The engine's budget on one GPU and the KV pool it leaves, or the pool --kv-cache-memory
/// gives; non_kv_estimated only when nothing the engine measured was given. A note when the
/// non-KV memory given is under kvcalc's weights.
Budget kv_pool_budget(const EngineRules& rules, const BudgetInputs& in,
                      std::vector<std::string>& notes, Derivation& why) {
  const EngineSettings& es = in.settings;
  if (es.non_kv_bytes && *es.non_kv_bytes < in.weights_per_gpu) {
    // A warning, not an error: an engine's log of another rank, or of a checkpoint quantized
    // differently, may come in under kvcalc's weights of the busiest GPU.
    notes.push_back("the non-KV memory given (--non-kv-memory, a plan's non_kv_memory), " +
                    group_digits(*es.non_kv_bytes) +
                    " B, is less than kvcalc's weights on one "
                    "GPU (" +
                    group_digits(in.weights_per_gpu) +
                    " B): it is all the memory besides the KV cache, weights included; to "
                    "give only what comes on top of the weights, use --reserve (reserve)");
  }
  Budget b = rules.budget(in, why);
  b.non_kv_estimated =
      b.non_kv_estimated && !es.reserve_bytes && !es.non_kv_bytes && !es.kv_cache_bytes;
  if (es.kv_cache_bytes) {
    if (*es.kv_cache_bytes == 0 || *es.kv_cache_bytes > in.gpu.memory_bytes) {
      throw InputError("the KV pool given (--kv-cache-memory, a plan's kv_cache_memory), " +
                       group_digits(*es.kv_cache_bytes) +
                       " B, must be above 0 and at most the "
                       "GPU's " +
                       group_digits(in.gpu.memory_bytes) + " B");
    }
    b.pool_bytes = static_cast<long long>(*es.kv_cache_bytes);
    why.add("KV pool given: ", bytes(*es.kv_cache_bytes), " per GPU");
  }
  return b;
}

/// Why nothing is left for the KV cache under budget `b`, if so.
std::optional<std::string> no_room_for_kv(const Gpu& gpu, u64 weights_per_gpu, const Budget& b) {
  if (weights_per_gpu > gpu.memory_bytes) {
    return "the weights alone (" + group_digits(weights_per_gpu) + " B per GPU) exceed the " +
           group_digits(gpu.memory_bytes) + " B of a " + gpu.name +
           "; use more GPUs (--tp, --pp) or a smaller --weight-dtype";
  }
  if (b.pool_bytes <= 0) {
    return "nothing is left for the KV cache: non-KV memory (" + group_digits(b.non_kv_bytes) +
           " B per GPU) takes the whole budget (" + group_digits(b.budget_bytes) + " B)";
  }
  return std::nullopt;
}

/// The largest L in [lo, hi) at which `holds`, given that it holds at lo and not at hi and only
/// fails as L grows: a bisection.
template <class Holds> u64 last_holding(u64 lo, u64 hi, const Holds& holds) {
  while (hi - lo > 1) {
    u64 mid = lo + (hi - lo) / 2;
    (holds(mid) ? lo : hi) = mid;
  }
  return lo;
}

/// The longest request one pool holds, up to `cap` tokens (0: none).
u64 longest_request(const Pool& pool, u64 cap) {
  auto holds_one = [&](u64 tokens) { return pool.at(tokens).max_sequences >= 1; };
  if (cap == 0 || !holds_one(1)) {
    return 0;
  }
  return holds_one(cap) ? cap : last_holding(1, cap, holds_one);
}

/// One pool's capacity at a context, over the whole deployment of `r`: its sequences in every
/// pool, none when the deployment does not fit.
ContextCapacity over_deployment(ContextCapacity c, const CapacityResult& r) {
  c.max_sequences = r.fits ? checked_mul(c.max_sequences, r.kv_pools) : 0;
  if (!r.fits) {
    c.max_concurrency = 0;
  }
  return c;
}

/// vLLM's auto-fit (--max-model-len auto): the model's length, shortened to the longest request
/// one pool holds; refuses when not one token of a request fits.
void auto_fit_max_model_len(const Model& m, const Pool& pool, CapacityResult& r) {
  u64 fitted = r.fits ? longest_request(pool, m.max_context ? m.max_context : k_search_limit) : 0;
  if (r.fits && fitted == 0) {
    r.fits = false;
    r.reason = "--max-model-len auto: not one token of a request fits the KV pool (vLLM: "
               "\"Cannot auto-fit max_model_len\")";
  }
  r.max_model_len = fitted;
  r.max_model_len_given = fitted > 0;
  if (fitted > 0 && m.max_context && fitted < m.max_context) {
    r.notes.push_back("--max-model-len auto: reduced from " + group_digits(m.max_context) + " to " +
                      group_digits(fitted) + " to fit the KV pool");
  }
}

/// One request of the engine's max model length against the pool: sets max_model_len (given,
/// auto-fitted, or the model's) and longest_request, and lets the engine's rules say what it
/// does when that request does not fit (rules.long_model_len).
void check_max_model_len(const CapacityRequest& req, const EngineRules& rules, const Pool& pool,
                         CapacityResult& r) {
  const Model& m = req.model;
  const EngineSettings& es = req.engine;
  if (es.max_model_len && *es.max_model_len == 0) {
    throw InputError("--max-model-len (a plan's max_model_len) must be at least 1 token");
  }
  r.max_model_len = es.max_model_len.value_or(m.max_context);
  r.max_model_len_given = es.max_model_len.has_value();
  if (es.max_model_len && m.max_context && *es.max_model_len > m.max_context) {
    r.notes.push_back("--max-model-len " + group_digits(*es.max_model_len) +
                      " is above the model's max_context of " + group_digits(m.max_context) +
                      ": vLLM refuses it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1, and the model "
                      "was not trained that long");
  }
  if (es.max_model_len_auto) {
    auto_fit_max_model_len(m, pool, r);
  }
  if (r.fits && r.max_model_len > 0) {
    u64 longest = longest_request(pool, r.max_model_len);
    r.longest_request = longest;
    if (longest < r.max_model_len) {
      rules.long_model_len(
          {r.max_model_len, r.max_model_len_given, longest, pool.at(r.max_model_len)}, r);
    }
  }
}

/// The note when some context holds more sequences per pool than the scheduler runs at once.
std::optional<std::string> scheduler_limit_note(const CapacityResult& r) {
  for (const auto& c : r.contexts) {
    if (r.engine != Engine::plain && c.max_sequences / r.kv_pools > r.max_seqs) {
      return "at " + group_digits(c.tokens) +
             " tokens the KV cache holds more sequences per pool "
             "than the scheduler runs at once (max_num_seqs " +
             group_digits(r.max_seqs) + ")";
    }
  }
  return std::nullopt;
}

/// Sequences at each context asked (with --max-model-len auto and none asked, at the length it
/// fitted), over the whole deployment, into r.contexts, with the notes on them.
void sequences_at_contexts(const CapacityRequest& req, const EngineRules& rules, const Pool& pool,
                           CapacityResult& r, Derivation& why) {
  const Model& m = req.model;
  const EngineSettings& es = req.engine;
  std::vector<u64> contexts = req.contexts;
  if (es.max_model_len_auto && contexts.empty() && !req.max_context_at && r.max_model_len > 0) {
    contexts.push_back(r.max_model_len); // the length it fitted
  }
  for (u64 tokens : contexts) {
    if (r.max_model_len_given && !es.max_model_len_auto && tokens > r.max_model_len) {
      throw InputError("context " + group_digits(tokens) + " exceeds --max-model-len " +
                       group_digits(r.max_model_len) +
                       " (a plan's max_model_len): the engine rejects longer requests; ask for "
                       "contexts up to it, or raise it");
    }
    ContextCapacity& at = r.contexts.emplace_back(over_deployment(pool.at(tokens), r));
    if (r.fits && at.max_sequences == 0) {
      at.too_long = rules.too_long(pool.at(tokens), longest_request(pool, tokens), r);
      r.notes.push_back(at.too_long);
    }
    if (m.max_context && tokens > m.max_context) {
      r.notes.push_back(m.name + ": context " + group_digits(tokens) +
                        " exceeds its max_context of " + group_digits(m.max_context) + " tokens");
    }
  }
  const Parallelism& p = r.parallel;
  if (r.kv_pools > 1) {
    why.add("sequences: per pool × ", num(r.kv_pools), " pools (", num(r.replicas), " model copies",
            p.dp_attention ? " × " : "", p.dp_attention ? num(p.dp) : Term(""),
            p.dp_attention ? " attention-DP ranks" : "", ")");
  }
  if (std::optional<std::string> note = scheduler_limit_note(r)) {
    r.notes.push_back(std::move(*note));
  }
}

/// The longest context at which the deployment still holds some number of sequences, and what
/// ends it (CapacityResult::max_context_limited_by).
struct LongestContext {
  u64 tokens = 0; ///< 0: not even one token
  std::string limited_by;
};

/// The longest context, up to the engine's max model length, at which the deployment of `r`
/// holds `want` sequences: sequences only fall as contexts grow.
LongestContext longest_context_at(u64 want, const Pool& pool, const CapacityResult& r) {
  if (want == 0) {
    throw InputError("--max-context-at needs at least 1 sequence");
  }
  u64 limit = r.max_model_len ? r.max_model_len : k_search_limit;
  auto holds = [&](u64 tokens) {
    return over_deployment(pool.at(tokens), r).max_sequences >= want;
  };
  if (holds(limit)) {
    return {limit, r.max_model_len_given ? "max_model_len"
                   : r.max_model_len     ? "max_context"
                                         : "search_limit"};
  }
  return {holds(1) ? last_holding(1, limit, holds) : 0, "kv_cache"};
}

} // namespace

CapacityResult compute_capacity(const CapacityRequest& req) {
  const Model& m = req.model;
  const Gpu& gpu = req.gpu;
  const EngineSettings& es = req.engine;
  const EngineRules& rules = engine_rules(es.engine);
  CapacityResult r;
  r.engine = es.engine;
  r.engine_rules = std::string(rules.version());
  r.gpu = gpu.name;
  r.memory_bytes = gpu.memory_bytes;
  r.derivation = Derivation(req.explain);
  Derivation& why = r.derivation;

  Deployment resolved = resolve_deployment(m, req.parallel, req.weight_dtype);
  const Parallelism& p = resolved.parallel;
  r.parallel = p;
  r.replicas = resolved.replicas;
  r.kv_pools = resolved.kv_pools;
  r.weight_dtype = resolved.weight_dtype;

  WeightBytes weights = weights_on_one_gpu(req, resolved, r.notes, why);
  r.weights_bytes_per_gpu = weights.per_gpu;

  GpuCache cache = cache_on_one_gpu(req, rules, resolved, why);
  r.cache = cache.format;
  r.cache_groups = std::move(cache.groups);
  r.kv_bytes_per_token_per_gpu = cache.bytes_per_token;

  Scheduler scheduler = rules.scheduler(gpu, es);
  r.max_seqs = scheduler.max_seqs;
  r.max_batched_tokens = scheduler.max_batched_tokens;
  u64 reserve = non_kv_reserve(m, es, scheduler, p.tp);

  Budget budget = kv_pool_budget(rules, {gpu, es, p, weights.per_gpu, reserve}, r.notes, why);
  r.memory_fraction = budget.memory_fraction;
  r.budget_bytes = budget.budget_bytes;
  r.non_kv_estimated = budget.non_kv_estimated;
  r.other_non_kv_bytes_per_gpu =
      budget.non_kv_bytes - std::min(budget.non_kv_bytes, weights.per_gpu);
  if (std::optional<std::string> reason = no_room_for_kv(gpu, weights.per_gpu, budget)) {
    r.fits = false;
    r.reason = std::move(*reason);
  }
  r.kv_pool_bytes_per_gpu = budget.pool_bytes > 0 ? static_cast<u64>(budget.pool_bytes) : 0;

  // The engine's pool over the cache groups: kv_tokens, blocks, pool groups, state slots.
  PlanInputs plan{
      m, gpu, es, p, resolved.attention_tp, r.cache_groups, r.kv_pool_bytes_per_gpu, scheduler};
  std::unique_ptr<Pool> pool = rules.plan(plan, r, why);
  if (r.fits && r.kv_pool_bytes_per_gpu > 0 && r.kv_tokens == 0 && r.state_slots == 0 &&
      !r.cache_groups.empty()) {
    r.fits = false;
    r.reason = "the KV pool (" + group_digits(r.kv_pool_bytes_per_gpu) +
               " B per GPU) holds no token of " + m.name;
  }

  check_max_model_len(req, rules, *pool, r);
  sequences_at_contexts(req, rules, *pool, r, why);
  if (req.max_context_at && r.fits) {
    LongestContext at = longest_context_at(*req.max_context_at, *pool, r);
    r.max_context_at = at.tokens;
    r.max_context_limited_by = std::move(at.limited_by);
    if (req.contexts.empty() && at.tokens > 0) {
      r.contexts.push_back(over_deployment(pool->at(at.tokens), r));
    }
  }
  return r;
}

bool holds_every_context(const CapacityResult& r) {
  if (!r.fits) {
    return false;
  }
  if (r.max_context_at && *r.max_context_at == 0) {
    return false;
  }
  return std::all_of(r.contexts.begin(), r.contexts.end(),
                     [](const ContextCapacity& c) { return c.max_sequences > 0; });
}

std::optional<Parallelism> smallest_fitting_tp(const CapacityRequest& request) {
  CapacityRequest q = request;
  q.explain = false;
  for (u64 tp = request.parallel.tp * 2; tp <= 64; tp *= 2) {
    q.parallel.tp = tp;
    q.parallel.gpus = tp * q.parallel.pp;
    if (q.parallel.dp_attention) {
      q.parallel.dp = tp;
      q.parallel.ep = 0;
    }
    try {
      if (holds_every_context(compute_capacity(q))) {
        return q.parallel;
      }
    } catch (const InputError&) {
      // This tp does not divide the heads: try the next.
    }
  }
  return std::nullopt;
}

} // namespace kvcalc::kv
