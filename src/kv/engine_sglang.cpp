// SGLang's token pools as of v0.5.10 (the pool configurators): a cell of bytes per token over
// the layers that hold KV, a sliding-window pool beside the full one only for the
// architectures it lists, and a state pool for hybrid linear-attention / Mamba models
// (docs/formulas.md, "SGLang").
//
// Sources, sgl-project/sglang:
// - python/sglang/srt/model_executor/pool_configurator.py and
//   mem_cache/kv_cache_configurator.py @ 003fca80: DefaultPoolConfigurator (cell, tokens
//   aligned down to the page), HybridSWAPoolConfigurator (cell = F·n_full + r·S·n_swa, full
//   tokens, sliding = full · r), _handle_max_mamba_cache (state slots K from r/(1 + r) of the
//   rest, r = mamba_full_memory_ratio 0.9, K + 1 slots charged), resolve_max_num_reqs;
// - python/sglang/srt/configs/model_config.py @ 001adf56: is_hybrid_swa_model (the allow-list),
//   get_num_kv_heads (max(1, H_kv // tp));
// - python/sglang/srt/configs/mamba_utils.py @ 02e208de: state shapes; conv bf16, SSM float32
//   unless the checkpoint's mamba_ssm_dtype says otherwise;
// - python/sglang/srt/server_args.py: mem_fraction_static and chunked_prefill_size by GPU
//   memory (v0.5.3+), page size 64 for DSA and for the Blackwell default backends
//   (trtllm_mla, trtllm_mha), DSA's cache dtype (fp8 on Blackwell, bf16 before).

#include <algorithm>
#include <array>
#include <cmath>

#include <kvcalc/core/units.hpp>

#include "engine_rules.hpp"

using namespace kvcalc::device;
using namespace kvcalc::model;

namespace kvcalc::kv {

double sglang_mem_fraction_static(const Gpu& gpu, u64 tp, u64 pp, bool dp_attention) {
  double mem = static_cast<double>(gpu.memory_bytes / detail::k_mib); // nvidia-smi MiB
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

namespace detail {

namespace {

/// The architectures whose sliding layers SGLang keeps in a pool of their own
/// (is_hybrid_swa_model); every other model holds every layer at the full context.
constexpr std::array<std::string_view, 14> k_hybrid_swa_architectures{
    "Llama4ForConditionalGeneration",
    "DeepseekV4ForCausalLM",
    "DeepseekV4ForCausalLMNextN",
    "GptOssForCausalLM",
    "MiMoV2ForCausalLM",
    "MiMoV2FlashForCausalLM",
    "MiMoV2MTP",
    "Step3p5ForCausalLM",
    "Step3p5MTP",
    "Step3p7ForConditionalGeneration",
    "Gemma4ForCausalLM",
    "Gemma4ForConditionalGeneration",
    "Gemma4UnifiedForConditionalGeneration",
    "LagunaForCausalLM"};

constexpr double k_swa_full_tokens_ratio = 0.8;
constexpr double k_mamba_full_memory_ratio = 0.9;
/// Slots a running request holds under the default "no_buffer" scheduling strategy.
constexpr u64 k_mamba_slots_per_request = 3;

u64 sglang_chunk(const Gpu& gpu) {
  u64 mem = gpu.memory_bytes / k_mib;
  return mem < 35 * 1024 ? 2048 : mem < 60 * 1024 ? 4096 : mem < 160 * 1024 ? 8192 : 16384;
}

bool windowed(const CacheGroup& g) {
  return g.spec.kind == CacheKind::sliding || g.spec.kind == CacheKind::chunked;
}

bool has_window(const std::vector<CacheGroup>& groups) {
  return std::any_of(groups.begin(), groups.end(), windowed);
}

/// is_hybrid_swa_model: whether `m`'s sliding layers get a pool of their own.
bool hybrid_swa_listed(const Model& m) {
  return std::find(k_hybrid_swa_architectures.begin(), k_hybrid_swa_architectures.end(),
                   m.architecture) != k_hybrid_swa_architectures.end();
}

/// Layers of the sliding pool (`swa`) or of the full one: states and indexers are in neither.
u64 count_kv_layers(const std::vector<CacheGroup>& groups, bool swa, bool listed) {
  u64 n = 0;
  for (const auto& g : groups) {
    if (g.spec.kind != CacheKind::state && g.spec.kind != CacheKind::indexer &&
        (listed && windowed(g)) == swa) {
      n += g.layers;
    }
  }
  return n;
}

/// What one token and one sequence take from SGLang's pools: the configurators' cells.
struct SglangCells {
  u64 full = 0;   ///< bytes per token of the full-attention pool (or the only pool)
  u64 swa = 0;    ///< bytes per token of the sliding-window pool; 0 without one
  u64 window = 0; ///< tokens a windowed layer holds
  u64 state = 0;  ///< bytes of one sequence's state
};

/// The sizes of SGLang's pools on one GPU.
struct SglangSizes {
  u64 full_tokens = 0; ///< tokens of the full-attention pool (or the only pool)
  u64 swa_tokens = 0;  ///< tokens of the sliding-window pool; 0 without one
  u64 state_slots = 0; ///< K
};

class SglangPool : public Pool {
public:
  SglangPool(SglangCells cells, SglangSizes sizes) : m_cells(cells), m_sizes(sizes) {}

  [[nodiscard]] ContextCapacity at(u64 tokens) const override {
    const SglangCells& k = m_cells;
    ContextCapacity c;
    c.tokens = tokens;
    bool separate_swa = k.swa > 0;
    u64 held_swa = separate_swa ? std::min(tokens, k.window) : 0;
    c.bytes_per_sequence =
        checked_add(checked_add(checked_mul(tokens, k.full), checked_mul(held_swa, k.swa)), k.state,
                    "bytes per sequence");
    double concurrency = 1e300;
    u64 sequences = UINT64_MAX;
    if (k.full > 0) {
      concurrency = static_cast<double>(m_sizes.full_tokens) / static_cast<double>(tokens);
      sequences = m_sizes.full_tokens / tokens;
    }
    if (separate_swa) {
      concurrency = std::min(concurrency, static_cast<double>(m_sizes.swa_tokens) /
                                              static_cast<double>(held_swa));
      sequences = std::min(sequences, m_sizes.swa_tokens / held_swa);
    }
    if (k.state > 0) {
      u64 by_state = m_sizes.state_slots / k_mamba_slots_per_request;
      concurrency = std::min(concurrency, static_cast<double>(by_state));
      sequences = std::min(sequences, by_state);
    }
    c.max_concurrency = sequences == UINT64_MAX ? 0 : concurrency;
    c.max_sequences = sequences == UINT64_MAX ? 0 : sequences;
    return c;
  }

private:
  SglangCells m_cells;
  SglangSizes m_sizes;
};

/// The page in tokens (server_args.py): --block-size or 1; 64 for DSA on CUDA and for the
/// Blackwell default backends (trtllm_mla, trtllm_mha).
u64 page_size(const PlanInputs& in) {
  bool sparse = in.model.indexer.has_value();
  return in.settings.block_size.value_or(sparse || in.gpu.architecture == "blackwell" ? 64 : 1);
}

/// The cells over the groups of one GPU: a state layer holds no KV; a windowed layer is in the
/// sliding cell only for a listed architecture, else in the full one.
SglangCells cell_bytes(const std::vector<CacheGroup>& groups, bool listed) {
  SglangCells c;
  for (const auto& g : groups) {
    if (g.spec.kind == CacheKind::state) {
      c.state = checked_add(c.state, checked_mul(g.layers, g.spec.state_bytes));
      continue;
    }
    u64 bytes_per_token = checked_mul(g.layers, g.spec.bytes_per_token);
    if (listed && windowed(g)) {
      c.swa = checked_add(c.swa, bytes_per_token);
      c.window = g.spec.window;
    } else {
      c.full = checked_add(c.full, bytes_per_token);
    }
  }
  return c;
}

/// The state slots a hybrid linear / Mamba model sets aside first, and what it leaves the KV
/// pools.
struct StateSlots {
  u64 slots = 0; ///< K
  u64 rest = 0;  ///< bytes left for KV
};

/// _handle_max_mamba_cache: K from r / (1 + r) of the pool, K + 1 slots charged (slot 0 pads);
/// no slots and the whole pool without a state.
StateSlots mamba_state_slots(u64 pool_bytes, u64 per_req, Derivation& why) {
  if (per_req == 0) {
    return {0, pool_bytes};
  }
  double share =
      static_cast<double>(pool_bytes) * k_mamba_full_memory_ratio / (1 + k_mamba_full_memory_ratio);
  double per = static_cast<double>(per_req);
  double slots = std::floor((share - per) / per);
  StateSlots s{slots > 0 ? static_cast<u64>(slots) : 0, 0};
  u64 taken = checked_mul(s.slots + 1, per_req);
  s.rest = pool_bytes > taken ? pool_bytes - taken : 0;
  why.add("SGLang: state pool K = ⌊(", bytes(pool_bytes), " × 0.9 / 1.9 − ", bytes(per_req), ") / ",
          bytes(per_req), "⌋ = ", num(s.slots), " slots (K + 1 charged); ", bytes(s.rest),
          " left for KV");
  return s;
}

/// The token pools from what the states leave, aligned down to the page: a listed model's full
/// and sliding pools split it F + r·S, sliding = r · full (HybridSWAPoolConfigurator); else one
/// pool of rest // cell (DefaultPoolConfigurator).
SglangSizes token_pools(const StateSlots& states, const SglangCells& cells, u64 page,
                        const PlanInputs& in, bool listed, Derivation& why) {
  auto align = [page](u64 tokens) { return tokens / page * page; };
  u64 rest = states.rest;
  SglangSizes s;
  s.state_slots = states.slots;
  if (cells.swa > 0 && cells.full > 0) {
    double cell =
        static_cast<double>(cells.full) + k_swa_full_tokens_ratio * static_cast<double>(cells.swa);
    s.full_tokens = align(static_cast<u64>(std::floor(static_cast<double>(rest) / cell)));
    s.swa_tokens =
        align(static_cast<u64>(static_cast<double>(s.full_tokens) * k_swa_full_tokens_ratio));
    why.add("SGLang hybrid SWA: cell = ", bytes(cells.full), " + 0.8 × ", bytes(cells.swa),
            "; full = ", bytes(rest), " // cell = ", num(s.full_tokens),
            " tokens, sliding = 0.8 × full = ", num(s.swa_tokens), " (pages of ", num(page), ")");
  } else if (cells.swa > 0) {
    s.swa_tokens = align(rest / cells.swa);
    why.add("SGLang: sliding pool = ", bytes(rest), " // ", bytes(cells.swa), " = ",
            num(s.swa_tokens), " tokens");
  } else if (cells.full > 0) {
    s.full_tokens = align(rest / cells.full);
    if (why.enabled()) {
      const Model& m = in.model;
      DerivationLine line{"SGLang: cell = ", bytes(cells.full), " per token"};
      if (!listed && has_window(in.groups)) {
        line.emplace_back(" (every layer at the full context: " +
                          (m.architecture.empty() ? std::string("the model names no architecture")
                                                  : m.architecture) +
                          " is not on SGLang's hybrid-SWA list)");
      }
      line.insert(line.end(), {"; max_total_num_tokens = ", bytes(rest), " // ", bytes(cells.full),
                               " = ", num(s.full_tokens)});
      if (page > 1) {
        line.insert(line.end(), {" (pages of ", num(page), ")"});
      }
      why.add_line(std::move(line));
    }
  }
  return s;
}

/// The pools as the capacity JSON gives them: full and sliding in tokens, the state in slots;
/// `block_size` 0 when token-granular.
std::vector<PoolGroup> pool_groups(const std::vector<CacheGroup>& groups, const SglangCells& cells,
                                   const SglangSizes& sizes, u64 page, u64 block_size,
                                   bool listed) {
  std::vector<PoolGroup> out;
  if (cells.full > 0) {
    out.push_back({"full", count_kv_layers(groups, false, listed), 1, block_size, cells.full * page,
                   sizes.full_tokens});
  }
  if (cells.swa > 0) {
    out.push_back({"sliding", count_kv_layers(groups, true, listed), 1, block_size,
                   cells.swa * page, sizes.swa_tokens});
  }
  if (cells.state > 0) {
    u64 layers = 0;
    for (const auto& g : groups) {
      layers += g.spec.kind == CacheKind::state ? g.layers : 0;
    }
    out.push_back({"state", layers, 1, 0, cells.state, sizes.state_slots});
  }
  return out;
}

/// How a serving run draws on the pools: tokens (in pages) from the full pool, window tokens
/// from the sliding pool, and slots from the state pool.
std::vector<SequencePool> sequence_pools(const SglangCells& cells, const SglangSizes& sizes,
                                         u64 page) {
  std::vector<SequencePool> out;
  if (cells.full > 0) {
    out.push_back({"full", "tokens", sizes.full_tokens, {{CacheKind::full, 0, page, page}}});
  }
  if (cells.swa > 0) {
    out.push_back(
        {"sliding", "tokens", sizes.swa_tokens, {{CacheKind::sliding, cells.window, page, page}}});
  }
  if (cells.state > 0) {
    out.push_back({"state",
                   "slots",
                   sizes.state_slots,
                   {{CacheKind::state, 0, 1, k_mamba_slots_per_request}}});
  }
  return out;
}

/// resolve_max_num_reqs: 512 per context of `tokens` tokens, within [2048, 4096], at most half
/// the tokens; a state pool caps it at K / 3.
u64 max_running_requests(u64 tokens, const Model& m, const SglangCells& cells,
                         const SglangSizes& sizes) {
  u64 context = m.max_context ? m.max_context : 4096;
  u64 estimate = std::clamp<u64>(
      static_cast<u64>(static_cast<double>(tokens) / static_cast<double>(context) * 512), 2048,
      4096);
  u64 reqs = std::min(estimate, tokens / 2);
  if (cells.state > 0) {
    reqs = std::min(reqs, sizes.state_slots / k_mamba_slots_per_request);
  }
  return reqs;
}

class SglangRules : public EngineRules {
public:
  /// SGLang starts with a pool shorter than its context length; the scheduler then takes
  /// max_req_len = min(context_len, max_total_num_tokens) − 1 and rejects longer requests.
  void long_model_len(const LongModelLen& at, CapacityResult& r) const override {
    u64 max_req_len = at.longest > 0 ? at.longest - 1 : 0;
    r.notes.push_back("SGLang starts with context length " + group_digits(at.max_model_len) +
                      " though one request takes at most " + group_digits(at.longest) +
                      " tokens of its pool: it rejects requests over " + group_digits(max_req_len) +
                      " tokens (max_req_len = min(context_len, pool) − 1)");
  }

  [[nodiscard]] std::string too_long(const ContextCapacity& need, u64 longest,
                                     const CapacityResult& /*r*/) const override {
    return "SGLang rejects a request of " + group_digits(need.tokens) +
           " tokens: its pool holds one of at most " + group_digits(longest) + " tokens";
  }

  [[nodiscard]] std::string_view version() const override {
    return "SGLang v0.5.10 (srt/model_executor/pool_configurator.py @ 003fca80)";
  }

  [[nodiscard]] StateDtypeDefaults state_dtypes(const Model& /*m*/) const override {
    return {DType::bf16, DType::fp32, true};
  }

  [[nodiscard]] CacheRequest cache_request(const CacheRequest& asked, const Model& m,
                                           const Gpu& gpu) const override {
    CacheRequest r = asked;
    if (!m.indexer || asked.mla_format != MlaCacheFormat::latent || asked.scale ||
        asked.scale_dtype) {
      return r;
    }
    // DSA's cache dtype: fp8 on Blackwell, bf16 before, unless asked; fp8 is stored as the
    // fp8 latent with scales and a bf16 RoPE part.
    DType dtype = asked.dtype.value_or(gpu.architecture == "blackwell" ? DType::fp8_e4m3 : m.dtype);
    if (dtype == DType::fp8_e4m3) {
      r.mla_format = MlaCacheFormat::fp8_ds_mla;
      r.dtype.reset();
    }
    return r;
  }

  [[nodiscard]] Scheduler scheduler(const Gpu& gpu, const EngineSettings& s) const override {
    return {s.max_batched_tokens.value_or(sglang_chunk(gpu)), s.max_seqs.value_or(0)};
  }

  [[nodiscard]] Budget budget(const BudgetInputs& in, Derivation& why) const override {
    Budget b;
    const Parallelism& p = in.parallel;
    b.memory_fraction = in.settings.memory_fraction.value_or(
        sglang_mem_fraction_static(in.gpu, p.tp, p.pp, p.dp_attention));
    // SGLang measures free memory after start-up; the runtime reserve stands for what the
    // CUDA context took by then. Activations live outside the static fraction.
    u64 free_at_start = in.gpu.memory_bytes - std::min(in.gpu.memory_bytes, k_runtime_bytes);
    b.budget_bytes = floor_times(free_at_start, b.memory_fraction);
    b.non_kv_bytes = in.settings.non_kv_bytes.value_or(in.weights_per_gpu);
    b.non_kv_estimated = false;
    b.pool_bytes = signed_difference(b.budget_bytes, b.non_kv_bytes);
    why.add("SGLang: free at start ", bytes(free_at_start), " × mem_fraction_static ",
            frac(b.memory_fraction), " = ", bytes(b.budget_bytes), "; minus ",
            in.settings.non_kv_bytes ? "the given non-KV " : "weights ", bytes(b.non_kv_bytes));
    return b;
  }

  [[nodiscard]] std::unique_ptr<Pool> plan(const PlanInputs& in, CapacityResult& r,
                                           Derivation& why) const override {
    bool listed = hybrid_swa_listed(in.model);
    u64 page = page_size(in);
    SglangCells cells = cell_bytes(in.groups, listed);
    StateSlots states = mamba_state_slots(in.pool_bytes, cells.state, why);
    SglangSizes sizes = token_pools(states, cells, page, in, listed, why);
    r.block_size = page == 1 ? 0 : page;
    r.kv_tokens = sizes.full_tokens ? sizes.full_tokens : sizes.swa_tokens;
    r.state_slots = sizes.state_slots;
    r.pool_groups = pool_groups(in.groups, cells, sizes, page, r.block_size, listed);
    r.sequence_pools = sequence_pools(cells, sizes, page);
    if (!in.settings.max_seqs) {
      r.max_seqs = max_running_requests(r.kv_tokens, in.model, cells, sizes);
    }
    return std::make_unique<SglangPool>(cells, sizes);
  }
};

} // namespace

const EngineRules& sglang_rules() {
  static const SglangRules rules;
  return rules;
}

} // namespace detail

} // namespace kvcalc::kv
