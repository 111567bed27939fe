// TensorRT-LLM's PyTorch backend, KV cache manager V1, as of 2026: a token budget from the
// estimated bytes per token, blocks of 32 tokens rounded down, every attention layer at the
// full context unless max_attention_window is set, and a hybrid Mamba model's states taken off
// the budget for every batch slot first (docs/formulas.md, "TensorRT-LLM").
//
// Sources, NVIDIA/TensorRT-LLM:
// - tensorrt_llm/_torch/pyexecutor/_util.py @ 00043967: KvCacheCreator (_cal_max_memory: the
//   budget; CacheCost.tokens_for_budget: max((budget − intercept) // slope, 0));
// - tensorrt_llm/_torch/pyexecutor/resource_manager.py (2026): get_cache_size_per_token (the
//   slope: kv_factor · layers · (head_dim · H_kv // tp) · dtype bytes; MLA kv_factor 1, d_c + d_R,
//   not split), get_cache_bytes_per_token (⌈H_kv / tp⌉ heads), calculate_max_num_blocks
//   (int(max_tokens // tokens_per_block));
// - tensorrt_llm/_torch/attention_backend/sparse/dsa.py @ 00e3c1a5: the DSA indexer scales the
//   slope by 1 + (index_head_dim + index_head_dim / 128 · 4) / (d_c + d_R);
// - tensorrt_llm/_torch/pyexecutor/kv_cache/mamba_cache_manager/common.py @ 28295084: the state
//   intercept, (max_batch_size · pp + 1) slots;
// - tensorrt_llm/llmapi/llm_args.py @ 00043967: free_gpu_memory_fraction 0.9, tokens_per_block
//   32, max_batch_size 2048, max_num_tokens 8192.

#include <algorithm>
#include <cmath>

#include <kvcalc/core/units.hpp>

#include "engine_rules.hpp"

using namespace kvcalc::device;
using namespace kvcalc::model;

namespace kvcalc::kv::detail {

namespace {

constexpr u64 k_tokens_per_block = 32;

class TrtllmPool : public Pool {
public:
  TrtllmPool(u64 blocks, u64 block_size, u64 bytes_per_token, u64 state_per_req, u64 slots)
      : m_blocks(blocks), m_block_size(block_size), m_bytes_per_token(bytes_per_token),
        m_state_per_req(state_per_req), m_slots(slots) {}

  [[nodiscard]] ContextCapacity at(u64 tokens) const override {
    ContextCapacity c;
    c.tokens = tokens;
    c.blocks_per_sequence = ceil_div(tokens, m_block_size);
    c.bytes_per_sequence = checked_add(
        checked_mul(checked_mul(c.blocks_per_sequence, m_block_size), m_bytes_per_token),
        m_state_per_req, "bytes per sequence");
    c.max_concurrency = static_cast<double>(m_blocks) / static_cast<double>(c.blocks_per_sequence);
    c.max_sequences = m_blocks / c.blocks_per_sequence;
    if (m_state_per_req > 0) {
      // Every batch slot has its state allocated: no more sequences than slots.
      c.max_concurrency = std::min(c.max_concurrency, static_cast<double>(m_slots));
      c.max_sequences = std::min(c.max_sequences, m_slots);
    }
    return c;
  }

private:
  u64 m_blocks;
  u64 m_block_size;
  u64 m_bytes_per_token; ///< as allocated, every attention layer of this GPU
  u64 m_state_per_req;
  u64 m_slots;
};

/// Bytes of `elements` stored elements as TensorRT-LLM's estimate counts them: nvfp4 with an
/// fp8 scale per 16, every other dtype by its width, no per-token scales.
double estimate_bytes(DType dtype, double elements) {
  if (dtype == DType::nvfp4) {
    return std::ceil(elements / 2) + std::ceil(elements / 16);
  }
  return elements * static_cast<double>(dtype_bits(dtype)) / 8;
}

class TrtllmRules : public EngineRules {
public:
  /// KvCacheCreator lowers max_seq_len to what the pool holds (blocks × tokens_per_block) and
  /// starts, warning "Adjusted max_seq_len".
  void long_model_len(const LongModelLen& at, CapacityResult& r) const override {
    r.notes.push_back("TensorRT-LLM starts and lowers max_seq_len from " +
                      group_digits(at.max_model_len) + " to " + group_digits(at.longest) +
                      ", what its pool holds (blocks × tokens_per_block)");
  }

  [[nodiscard]] std::string too_long(const ContextCapacity& need, u64 longest,
                                     const CapacityResult& /*r*/) const override {
    return "TensorRT-LLM lowers max_seq_len to " + group_digits(longest) +
           " and rejects a request of " + group_digits(need.tokens) + " tokens";
  }

  [[nodiscard]] std::string_view version() const override {
    return "TensorRT-LLM 2026 (tensorrt_llm/_torch/pyexecutor/_util.py @ 00043967)";
  }

  [[nodiscard]] HeadSplit head_split() const override { return HeadSplit::ceiling; }

  /// Conv in the model dtype; the SSM state in the config's mamba_ssm_cache_dtype (Nemotron-H),
  /// not in Qwen3.5's mamba_ssm_dtype (config_utils.py reads only the former).
  [[nodiscard]] StateDtypeDefaults state_dtypes(const Model& m) const override {
    return {std::nullopt, std::nullopt, m.architecture.starts_with("NemotronH")};
  }

  [[nodiscard]] Scheduler scheduler(const Gpu& /*gpu*/, const EngineSettings& s) const override {
    return {s.max_batched_tokens.value_or(8192), s.max_seqs.value_or(2048)};
  }

  [[nodiscard]] Budget budget(const BudgetInputs& in, Derivation& why) const override {
    Budget b;
    b.memory_fraction = in.settings.memory_fraction.value_or(0.9);
    b.budget_bytes = in.gpu.memory_bytes;
    b.non_kv_bytes =
        in.settings.non_kv_bytes.value_or(checked_add(in.weights_per_gpu, in.reserve_bytes));
    long long free_after = signed_difference(in.gpu.memory_bytes, b.non_kv_bytes);
    b.pool_bytes =
        free_after > 0
            ? static_cast<long long>(floor_times(static_cast<u64>(free_after), b.memory_fraction))
            : free_after;
    why.add("TensorRT-LLM: (", bytes(in.gpu.memory_bytes), " − peak ", bytes(b.non_kv_bytes),
            ") × free_gpu_memory_fraction ", frac(b.memory_fraction));
    return b;
  }

  [[nodiscard]] std::unique_ptr<Pool> plan(const PlanInputs& in, CapacityResult& r,
                                           Derivation& why) const override {
    const Model& m = in.model;
    u64 block = in.settings.block_size.value_or(k_tokens_per_block);
    // The slope: what the estimate charges per token; the manager then allocates ⌈H_kv/tp⌉
    // heads, which is more when tp does not divide the heads.
    double slope = 0;
    u64 allocated = 0;
    u64 state_per_req = 0;
    u64 attention_layers = 0;
    bool windowed = false;
    for (const auto& g : in.groups) {
      const CacheSpec& s = g.spec;
      if (s.kind == CacheKind::state) {
        state_per_req = checked_add(state_per_req, checked_mul(g.layers, s.state_bytes));
        continue;
      }
      if (s.kind == CacheKind::indexer) {
        continue; // folded into the MLA term below, as dsa.py does
      }
      windowed = windowed || s.kind == CacheKind::sliding || s.kind == CacheKind::chunked;
      attention_layers += g.layers;
      double layers = static_cast<double>(g.layers);
      if (s.mla && s.format.mla_format != MlaCacheFormat::expanded) {
        double width = static_cast<double>(s.k_width);
        double factor = 1;
        if (m.indexer) {
          u64 index = m.indexer->head_dim + m.indexer->head_dim / 128 * 4;
          factor += static_cast<double>(index) / width;
        }
        slope += estimate_bytes(s.format.dtype, layers * width) * factor;
        allocated = checked_add(
            allocated,
            static_cast<u64>(std::ceil(estimate_bytes(s.format.dtype, layers * width) * factor)));
      } else {
        const Attention& a =
            attention_of(m, s.kind == CacheKind::sliding ? LayerType::sliding : LayerType::full);
        u64 per_rank = a.head_dim * a.kv_heads / in.attention_tp;
        slope += estimate_bytes(s.format.dtype, 2 * layers * static_cast<double>(per_rank));
        allocated = checked_add(allocated, checked_mul(g.layers, s.bytes_per_token));
      }
    }
    u64 slope_bytes = static_cast<u64>(slope);
    u64 intercept = 0;
    if (state_per_req > 0) {
      intercept = checked_mul(checked_add(checked_mul(in.scheduler.max_seqs, in.parallel.pp), 1),
                              state_per_req);
    }
    u64 budget = in.pool_bytes > intercept ? in.pool_bytes - intercept : 0;
    u64 max_tokens = slope_bytes ? budget / slope_bytes : 0;
    if (allocated > 0) {
      max_tokens = std::min(max_tokens, budget / allocated);
    }
    r.block_size = block;
    r.kv_tokens = max_tokens;
    r.num_blocks = max_tokens / block;
    r.state_slots = state_per_req ? in.scheduler.max_seqs : 0;
    if (attention_layers > 0) {
      r.pool_groups.push_back(
          {"attention", attention_layers, 1, block, allocated * block, r.num_blocks});
    }
    if (state_per_req > 0) {
      u64 layers = 0;
      for (const auto& g : in.groups) {
        layers += g.spec.kind == CacheKind::state ? g.layers : 0;
      }
      r.pool_groups.push_back({"state", layers, 1, 0, state_per_req, r.state_slots});
      why.add("TensorRT-LLM: states of (max_batch_size ", num(in.scheduler.max_seqs), " × pp ",
              num(in.parallel.pp), " + 1) slots × ", bytes(state_per_req), " = ", bytes(intercept),
              " off the budget");
    }
    if (attention_layers > 0) {
      r.sequence_pools.push_back(
          {"blocks", "blocks", r.num_blocks, {{CacheKind::full, 0, block, 1}}});
    }
    if (state_per_req > 0) {
      r.sequence_pools.push_back({"state", "slots", r.state_slots, {{CacheKind::state, 0, 1, 1}}});
    }
    if (state_per_req > 0 && intercept >= in.pool_bytes) {
      r.notes.push_back("TensorRT-LLM sets a state aside for each of max_batch_size " +
                        group_digits(in.scheduler.max_seqs) + " slots (+1) first, " +
                        group_digits(intercept) +
                        " B, which leaves no memory for the KV cache; "
                        "a smaller --max-seqs (max_batch_size) leaves some");
    }
    if (windowed) {
      r.notes.push_back("TensorRT-LLM's KV cache manager V1 holds sliding and chunked layers at "
                        "the full context unless max_attention_window is set; they are counted "
                        "so");
    }
    why.add("TensorRT-LLM: max tokens = ", bytes(budget), " // ", bytes(slope_bytes),
            " per token = ", num(max_tokens), "; blocks of ", num(block), ": ", num(r.num_blocks),
            " (rounded down)");
    return std::make_unique<TrtllmPool>(r.num_blocks, block, allocated, state_per_req,
                                        r.state_slots);
  }
};

} // namespace

const EngineRules& trtllm_rules() {
  static const TrtllmRules rules;
  return rules;
}

} // namespace kvcalc::kv::detail
