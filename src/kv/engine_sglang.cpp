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

class SglangPool : public Pool {
public:
  u64 full_tokens = 0;   ///< tokens of the full-attention pool (or the only pool)
  u64 swa_tokens = 0;    ///< tokens of the sliding-window pool; 0 without one
  u64 window = 0;        ///< tokens a windowed layer holds
  u64 full_cell = 0;     ///< bytes per token of the full pool
  u64 swa_cell = 0;      ///< bytes per token of the sliding pool
  u64 state_per_req = 0; ///< bytes of one sequence's state
  u64 state_slots = 0;   ///< K
  bool separate_swa = false;

  [[nodiscard]] ContextCapacity at(u64 tokens) const override {
    ContextCapacity c;
    c.tokens = tokens;
    u64 held_swa = separate_swa ? std::min(tokens, window) : 0;
    c.bytes_per_sequence =
        checked_add(checked_add(checked_mul(tokens, full_cell), checked_mul(held_swa, swa_cell)),
                    state_per_req, "bytes per sequence");
    double concurrency = 1e300;
    u64 sequences = UINT64_MAX;
    if (full_cell > 0) {
      concurrency = static_cast<double>(full_tokens) / static_cast<double>(tokens);
      sequences = full_tokens / tokens;
    }
    if (separate_swa && swa_cell > 0) {
      concurrency =
          std::min(concurrency, static_cast<double>(swa_tokens) / static_cast<double>(held_swa));
      sequences = std::min(sequences, swa_tokens / held_swa);
    }
    if (state_per_req > 0) {
      u64 by_state = state_slots / k_mamba_slots_per_request;
      concurrency = std::min(concurrency, static_cast<double>(by_state));
      sequences = std::min(sequences, by_state);
    }
    c.max_concurrency = sequences == UINT64_MAX ? 0 : concurrency;
    c.max_sequences = sequences == UINT64_MAX ? 0 : sequences;
    return c;
  }
};

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
    auto pool = std::make_unique<SglangPool>();
    const Model& m = in.model;
    bool sparse = m.indexer.has_value();
    u64 page =
        in.settings.block_size.value_or(sparse || in.gpu.architecture == "blackwell" ? 64 : 1);
    auto align = [page](u64 tokens) { return tokens / page * page; };
    bool listed = std::find(k_hybrid_swa_architectures.begin(), k_hybrid_swa_architectures.end(),
                            m.architecture) != k_hybrid_swa_architectures.end();
    u64 full_cell = 0;
    u64 swa_cell = 0;
    for (const auto& g : in.groups) {
      if (g.spec.kind == CacheKind::state) {
        pool->state_per_req =
            checked_add(pool->state_per_req, checked_mul(g.layers, g.spec.state_bytes));
        continue;
      }
      u64 bytes_per_token = checked_mul(g.layers, g.spec.bytes_per_token);
      if (listed && windowed(g)) {
        swa_cell = checked_add(swa_cell, bytes_per_token);
        pool->window = g.spec.window;
      } else {
        full_cell = checked_add(full_cell, bytes_per_token);
      }
    }
    pool->separate_swa = swa_cell > 0;

    // A hybrid linear / Mamba model first sets state slots aside: K from r / (1 + r) of the
    // rest, K + 1 slots charged (slot 0 pads).
    u64 rest = in.pool_bytes;
    if (pool->state_per_req > 0) {
      double share =
          static_cast<double>(rest) * k_mamba_full_memory_ratio / (1 + k_mamba_full_memory_ratio);
      double per = static_cast<double>(pool->state_per_req);
      double slots = std::floor((share - per) / per);
      pool->state_slots = slots > 0 ? static_cast<u64>(slots) : 0;
      u64 taken = checked_mul(pool->state_slots + 1, pool->state_per_req);
      rest = rest > taken ? rest - taken : 0;
      why.add("SGLang: state pool K = ⌊(", bytes(in.pool_bytes), " × 0.9 / 1.9 − ",
              bytes(pool->state_per_req), ") / ", bytes(pool->state_per_req),
              "⌋ = ", num(pool->state_slots), " slots (K + 1 charged); ", bytes(rest),
              " left for KV");
    }
    if (swa_cell > 0 && full_cell > 0) {
      double cell =
          static_cast<double>(full_cell) + k_swa_full_tokens_ratio * static_cast<double>(swa_cell);
      pool->full_tokens = align(static_cast<u64>(std::floor(static_cast<double>(rest) / cell)));
      pool->swa_tokens =
          align(static_cast<u64>(static_cast<double>(pool->full_tokens) * k_swa_full_tokens_ratio));
      why.add("SGLang hybrid SWA: cell = ", bytes(full_cell), " + 0.8 × ", bytes(swa_cell),
              "; full = ", bytes(rest), " // cell = ", num(pool->full_tokens),
              " tokens, sliding = 0.8 × full = ", num(pool->swa_tokens), " (pages of ", num(page),
              ")");
    } else if (swa_cell > 0) {
      pool->swa_tokens = align(rest / swa_cell);
      why.add("SGLang: sliding pool = ", bytes(rest), " // ", bytes(swa_cell), " = ",
              num(pool->swa_tokens), " tokens");
    } else if (full_cell > 0) {
      pool->full_tokens = align(rest / full_cell);
      if (why.enabled()) {
        DerivationLine line{"SGLang: cell = ", bytes(full_cell), " per token"};
        if (!listed && has_window(in.groups)) {
          line.emplace_back(" (every layer at the full context: " +
                            (m.architecture.empty() ? std::string("the model names no architecture")
                                                    : m.architecture) +
                            " is not on SGLang's hybrid-SWA list)");
        }
        line.insert(line.end(), {"; max_total_num_tokens = ", bytes(rest), " // ", bytes(full_cell),
                                 " = ", num(pool->full_tokens)});
        if (page > 1) {
          line.insert(line.end(), {" (pages of ", num(page), ")"});
        }
        why.add_line(std::move(line));
      }
    }
    pool->full_cell = full_cell;
    pool->swa_cell = swa_cell;
    r.block_size = page == 1 ? 0 : page;
    r.kv_tokens = pool->full_tokens ? pool->full_tokens : pool->swa_tokens;
    r.state_slots = pool->state_slots;
    if (full_cell > 0) {
      r.pool_groups.push_back({"full", count_kv_layers(in.groups, false, listed), 1, r.block_size,
                               full_cell * page, pool->full_tokens});
    }
    if (swa_cell > 0) {
      r.pool_groups.push_back({"sliding", count_kv_layers(in.groups, true, listed), 1, r.block_size,
                               swa_cell * page, pool->swa_tokens});
    }
    if (pool->state_per_req > 0) {
      u64 layers = 0;
      for (const auto& g : in.groups) {
        layers += g.spec.kind == CacheKind::state ? g.layers : 0;
      }
      r.pool_groups.push_back({"state", layers, 1, 0, pool->state_per_req, pool->state_slots});
    }
    // A serving run draws tokens (in pages) from the full pool, window tokens from the sliding
    // pool, and slots from the state pool.
    if (full_cell > 0) {
      r.sequence_pools.push_back(
          {"full", "tokens", pool->full_tokens, {{CacheKind::full, 0, page, page}}});
    }
    if (swa_cell > 0) {
      r.sequence_pools.push_back({"sliding",
                                  "tokens",
                                  pool->swa_tokens,
                                  {{CacheKind::sliding, pool->window, page, page}}});
    }
    if (pool->state_per_req > 0) {
      r.sequence_pools.push_back({"state",
                                  "slots",
                                  pool->state_slots,
                                  {{CacheKind::state, 0, 1, k_mamba_slots_per_request}}});
    }
    if (!in.settings.max_seqs) {
      // resolve_max_num_reqs: 512 per context of tokens, within [2048, 4096], at most half the
      // tokens; a state pool caps it at K / 3.
      u64 tokens = r.kv_tokens;
      u64 context = m.max_context ? m.max_context : 4096;
      u64 estimate = std::clamp<u64>(
          static_cast<u64>(static_cast<double>(tokens) / static_cast<double>(context) * 512), 2048,
          4096);
      r.max_seqs = std::min(estimate, tokens / 2);
      if (pool->state_per_req > 0) {
        r.max_seqs = std::min(r.max_seqs, pool->state_slots / k_mamba_slots_per_request);
      }
    }
    return pool;
  }

private:
  static bool has_window(const std::vector<CacheGroup>& groups) {
    return std::any_of(groups.begin(), groups.end(), windowed);
  }
  static u64 count_kv_layers(const std::vector<CacheGroup>& groups, bool swa, bool listed) {
    u64 n = 0;
    for (const auto& g : groups) {
      if (g.spec.kind != CacheKind::state && g.spec.kind != CacheKind::indexer &&
          (listed && windowed(g)) == swa) {
        n += g.layers;
      }
    }
    return n;
  }
};

} // namespace

const EngineRules& sglang_rules() {
  static const SglangRules rules;
  return rules;
}

} // namespace detail

} // namespace kvcalc::kv
