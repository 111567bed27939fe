#include <kvcalc/kv/capacity.hpp>

#include <algorithm>
#include <cmath>

#include <kvcalc/core/spell.hpp>
#include <kvcalc/core/units.hpp>
#include <kvcalc/kv/footprint.hpp>

namespace kvcalc {

std::string_view engine_name(Engine e) {
  switch (e) {
  case Engine::plain:
    return "plain";
  case Engine::vllm:
    return "vllm";
  case Engine::sglang:
    return "sglang";
  case Engine::trtllm:
    return "trtllm";
  }
  return "?";
}

Engine parse_engine(std::string_view text) {
  for (Engine e : {Engine::plain, Engine::vllm, Engine::sglang, Engine::trtllm}) {
    if (text == engine_name(e)) {
      return e;
    }
  }
  static const std::vector<std::string> names{"plain", "vllm", "sglang", "trtllm"};
  throw InputError("unknown engine '" + std::string(text) + "'" + did_you_mean(text, names) +
                   " (one of: plain, vllm, sglang, trtllm)");
}

namespace {

constexpr u64 k_mib = 1ULL << 20;
constexpr u64 k_gib = 1ULL << 30;
/// CUDA context, cuBLAS workspaces and communicator buffers outside the framework's allocator
/// (docs/formulas.md, "Non-KV reserve").
constexpr u64 k_runtime_bytes = 512 * k_mib;

std::string g(u64 v) {
  return group_digits(v);
}

std::string fraction_text(double f) {
  std::string s = std::to_string(f);
  while (s.size() > 1 && s.back() == '0') {
    s.pop_back();
  }
  return s.back() == '.' ? s + "0" : s;
}

u64 floor_times(u64 bytes, double fraction) {
  return static_cast<u64>(std::floor(static_cast<double>(bytes) * fraction));
}

/// The model as one GPU sees it: its pipeline stage's layers and its share of the KV heads.
struct RankView {
  Model model;            ///< layers and heads of one rank
  u64 full_layers = 0;    ///< attention layers holding every token
  u64 sliding_layers = 0; ///< attention layers holding a window
  u64 linear_layers = 0;
  u64 rate_per_layer = 0; ///< KV bytes per token per attention layer on this rank
};

RankView rank_view(const Model& m, const CacheFormat& format, u64 attention_tp, u64 pp,
                   Engine engine) {
  RankView v{m, 0, 0, 0, 0};
  Attention& a = v.model.attention;
  if (a.kind != AttentionKind::mla || format.mla_format == MlaCacheFormat::expanded) {
    u64 kv = a.kv_heads;
    if (kv % attention_tp != 0 && attention_tp % kv != 0) {
      throw InputError(m.name + ": " + std::to_string(kv) +
                       " KV heads cannot be split over tensor parallel " +
                       std::to_string(attention_tp) +
                       "; use a tp that divides the KV heads or a multiple of them");
    }
    // vLLM and SGLang floor (at least 1: replicated when tp > KV heads); TensorRT-LLM rounds up.
    a.kv_heads =
        engine == Engine::trtllm ? ceil_div(kv, attention_tp) : std::max<u64>(1, kv / attention_tp);
    a.heads = std::max<u64>(1, a.heads / attention_tp);
  }
  if (v.model.linear_state) {
    // A linear layer's heads are split over tensor parallelism as attention's are (vLLM's
    // gated_delta_net_state_shape divides the key and value heads, and so every term of the
    // state, by tp): each rank holds 1/tp of the state.
    v.model.linear_state->elements = ceil_div(m.linear_state->elements, attention_tp);
  }
  // The busiest pipeline stage: ⌈layers / pp⌉ layers, the model's pattern from its start.
  u64 stage = ceil_div(m.layers, pp);
  v.model.layers = stage;
  v.model.layer_types.resize(stage);
  for (LayerType t : v.model.layer_types) {
    (t == LayerType::full      ? v.full_layers
     : t == LayerType::sliding ? v.sliding_layers
                               : v.linear_layers)++;
  }
  v.rate_per_layer = kv_bytes_per_token_per_layer(v.model, format);
  return v;
}

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

/// vLLM's KV cache groups of a full + sliding model (hybrid allocator, v0.10 to v0.20): the
/// layer count per group, and how many groups of each kind.
struct VllmGroups {
  u64 group_size = 0;
  u64 full_groups = 0;
  u64 sliding_groups = 0;
};

VllmGroups vllm_groups(u64 full, u64 sliding) {
  if (full == 0 || sliding == 0) {
    return {full + sliding, full ? 1u : 0u, sliding ? 1u : 0u};
  }
  u64 low = std::min(full, sliding);
  u64 high = std::max(full, sliding);
  // Groups take the smaller layer count, or the larger when they are within 1.25x.
  u64 size = 4 * high < 5 * low ? high : low;
  return {size, ceil_div(full, size), ceil_div(sliding, size)};
}

} // namespace

double sglang_mem_fraction_static(const Gpu& gpu, u64 tp, u64 pp, bool dp_attention) {
  double mem = static_cast<double>(gpu.memory_bytes / k_mib); // nvidia-smi MiB
  double chunk = 0;
  double graph_bs = 0;
  bool small_tp = tp < 4;
  if (mem < 20 * 1024) {
    chunk = 2048, graph_bs = 8;
  } else if (mem < 35 * 1024) {
    chunk = 2048, graph_bs = small_tp ? 16 : 80;
  } else if (mem < 60 * 1024) {
    chunk = 4096, graph_bs = small_tp ? 32 : 160;
  } else if (mem < 160 * 1024) {
    chunk = 8192, graph_bs = small_tp ? 256 : 512;
  } else {
    chunk = 16384, graph_bs = 512;
  }
  double reserved =
      512 + std::max(chunk, 2048.0) * 1.5 + graph_bs * 2 + static_cast<double>(tp * pp) / 8 * 1024;
  if (dp_attention) {
    reserved += graph_bs * static_cast<double>(tp) * 3;
  }
  if (mem > 60 * 1024) {
    reserved = std::max(reserved, 10240.0);
  }
  return std::round((mem - reserved) / mem * 1000) / 1000;
}

namespace {

/// SGLang's chunked_prefill_size for this GPU (the same table as its mem_fraction_static).
u64 sglang_chunk(const Gpu& gpu) {
  u64 mem = gpu.memory_bytes / k_mib;
  return mem < 35 * 1024 ? 2048 : mem < 60 * 1024 ? 4096 : mem < 160 * 1024 ? 8192 : 16384;
}

} // namespace

namespace {

/// What the pool of one engine holds, and what one sequence of L tokens takes from it.
struct Allocation {
  Engine engine = Engine::plain;
  const Model* model = nullptr;
  RankView rank;
  CacheFormat format;
  u64 pool = 0;       ///< bytes per GPU
  u64 block_size = 0; ///< 0: token-granular
  u64 dcp = 1;
  u64 max_batched = 0;
  VllmGroups groups;      ///< vLLM
  u64 num_blocks = 0;     ///< vLLM, TensorRT-LLM
  u64 full_tokens = 0;    ///< SGLang: tokens of the full-attention pool
  u64 sliding_tokens = 0; ///< SGLang: tokens of the sliding-window pool

  /// One sequence of `tokens` tokens; max_sequences is per pool here.
  [[nodiscard]] ContextCapacity at(u64 tokens) const {
    ContextCapacity c;
    c.tokens = tokens;
    const Model& rm = rank.model;
    u64 window = model->sliding_window;
    switch (engine) {
    case Engine::vllm: {
      // max_memory_usage_bytes of each group, in blocks (kv_cache_utils.py).
      u64 full = ceil_div(ceil_div(tokens, dcp), block_size);
      u64 sliding = 0;
      if (groups.sliding_groups > 0) {
        sliding = ceil_div(std::min(window - 1 + max_batched, tokens), block_size) + 1;
      }
      c.blocks_per_sequence = checked_add(checked_mul(groups.full_groups, full),
                                          checked_mul(groups.sliding_groups, sliding));
      c.bytes_per_sequence = checked_mul(checked_mul(c.blocks_per_sequence, block_size),
                                         checked_mul(rank.rate_per_layer, groups.group_size));
      c.max_concurrency =
          static_cast<double>(num_blocks) / static_cast<double>(c.blocks_per_sequence);
      c.max_sequences = num_blocks / c.blocks_per_sequence;
      break;
    }
    case Engine::sglang: {
      u64 held_sliding = window ? std::min(tokens, window) : 0;
      c.bytes_per_sequence = checked_add(
          checked_mul(tokens, checked_mul(rank.rate_per_layer, rank.full_layers)),
          checked_mul(held_sliding, checked_mul(rank.rate_per_layer, rank.sliding_layers)));
      double by_full =
          rank.full_layers ? static_cast<double>(full_tokens) / static_cast<double>(tokens) : 1e300;
      double by_sliding = rank.sliding_layers ? static_cast<double>(sliding_tokens) /
                                                    static_cast<double>(held_sliding)
                                              : 1e300;
      c.max_concurrency = std::min(by_full, by_sliding);
      c.max_sequences = std::min(rank.full_layers ? full_tokens / tokens : UINT64_MAX,
                                 rank.sliding_layers ? sliding_tokens / held_sliding : UINT64_MAX);
      break;
    }
    case Engine::trtllm: {
      c.blocks_per_sequence = ceil_div(tokens, block_size);
      c.bytes_per_sequence = checked_mul(
          checked_mul(c.blocks_per_sequence, block_size),
          checked_mul(rank.rate_per_layer, checked_add(rank.full_layers, rank.sliding_layers)));
      c.max_concurrency =
          static_cast<double>(num_blocks) / static_cast<double>(c.blocks_per_sequence);
      c.max_sequences = num_blocks / c.blocks_per_sequence;
      break;
    }
    case Engine::plain: {
      FootprintOptions o;
      o.contexts = {ceil_div(tokens, dcp)};
      o.block_size = block_size;
      Footprint f = compute_footprint(rm, o);
      c.bytes_per_sequence = block_size ? f.contexts[0].paged_kv_bytes : f.contexts[0].kv_bytes;
      if (block_size) {
        c.blocks_per_sequence = ceil_div(ceil_div(tokens, dcp), block_size);
      }
      c.max_concurrency = static_cast<double>(pool) / static_cast<double>(c.bytes_per_sequence);
      c.max_sequences = pool / c.bytes_per_sequence;
      break;
    }
    }
    (void)format;
    return c;
  }
};

} // namespace

CapacityResult compute_capacity(const CapacityRequest& req) {
  const Model& m = req.model;
  const Gpu& gpu = req.gpu;
  const EngineSettings& es = req.engine;
  CapacityResult r;
  r.engine = es.engine;
  r.gpu = gpu.name;
  r.memory_bytes = gpu.memory_bytes;
  auto& why = r.derivation;

  // Parallelism.
  Parallelism p = req.parallel;
  if (p.tp == 0 || p.pp == 0 || p.dcp == 0) {
    throw InputError("--tp, --pp and --dcp must be at least 1");
  }
  u64 copy = checked_mul(p.tp, p.pp);
  p.gpus = p.gpus == 0 ? copy : p.gpus;
  if (p.gpus % copy != 0) {
    throw InputError("--gpus " + g(p.gpus) + " is not a multiple of tp × pp = " + g(copy) +
                     "; each model copy needs tp × pp GPUs");
  }
  bool mla = m.attention.kind == AttentionKind::mla;
  if (p.dcp > 1) {
    if (p.tp % p.dcp != 0) {
      throw InputError("--dcp " + g(p.dcp) + " must divide --tp " + g(p.tp) +
                       " (decode context parallel reuses the TP group)");
    }
    if (!mla) {
      throw InputError("--dcp applies to MLA models; " + m.name + " is " +
                       std::string(attention_kind_name(m.attention.kind)));
    }
    if (p.dp_attention) {
      throw InputError("--dcp and --dp-attention are two ways to stop replicating the MLA "
                       "cache; choose one");
    }
    if (m.sliding_window != 0) {
      throw InputError("--dcp does not apply to models with sliding-window layers");
    }
  }
  if (p.pp > m.layers) {
    throw InputError("--pp " + g(p.pp) + " is more pipeline stages than " + m.name + "'s " +
                     g(m.layers) + " layers; each stage needs at least one");
  }
  p.ep = p.ep == 0 ? p.tp : p.ep;
  if (p.ep > p.gpus) {
    throw InputError("--ep " + g(p.ep) + " exceeds the " + g(p.gpus) + " GPUs");
  }

  r.parallel = p;
  r.replicas = p.gpus / copy;
  u64 attention_tp = p.dp_attention ? 1 : p.tp;
  r.kv_pools = checked_mul(r.replicas, p.dp_attention ? p.tp : 1);

  // Weights on the busiest GPU of one copy.
  ParamCount params = count_params(m);
  r.weight_dtype = req.weight_dtype.value_or(m.weight_dtype.value_or(m.dtype));
  WeightSharding sharding{p.tp, attention_tp, p.pp, p.ep, req.mtp};
  WeightBytes weights = weight_bytes(m, params, r.weight_dtype, sharding);
  r.weights_bytes_per_gpu = weights.per_gpu;
  why.push_back("weights: " + g(params.main + (req.mtp ? params.mtp : 0)) + " parameters = " +
                g(weights.total) + " B in " + std::string(dtype_name(r.weight_dtype)) +
                " (scales included); on one GPU with tp " + g(p.tp) + ", pp " + g(p.pp) + ", ep " +
                g(p.ep) + (p.dp_attention ? ", attention replicated (dp-attention)" : "") + ": " +
                g(weights.per_gpu) + " B");

  // The cache as one GPU holds it.
  r.cache = resolve_cache_format(req.cache, m);
  Model kv_model = m;
  if (req.mtp && m.mtp_layers > 0) {
    // The MTP draft layer keeps its own KV cache, like a full-attention layer.
    kv_model.layers += m.mtp_layers;
    kv_model.layer_types.insert(kv_model.layer_types.end(), m.mtp_layers, LayerType::full);
  }
  Allocation a;
  a.engine = es.engine;
  a.model = &m;
  a.rank = rank_view(kv_model, r.cache, attention_tp, p.pp, es.engine);
  a.format = r.cache;
  a.dcp = p.dcp;
  const RankView& rank = a.rank;
  u64 attention_layers = rank.full_layers + rank.sliding_layers;
  r.kv_bytes_per_token_per_gpu = checked_mul(rank.rate_per_layer, attention_layers);
  bool latent = mla && r.cache.mla_format != MlaCacheFormat::expanded;
  why.push_back("KV per token on one GPU: " + g(attention_layers) + " attention layers × " +
                g(rank.rate_per_layer) + " B (" + describe(r.cache) +
                (latent ? ", the whole latent on every TP rank"
                        : ", " + g(rank.model.attention.kv_heads) + " of " +
                              g(m.attention.kv_heads) + " KV heads") +
                ") = " + g(r.kv_bytes_per_token_per_gpu) + " B");
  if (rank.linear_layers > 0 && es.engine != Engine::plain) {
    throw InputError(m.name + " has linear-attention layers, whose state pools " +
                     std::string(engine_name(es.engine)) +
                     " sizes by rules kvcalc does not model; use --engine plain");
  }
  if (rank.linear_layers > 0) {
    const LinearState& state = *rank.model.linear_state;
    u64 per_layer = dtype_storage_bytes(state.dtype, state.elements);
    why.push_back("linear state per sequence on one GPU: " + g(rank.linear_layers) +
                  " linear layers × " + g(state.elements) + " elements (" +
                  g(m.linear_state->elements) + " over tp " + g(attention_tp) + ") × " +
                  std::to_string(dtype_bits(state.dtype)) +
                  " bit = " + g(checked_mul(per_layer, rank.linear_layers, "state bytes")) +
                  " B, whatever the context");
  }
  if (es.engine == Engine::trtllm && rank.sliding_layers > 0) {
    r.notes.push_back("TensorRT-LLM's variable sliding window is not modelled: its sliding layers "
                      "are counted at the full context");
  }

  // Engine defaults: vLLM's scheduler defaults (arg_utils.py) for `vllm serve`.
  bool big_gpu = gpu.memory_bytes >= 70 * k_gib && gpu.name.find("a100") == std::string::npos;
  u64 max_seqs = es.max_seqs.value_or(es.engine == Engine::vllm && big_gpu ? 1024 : 256);
  r.max_seqs = max_seqs;
  switch (es.engine) {
  case Engine::vllm:
    r.max_batched_tokens = es.max_batched_tokens.value_or(big_gpu ? 8192 : 2048);
    break;
  case Engine::sglang:
    r.max_batched_tokens = es.max_batched_tokens.value_or(sglang_chunk(gpu));
    break;
  default:
    r.max_batched_tokens = es.max_batched_tokens.value_or(8192);
    break;
  }
  a.max_batched = r.max_batched_tokens;
  u64 reserve = es.reserve_bytes.value_or(
      checked_add(activation_estimate(m, r.max_batched_tokens, max_seqs, p.tp), k_runtime_bytes));
  r.non_kv_estimated = !es.reserve_bytes && !es.non_kv_bytes && !es.kv_cache_bytes;

  // The pool per GPU.
  if (es.non_kv_bytes && *es.non_kv_bytes < weights.per_gpu) {
    // A warning, not an error: an engine's log of another rank, or of a checkpoint quantized
    // differently, may come in under kvcalc's weights of the busiest GPU.
    r.notes.push_back("the non-KV memory given (--non-kv-memory, a plan's non_kv_memory), " +
                      g(*es.non_kv_bytes) + " B, is less than kvcalc's weights on one GPU (" +
                      g(weights.per_gpu) +
                      " B): it is all the memory besides the KV cache, weights included; to "
                      "give only what comes on top of the weights, use --reserve (reserve)");
  }
  u64 non_kv = es.non_kv_bytes.value_or(checked_add(weights.per_gpu, reserve));
  auto signed_pool = [](u64 budget, u64 used) {
    return budget >= used ? static_cast<long long>(budget - used)
                          : -static_cast<long long>(used - budget);
  };
  long long pool = 0;
  switch (es.engine) {
  case Engine::vllm:
    r.memory_fraction = es.memory_fraction.value_or(0.9);
    r.budget_bytes = floor_times(gpu.memory_bytes, r.memory_fraction);
    pool = signed_pool(r.budget_bytes, non_kv);
    why.push_back("vLLM: requested = " + g(gpu.memory_bytes) + " B × gpu_memory_utilization " +
                  fraction_text(r.memory_fraction) + " = " + g(r.budget_bytes) +
                  " B; minus non-KV " + g(non_kv) + " B" +
                  (es.non_kv_bytes ? " (given)" : " (weights + activation/runtime reserve)"));
    break;
  case Engine::sglang: {
    r.memory_fraction =
        es.memory_fraction.value_or(sglang_mem_fraction_static(gpu, p.tp, p.pp, p.dp_attention));
    // SGLang measures free memory after start-up; the runtime reserve stands for what the
    // CUDA context took by then. Activations live outside the static fraction.
    u64 free_at_start = gpu.memory_bytes - std::min(gpu.memory_bytes, k_runtime_bytes);
    r.budget_bytes = floor_times(free_at_start, r.memory_fraction);
    non_kv = es.non_kv_bytes.value_or(weights.per_gpu);
    r.non_kv_estimated = false;
    pool = signed_pool(r.budget_bytes, non_kv);
    why.push_back("SGLang: free at start " + g(free_at_start) + " B × mem_fraction_static " +
                  fraction_text(r.memory_fraction) + " = " + g(r.budget_bytes) + " B; minus " +
                  (es.non_kv_bytes ? "the given non-KV " : "weights ") + g(non_kv) + " B");
    break;
  }
  case Engine::trtllm: {
    r.memory_fraction = es.memory_fraction.value_or(0.9);
    r.budget_bytes = gpu.memory_bytes;
    long long free_after = signed_pool(gpu.memory_bytes, non_kv);
    pool =
        free_after > 0
            ? static_cast<long long>(floor_times(static_cast<u64>(free_after), r.memory_fraction))
            : free_after;
    why.push_back("TensorRT-LLM: (" + g(gpu.memory_bytes) + " B − peak " + g(non_kv) +
                  " B) × free_gpu_memory_fraction " + fraction_text(r.memory_fraction));
    break;
  }
  case Engine::plain:
    r.budget_bytes = gpu.memory_bytes;
    pool = signed_pool(gpu.memory_bytes, non_kv);
    why.push_back("plain: " + g(gpu.memory_bytes) + " B usable − non-KV " + g(non_kv) +
                  " B (weights + " + (es.reserve_bytes ? "given reserve" : "reserve estimate") +
                  ")");
    break;
  }
  r.other_non_kv_bytes_per_gpu = non_kv - std::min(non_kv, weights.per_gpu);
  if (es.kv_cache_bytes) {
    if (*es.kv_cache_bytes == 0 || *es.kv_cache_bytes > gpu.memory_bytes) {
      throw InputError("the KV pool given (--kv-cache-memory, a plan's kv_cache_memory), " +
                       g(*es.kv_cache_bytes) + " B, must be above 0 and at most the GPU's " +
                       g(gpu.memory_bytes) + " B");
    }
    pool = static_cast<long long>(*es.kv_cache_bytes);
    why.push_back("KV pool given: " + g(*es.kv_cache_bytes) + " B per GPU");
  }
  if (weights.per_gpu > gpu.memory_bytes) {
    r.fits = false;
    r.reason = "the weights alone (" + g(weights.per_gpu) + " B per GPU) exceed the " +
               g(gpu.memory_bytes) + " B of a " + gpu.name +
               "; use more GPUs (--tp, --pp) or a smaller --weight-dtype";
  } else if (pool <= 0) {
    r.fits = false;
    r.reason = "nothing is left for the KV cache: non-KV memory (" + g(non_kv) +
               " B per GPU) takes the whole budget (" + g(r.budget_bytes) + " B)";
  }
  a.pool = pool > 0 ? static_cast<u64>(pool) : 0;
  r.kv_pool_bytes_per_gpu = a.pool;

  // Tokens and blocks of the pool.
  switch (es.engine) {
  case Engine::vllm: {
    a.block_size = es.block_size.value_or(latent ? (gpu.architecture == "hopper"      ? 64
                                                    : gpu.architecture == "blackwell" ? 128
                                                                                      : 16)
                                                 : 16);
    a.groups = vllm_groups(rank.full_layers, rank.sliding_layers);
    u64 page = checked_mul(a.block_size, rank.rate_per_layer);
    a.num_blocks = a.pool / page / a.groups.group_size;
    u64 n_groups = a.groups.full_groups + a.groups.sliding_groups;
    r.kv_tokens = checked_mul(a.num_blocks / n_groups * a.block_size, p.dcp);
    why.push_back("vLLM: page = block " + g(a.block_size) + " × " + g(rank.rate_per_layer) +
                  " B = " + g(page) + " B; num_blocks = " + g(a.pool) + " // " + g(page) + " // " +
                  g(a.groups.group_size) + " layers per group = " + g(a.num_blocks) +
                  (n_groups > 1
                       ? " shared by " + g(n_groups) + " groups (" + g(a.groups.full_groups) +
                             " full, " + g(a.groups.sliding_groups) + " sliding)"
                       : "") +
                  "; GPU KV cache size " + g(r.kv_tokens) + " tokens");
    break;
  }
  case Engine::sglang: {
    a.block_size = es.block_size.value_or(1);
    u64 cell = checked_mul(rank.rate_per_layer, attention_layers);
    u64 tokens = a.pool / cell / a.block_size * a.block_size;
    a.full_tokens = tokens;
    if (rank.full_layers > 0 && rank.sliding_layers > 0) {
      // Hybrid SWA pools: full = tokens × layers / (0.8 × sliding + full); sliding = 0.8 × full.
      double full =
          static_cast<double>(tokens) * static_cast<double>(attention_layers) /
          (0.8 * static_cast<double>(rank.sliding_layers) + static_cast<double>(rank.full_layers));
      a.full_tokens = static_cast<u64>(full);
      a.sliding_tokens = static_cast<u64>(static_cast<double>(a.full_tokens) * 0.8);
    } else if (rank.full_layers == 0) {
      a.sliding_tokens = tokens;
    }
    r.kv_tokens = a.full_tokens ? a.full_tokens : a.sliding_tokens;
    why.push_back(
        "SGLang: cell = " + g(cell) + " B per token; max_total_num_tokens = " + g(a.pool) + " // " +
        g(cell) + " = " + g(tokens) +
        (a.sliding_tokens && a.full_tokens ? " (split: " + g(a.full_tokens) + " full, " +
                                                 g(a.sliding_tokens) + " sliding, ratio 0.8)"
                                           : ""));
    break;
  }
  case Engine::trtllm: {
    a.block_size = es.block_size.value_or(32);
    u64 per_token = r.kv_bytes_per_token_per_gpu;
    u64 tokens = a.pool / per_token;
    a.num_blocks = ceil_div(tokens, a.block_size);
    r.kv_tokens = tokens;
    why.push_back("TensorRT-LLM: max tokens = " + g(a.pool) + " // " + g(per_token) + " = " +
                  g(tokens) + "; blocks of " + g(a.block_size) + ": " + g(a.num_blocks));
    break;
  }
  case Engine::plain:
    a.block_size = es.block_size.value_or(0);
    r.kv_tokens = r.kv_bytes_per_token_per_gpu ? a.pool / r.kv_bytes_per_token_per_gpu * p.dcp : 0;
    why.push_back("plain: " + g(a.pool) + " B // " + g(r.kv_bytes_per_token_per_gpu) +
                  " B per token = " + g(r.kv_tokens) + " tokens");
    break;
  }
  r.block_size = es.engine == Engine::sglang && a.block_size == 1 ? 0 : a.block_size;
  r.num_blocks = a.num_blocks;
  if (p.dcp > 1) {
    why.push_back("decode context parallel " + g(p.dcp) + ": each rank holds 1/" + g(p.dcp) +
                  " of every sequence's tokens");
  }

  // Sequences at each context, over the whole deployment.
  auto deployment = [&](ContextCapacity c) {
    c.max_sequences = r.fits ? checked_mul(c.max_sequences, r.kv_pools) : 0;
    if (!r.fits) {
      c.max_concurrency = 0;
    }
    return c;
  };
  for (u64 tokens : req.contexts) {
    r.contexts.push_back(deployment(a.at(tokens)));
    if (m.max_context && tokens > m.max_context) {
      r.notes.push_back(m.name + ": context " + g(tokens) + " exceeds its max_context of " +
                        g(m.max_context) + " tokens");
    }
  }
  if (r.kv_pools > 1) {
    why.push_back("sequences: per pool × " + g(r.kv_pools) + " pools (" + g(r.replicas) +
                  " model copies" +
                  (p.dp_attention ? " × " + g(p.tp) + " attention-DP ranks" : "") + ")");
  }
  u64 seqs_cap = max_seqs;
  for (const auto& c : r.contexts) {
    if (es.engine != Engine::plain && c.max_sequences / r.kv_pools > seqs_cap) {
      r.notes.push_back("at " + g(c.tokens) +
                        " tokens the KV cache holds more sequences per pool "
                        "than the scheduler runs at once (max_num_seqs " +
                        g(seqs_cap) + ")");
      break;
    }
  }

  // The longest context that still holds N sequences: sequences only fall as contexts grow.
  if (req.max_context_at && r.fits) {
    u64 want = *req.max_context_at;
    u64 limit = m.max_context ? m.max_context : (1ULL << 24);
    auto holds = [&](u64 tokens) { return deployment(a.at(tokens)).max_sequences >= want; };
    if (want == 0) {
      throw InputError("--max-context-at needs at least 1 sequence");
    }
    if (holds(limit)) {
      r.max_context_at = limit;
      r.max_context_capped = true;
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
      r.contexts.push_back(deployment(a.at(*r.max_context_at)));
    }
  }
  return r;
}

} // namespace kvcalc
