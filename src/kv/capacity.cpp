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
  u64 attention_tp = resolved.attention_tp;
  r.kv_pools = resolved.kv_pools;

  // Weights on the busiest GPU of one copy.
  ParamCount params = count_params(m);
  r.weight_dtype = resolved.weight_dtype;
  if (req.mtp && m.mtp_layers == 0) {
    r.notes.push_back("--mtp: " + m.name +
                      " has no multi-token-prediction module; nothing is "
                      "added");
  }
  WeightBytes weights =
      weight_bytes(m, params, req.weight_dtype, weight_sharding(resolved, req.mtp));
  r.weights_bytes_per_gpu = weights.per_gpu;
  // How they are stored: the checkpoint's own layout, tensor by tensor, or one dtype.
  std::string stored = " in " + std::string(dtype_name(r.weight_dtype)) + " (scales included)";
  if (!m.weight_formats.empty() && !req.weight_dtype) {
    std::string main_format;
    u64 largest = 0;
    for (const TensorGroup& t : params.tensors) {
      auto it = m.weight_formats.find(format_key(t));
      if (it != m.weight_formats.end() && t.params() > largest) {
        largest = t.params();
        main_format = describe(it->second);
      }
    }
    stored = " as the " + (m.quantization.empty() ? std::string("model file") : m.quantization) +
             " checkpoint stores them (" + std::to_string(m.weight_formats.size()) +
             " kinds of tensor, the largest " + main_format + "; the rest " +
             std::string(dtype_name(m.dtype)) + ")";
  }
  why.add("weights: ", num(params.main + (req.mtp ? params.mtp : 0)),
          " parameters = ", bytes(weights.total), stored + "; on one GPU with tp ", num(p.tp),
          ", pp ", num(p.pp), ", ep ", num(p.ep),
          m.moe && resolved.expert_tp > 1
              ? " (each expert over " + std::to_string(resolved.expert_tp) + ")"
              : "",
          p.redundant_experts > 0
              ? ", " + std::to_string(resolved.experts_per_rank) + " experts per rank with " +
                    std::to_string(p.redundant_experts) + " redundant"
              : "",
          p.dp_attention ? ", all but the routed experts replicated (dp-attention)" : "", ": ",
          bytes(weights.per_gpu));

  // The cache as one GPU holds it, in the format the engine stores.
  CacheLayout layout;
  layout.cache = rules.cache_request(req.cache, m, gpu);
  layout.attention_tp = attention_tp;
  layout.head_split = rules.head_split();
  layout.pp = p.pp;
  layout.mtp_layers = req.mtp ? m.mtp_layers : 0;
  layout.state_defaults = rules.state_dtypes(m);
  r.cache = resolve_cache_format(layout.cache, m);
  r.cache_groups = cache_groups(m, layout);
  r.kv_bytes_per_token_per_gpu = bytes_per_token(r.cache_groups);
  why.add("the cache on one GPU (attention tp ", num(attention_tp), ", pp ", num(p.pp),
          "), " + describe(r.cache) + ":");
  explain_groups(r.cache_groups, why);
  why.add("KV per token on one GPU: ", bytes(r.kv_bytes_per_token_per_gpu),
          state_bytes(r.cache_groups) ? "; state per sequence: " : "",
          state_bytes(r.cache_groups) ? bytes(state_bytes(r.cache_groups)) : Term(""));

  Scheduler scheduler = rules.scheduler(gpu, es);
  r.max_seqs = scheduler.max_seqs;
  r.max_batched_tokens = scheduler.max_batched_tokens;
  u64 reserve = es.reserve_bytes.value_or(
      checked_add(activation_estimate(m, r.max_batched_tokens, r.max_seqs, p.tp), k_runtime_bytes));

  // The pool per GPU.
  if (es.non_kv_bytes && *es.non_kv_bytes < weights.per_gpu) {
    // A warning, not an error: an engine's log of another rank, or of a checkpoint quantized
    // differently, may come in under kvcalc's weights of the busiest GPU.
    r.notes.push_back("the non-KV memory given (--non-kv-memory, a plan's non_kv_memory), " +
                      group_digits(*es.non_kv_bytes) +
                      " B, is less than kvcalc's weights on one "
                      "GPU (" +
                      group_digits(weights.per_gpu) +
                      " B): it is all the memory besides the KV cache, weights included; to "
                      "give only what comes on top of the weights, use --reserve (reserve)");
  }
  Budget budget = rules.budget({gpu, es, p, weights.per_gpu, reserve}, why);
  r.memory_fraction = budget.memory_fraction;
  r.budget_bytes = budget.budget_bytes;
  r.non_kv_estimated =
      budget.non_kv_estimated && !es.reserve_bytes && !es.non_kv_bytes && !es.kv_cache_bytes;
  r.other_non_kv_bytes_per_gpu =
      budget.non_kv_bytes - std::min(budget.non_kv_bytes, weights.per_gpu);
  long long pool = budget.pool_bytes;
  if (es.kv_cache_bytes) {
    if (*es.kv_cache_bytes == 0 || *es.kv_cache_bytes > gpu.memory_bytes) {
      throw InputError("the KV pool given (--kv-cache-memory, a plan's kv_cache_memory), " +
                       group_digits(*es.kv_cache_bytes) +
                       " B, must be above 0 and at most the "
                       "GPU's " +
                       group_digits(gpu.memory_bytes) + " B");
    }
    pool = static_cast<long long>(*es.kv_cache_bytes);
    why.add("KV pool given: ", bytes(*es.kv_cache_bytes), " per GPU");
  }
  if (weights.per_gpu > gpu.memory_bytes) {
    r.fits = false;
    r.reason = "the weights alone (" + group_digits(weights.per_gpu) + " B per GPU) exceed the " +
               group_digits(gpu.memory_bytes) + " B of a " + gpu.name +
               "; use more GPUs (--tp, --pp) or a smaller --weight-dtype";
  } else if (pool <= 0) {
    r.fits = false;
    r.reason = "nothing is left for the KV cache: non-KV memory (" +
               group_digits(budget.non_kv_bytes) + " B per GPU) takes the whole budget (" +
               group_digits(r.budget_bytes) + " B)";
  }
  r.kv_pool_bytes_per_gpu = pool > 0 ? static_cast<u64>(pool) : 0;

  // The engine's pool over the cache groups.
  PlanInputs plan{m, gpu, es, p, attention_tp, r.cache_groups, r.kv_pool_bytes_per_gpu, scheduler};
  std::unique_ptr<Pool> engine_pool = rules.plan(plan, r, why);
  if (r.fits && r.kv_pool_bytes_per_gpu > 0 && r.kv_tokens == 0 && r.state_slots == 0 &&
      !r.cache_groups.empty()) {
    r.fits = false;
    r.reason = "the KV pool (" + group_digits(r.kv_pool_bytes_per_gpu) +
               " B per GPU) holds no token of " + m.name;
  }

  // One request of the engine's max model length against the pool.
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
  // The longest request one pool holds, up to `cap`: what one sequence needs only grows.
  auto longest_up_to = [&](u64 cap) -> u64 {
    auto holds_one = [&](u64 tokens) { return engine_pool->at(tokens).max_sequences >= 1; };
    if (cap == 0 || !holds_one(1)) {
      return 0;
    }
    u64 lo = 1;
    u64 hi = cap;
    if (holds_one(hi)) {
      return hi;
    }
    while (hi - lo > 1) {
      u64 mid = lo + (hi - lo) / 2;
      (holds_one(mid) ? lo : hi) = mid;
    }
    return lo;
  };
  if (es.max_model_len_auto) {
    // vLLM's auto-fit: the model's length, shortened to what one request can hold.
    u64 fitted = r.fits ? longest_up_to(m.max_context ? m.max_context : k_search_limit) : 0;
    if (r.fits && fitted == 0) {
      r.fits = false;
      r.reason = "--max-model-len auto: not one token of a request fits the KV pool (vLLM: "
                 "\"Cannot auto-fit max_model_len\")";
    }
    r.max_model_len = fitted;
    r.max_model_len_given = fitted > 0;
    if (fitted > 0 && m.max_context && fitted < m.max_context) {
      r.notes.push_back("--max-model-len auto: reduced from " + group_digits(m.max_context) +
                        " to " + group_digits(fitted) + " to fit the KV pool");
    }
  }
  if (r.fits && r.max_model_len > 0) {
    u64 longest = longest_up_to(r.max_model_len);
    r.longest_request = longest;
    if (longest < r.max_model_len) {
      rules.long_model_len(
          {r.max_model_len, r.max_model_len_given, longest, engine_pool->at(r.max_model_len)}, r);
    }
  }

  // Sequences at each context, over the whole deployment.
  auto deployment = [&](ContextCapacity c) {
    c.max_sequences = r.fits ? checked_mul(c.max_sequences, r.kv_pools) : 0;
    if (!r.fits) {
      c.max_concurrency = 0;
    }
    return c;
  };
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
    r.contexts.push_back(deployment(engine_pool->at(tokens)));
    if (r.fits && r.contexts.back().max_sequences == 0) {
      r.notes.push_back(rules.too_long(engine_pool->at(tokens), longest_up_to(tokens), r));
    }
    if (m.max_context && tokens > m.max_context) {
      r.notes.push_back(m.name + ": context " + group_digits(tokens) +
                        " exceeds its max_context of " + group_digits(m.max_context) + " tokens");
    }
  }
  if (r.kv_pools > 1) {
    why.add("sequences: per pool × ", num(r.kv_pools), " pools (", num(r.replicas), " model copies",
            p.dp_attention ? " × " : "", p.dp_attention ? num(p.dp) : Term(""),
            p.dp_attention ? " attention-DP ranks" : "", ")");
  }
  for (const auto& c : r.contexts) {
    if (es.engine != Engine::plain && c.max_sequences / r.kv_pools > r.max_seqs) {
      r.notes.push_back("at " + group_digits(c.tokens) +
                        " tokens the KV cache holds more sequences per pool "
                        "than the scheduler runs at once (max_num_seqs " +
                        group_digits(r.max_seqs) + ")");
      break;
    }
  }

  // The longest context that still holds N sequences: sequences only fall as contexts grow.
  if (req.max_context_at && r.fits) {
    u64 want = *req.max_context_at;
    if (want == 0) {
      throw InputError("--max-context-at needs at least 1 sequence");
    }
    u64 limit = r.max_model_len ? r.max_model_len : k_search_limit;
    auto holds = [&](u64 tokens) {
      return deployment(engine_pool->at(tokens)).max_sequences >= want;
    };
    r.max_context_limited_by = "kv_cache";
    if (holds(limit)) {
      r.max_context_at = limit;
      r.max_context_limited_by = r.max_model_len_given ? "max_model_len"
                                 : r.max_model_len     ? "max_context"
                                                       : "search_limit";
    } else if (holds(1)) {
      u64 lo = 1;
      u64 hi = limit;
      while (hi - lo > 1) {
        u64 mid = lo + (hi - lo) / 2;
        (holds(mid) ? lo : hi) = mid;
      }
      r.max_context_at = lo;
    } else {
      r.max_context_at = 0;
    }
    if (req.contexts.empty() && *r.max_context_at > 0) {
      r.contexts.push_back(deployment(engine_pool->at(*r.max_context_at)));
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
