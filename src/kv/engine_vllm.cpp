// vLLM's v1 KV cache manager as of v0.20: one spec per layer, pages unified over the specs,
// layers grouped, blocks shared by the groups (docs/formulas.md, "vLLM").
//
// Sources, vllm-project/vllm:
// - vllm/v1/kv_cache_interface.py @ 001cabc1: page_size_bytes and max_memory_usage_bytes of
//   FullAttentionSpec, SlidingWindowSpec, ChunkedLocalAttentionSpec, MLAAttentionSpec,
//   MambaSpec, UniformTypeKVCacheSpecs;
// - vllm/v1/core/kv_cache_utils.py @ 001cabc1: get_kv_cache_groups,
//   unify_kv_cache_spec_page_size, _get_kv_cache_groups_uniform_page_size (group_size: the
//   smallest layer count, or the largest when it is under 1.5× the smallest, #36684),
//   get_kv_cache_config_from_groups, _report_kv_cache_config;
// - vllm/platforms/interface.py, Platform._align_hybrid_block_size (#37467): the attention
//   block of a hybrid attention + mamba model grows until one page covers a state;
// - vllm/platforms/cuda.py: MLA block sizes (FlashMLA 64 on Hopper, FlashInfer MLA 64 or
//   CUTLASS MLA 128 on Blackwell, FlashMLA-sparse exactly 64);
// - vllm/model_executor/models/config.py, DeepseekV32ForCausalLM.verify_and_update_config: an
//   fp8 cache of DeepSeek-V3.2 is stored as fp8_ds_mla;
// - vllm/v1/core/block_pool.py: the pool holds one null block back from every request;
// - vllm/engine/arg_utils.py: scheduler defaults of `vllm serve`.

#include <algorithm>
#include <array>
#include <numeric>

#include <fmt/format.h>

#include <kvcalc/core/units.hpp>

#include "engine_rules.hpp"

using namespace kvcalc::device;
using namespace kvcalc::model;

namespace kvcalc::kv::detail {

namespace {

/// One kind of vLLM spec over the cache groups of one GPU.
struct VllmSpec {
  const CacheGroup* group = nullptr;
  u64 block_size = 0; ///< tokens per block of this spec
  u64 page = 0;       ///< bytes of one block of one layer
  u64 num_groups = 1; ///< KV cache groups this spec's layers fill
};

/// Blocks one request of `tokens` tokens needs from one group of `s`
/// (max_memory_usage_bytes / page_size_bytes).
u64 pages_for(const VllmSpec& s, u64 tokens, u64 dcp, u64 max_batched, MambaCacheMode mode) {
  const CacheSpec& spec = s.group->spec;
  switch (spec.kind) {
  case CacheKind::full:
  case CacheKind::indexer:
    return ceil_div(ceil_div(tokens, dcp), s.block_size);
  case CacheKind::sliding:
    return ceil_div(std::min(spec.window - 1 + max_batched, tokens), s.block_size) + 1;
  case CacheKind::chunked:
    return ceil_div(std::min(spec.window + max_batched, tokens), s.block_size);
  case CacheKind::state:
    return mode == MambaCacheMode::align ? 2 : 1;
  }
  return 0;
}

class VllmPool : public Pool {
public:
  VllmPool(std::vector<VllmSpec> specs, u64 num_blocks, u64 bytes_per_block, u64 dcp,
           u64 max_batched, MambaCacheMode mode, bool uniform_type)
      : m_specs(std::move(specs)), m_num_blocks(num_blocks), m_bytes_per_block(bytes_per_block),
        m_dcp(dcp), m_max_batched(max_batched), m_mode(mode), m_uniform_type(uniform_type) {}

  [[nodiscard]] ContextCapacity at(u64 tokens) const override {
    ContextCapacity c;
    c.tokens = tokens;
    u64 blocks = 0;
    for (const auto& s : m_specs) {
      u64 pages = pages_for(s, tokens, m_dcp, m_max_batched, m_mode);
      // A uniform-type group allocates one block across all its layers: the most pages any
      // layer needs.
      blocks = m_uniform_type ? std::max(blocks, pages)
                              : checked_add(blocks, checked_mul(s.num_groups, pages));
    }
    c.blocks_per_sequence = blocks;
    c.bytes_per_sequence = checked_mul(blocks, m_bytes_per_block, "bytes per sequence");
    c.max_concurrency = static_cast<double>(m_num_blocks) / static_cast<double>(blocks);
    // The block pool holds one null block back; whole requests fit in the rest.
    c.max_sequences = m_num_blocks > 0 ? (m_num_blocks - 1) / blocks : 0;
    return c;
  }

private:
  std::vector<VllmSpec> m_specs;
  u64 m_num_blocks;
  u64 m_bytes_per_block; ///< one block over every layer it spans
  u64 m_dcp;
  u64 m_max_batched;
  MambaCacheMode m_mode;
  bool m_uniform_type;
};

/// "20.00 GiB", as vLLM's format_gib prints memory.
std::string gib(u64 bytes) {
  return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / static_cast<double>(k_gib));
}

/// What vLLM's start-up check finds short for one request that takes `need`.
std::string shortfall(const ContextCapacity& need, u64 longest, const CapacityResult& r) {
  u64 usable = r.num_blocks > 0 ? r.num_blocks - 1 : 0;
  return "one request of " + group_digits(need.tokens) + " tokens takes " +
         group_digits(need.blocks_per_sequence) + " blocks (" + gib(need.bytes_per_sequence) +
         " of KV cache), more than the " + group_digits(usable) + " of the " +
         group_digits(r.num_blocks) + "-block pool (" + gib(r.kv_pool_bytes_per_gpu) +
         ") left after the null block; " +
         (longest > 0 ? "the estimated maximum model length is " + group_digits(longest) +
                            " (--max-model-len " + std::to_string(longest) + ")"
                      : std::string("not one token of a request fits"));
}

bool big_gpu(const Gpu& gpu) {
  return gpu.memory_bytes >= 70 * k_gib && gpu.name.find("a100") == std::string::npos;
}

bool latent_mla(const CacheGroup& g) {
  return g.spec.mla && g.spec.format.mla_format != MlaCacheFormat::expanded;
}

class VllmRules : public EngineRules {
public:
  /// _check_enough_kv_cache_memory: one request of max_model_len must fit in the blocks left
  /// after the null block, or vLLM stops at start-up with the estimate it prints.
  void long_model_len(const LongModelLen& at, CapacityResult& r) const override {
    if (at.given) {
      r.fits = false;
      r.reason = "vLLM refuses to start: " + shortfall(at.need, at.longest, r);
    } else {
      r.notes.push_back("vLLM started without --max-model-len takes the model's " +
                        group_digits(at.max_model_len) +
                        " tokens and refuses to start: " + shortfall(at.need, at.longest, r));
    }
  }

  [[nodiscard]] std::string too_long(const ContextCapacity& need, u64 longest,
                                     const CapacityResult& r) const override {
    return "vLLM refuses to start with --max-model-len " + group_digits(need.tokens) +
           " or more: " + shortfall(need, longest, r);
  }

  [[nodiscard]] std::string_view version() const override {
    return "vLLM v0.20 (vllm/v1/core/kv_cache_utils.py @ 001cabc1)";
  }

  /// `auto` is the model dtype for every part; the checkpoint's own SSM dtype counts only for the
  /// architectures whose config hook reads it (models/config.py: NemotronHForCausalLMConfig,
  /// Qwen3_5ForConditionalGenerationConfig); a Qwen3.5 served as Qwen3_5ForCausalLM keeps bf16.
  [[nodiscard]] StateDtypeDefaults state_dtypes(const Model& m) const override {
    static constexpr std::array<std::string_view, 5> k_reads_ssm_dtype{
        "NemotronHForCausalLM", "NemotronHPuzzleForCausalLM", "NemotronH_Nano_VL_V2",
        "Qwen3_5ForConditionalGeneration", "Qwen3_5MoeForConditionalGeneration"};
    bool reads = std::find(k_reads_ssm_dtype.begin(), k_reads_ssm_dtype.end(), m.architecture) !=
                 k_reads_ssm_dtype.end();
    return {std::nullopt, std::nullopt, reads};
  }

  [[nodiscard]] CacheRequest cache_request(const CacheRequest& asked, const Model& m,
                                           const Gpu& /*gpu*/) const override {
    CacheRequest r = asked;
    bool fp8 = asked.dtype && (*asked.dtype == DType::fp8_e4m3 || *asked.dtype == DType::fp8_e5m2);
    if (m.indexer && fp8 && asked.mla_format == MlaCacheFormat::latent && !asked.scale &&
        !asked.scale_dtype) {
      r.mla_format = MlaCacheFormat::fp8_ds_mla;
      r.dtype.reset();
    }
    return r;
  }

  [[nodiscard]] Scheduler scheduler(const Gpu& gpu, const EngineSettings& s) const override {
    bool big = big_gpu(gpu);
    return {s.max_batched_tokens.value_or(big ? 8192 : 2048),
            s.max_seqs.value_or(big ? 1024 : 256)};
  }

  [[nodiscard]] Budget budget(const BudgetInputs& in, Derivation& why) const override {
    Budget b;
    b.memory_fraction = in.settings.memory_fraction.value_or(0.9);
    b.budget_bytes = floor_times(in.gpu.memory_bytes, b.memory_fraction);
    b.non_kv_bytes =
        in.settings.non_kv_bytes.value_or(checked_add(in.weights_per_gpu, in.reserve_bytes));
    b.pool_bytes = signed_difference(b.budget_bytes, b.non_kv_bytes);
    why.add("vLLM: requested = ", bytes(in.gpu.memory_bytes), " × gpu_memory_utilization ",
            frac(b.memory_fraction), " = ", bytes(b.budget_bytes), "; minus non-KV ",
            bytes(b.non_kv_bytes),
            in.settings.non_kv_bytes ? " (given)" : " (weights + activation/runtime reserve)");
    return b;
  }

  [[nodiscard]] std::unique_ptr<Pool> plan(const PlanInputs& in, CapacityResult& r,
                                           Derivation& why) const override {
    const std::vector<CacheGroup>& groups = in.groups;
    const Gpu& gpu = in.gpu;
    MambaCacheMode mode = in.settings.mamba_cache_mode;
    bool mla = std::any_of(groups.begin(), groups.end(), latent_mla);
    bool sparse = in.model.indexer.has_value();
    bool has_state = std::any_of(groups.begin(), groups.end(), [](const CacheGroup& g) {
      return g.spec.kind == CacheKind::state;
    });

    // The attention block size: the user's or 16, raised to what the attention backend needs.
    u64 block = in.settings.block_size.value_or(16);
    if (sparse) {
      block = 64; // FlashMLA-sparse takes exactly 64
    } else if (mla && gpu.architecture == "hopper" && block % 64 != 0) {
      block = 64; // FlashMLA
    } else if (mla && gpu.architecture == "blackwell") {
      bool flashinfer = in.model.attention.mla.qk_nope_head_dim == 128 && in.parallel.dcp == 1;
      if (flashinfer && block != 32 && block % 64 != 0) {
        block = 64; // FlashInfer MLA
      } else if (!flashinfer && block % 128 != 0) {
        block = 128; // CUTLASS MLA
      }
    }

    // Hybrid attention + state models: the attention block grows until one attention page
    // covers the largest state, and the state page is padded to the attention page.
    u64 state_page = 0;
    const CacheGroup* attention = nullptr;
    for (const auto& g : groups) {
      if (g.spec.kind == CacheKind::state) {
        state_page = std::max(state_page, g.spec.state_bytes);
      } else if (attention == nullptr && g.spec.kind != CacheKind::indexer) {
        attention = &g;
      }
    }
    if (has_state && attention != nullptr) {
      u64 a1 = attention->spec.bytes_per_token;
      u64 aligned = checked_mul(block, ceil_div(state_page, checked_mul(block, a1)));
      why.add("vLLM hybrid: attention block = ", num(block), " × ⌈state page ", bytes(state_page),
              " / (", num(block), " × ", bytes(a1), " per token)⌉ = ", num(aligned),
              " tokens; state page padded to ", num(std::max(block, aligned)), " × ", bytes(a1));
      block = std::max(block, aligned);
      state_page = checked_mul(block, a1);
    }

    std::vector<VllmSpec> specs;
    for (const auto& g : groups) {
      VllmSpec s{&g, block, 0, 1};
      if (g.spec.kind == CacheKind::state) {
        s.page = attention != nullptr ? state_page : g.spec.state_bytes;
        s.block_size = mode == MambaCacheMode::align ? block : 0; // 0: the whole context
      } else {
        s.page = checked_mul(block, g.spec.bytes_per_token, "vLLM page");
      }
      specs.push_back(s);
    }
    if (specs.empty()) {
      r.block_size = block;
      return std::make_unique<VllmPool>(specs, 0, 1, in.parallel.dcp,
                                        in.scheduler.max_batched_tokens, mode, false);
    }

    // One group when every layer has one spec; one uniform-type group when every spec is
    // full attention of one block size (an MLA latent and its DSA indexer); else pages unify
    // and the layers of each spec split into groups of group_size layers.
    bool uniform_type =
        specs.size() > 1 && std::all_of(specs.begin(), specs.end(), [](const VllmSpec& s) {
          return s.group->spec.kind == CacheKind::full || s.group->spec.kind == CacheKind::indexer;
        });
    u64 num_blocks = 0;
    u64 bytes_per_block = 0; // one block over every layer it spans
    u64 group_size = 0;
    if (specs.size() == 1) {
      group_size = specs[0].group->layers;
      bytes_per_block = checked_mul(specs[0].page, group_size);
      num_blocks = in.pool_bytes / specs[0].page / group_size;
      why.add("vLLM: page = ", bytes(specs[0].page), " (block ", num(specs[0].block_size),
              "); num_blocks = ", bytes(in.pool_bytes), " // ", bytes(specs[0].page), " // ",
              num(group_size), " layers = ", num(num_blocks));
    } else if (uniform_type) {
      for (const auto& s : specs) {
        bytes_per_block = checked_add(bytes_per_block, checked_mul(s.page, s.group->layers));
      }
      num_blocks = in.pool_bytes / bytes_per_block;
      group_size = specs[0].group->layers;
      why.add("vLLM: one uniform-type group (layers of one block size, pages differ): ",
              bytes(in.pool_bytes), " // ", bytes(bytes_per_block),
              " per block of every layer = ", num(num_blocks), " blocks");
    } else {
      u64 page = 0;
      for (const auto& s : specs) {
        page = std::max(page, s.page);
      }
      for (auto& s : specs) {
        if (page % s.page != 0) {
          throw InputError(in.model.name + ": vLLM cannot unify its page sizes (" +
                           group_digits(s.page) + " B does not divide " + group_digits(page) +
                           " B; kv_cache_utils.py raises NotImplementedError)");
        }
        if (s.block_size > 0) {
          s.block_size *= page / s.page;
        }
        s.page = page;
      }
      u64 low = UINT64_MAX;
      u64 high = 0;
      for (const auto& s : specs) {
        low = std::min(low, s.group->layers);
        high = std::max(high, s.group->layers);
      }
      group_size = static_cast<double>(high) < 1.5 * static_cast<double>(low) ? high : low;
      for (auto& s : specs) {
        s.num_groups = ceil_div(s.group->layers, group_size);
      }
      bytes_per_block = checked_mul(page, group_size);
      num_blocks = in.pool_bytes / page / group_size;
      DerivationLine line{"vLLM: page = ", bytes(page), "; groups of ", num(group_size),
                          " layers:"};
      for (const auto& s : specs) {
        line.insert(line.end(), {" ", num(s.num_groups), " " + s.group->name});
      }
      line.insert(line.end(), {"; num_blocks = ", bytes(in.pool_bytes), " // ", bytes(page), " // ",
                               num(group_size), " = ", num(num_blocks)});
      why.add_line(std::move(line));
    }

    if (in.settings.num_gpu_blocks) {
      // --num-gpu-blocks-override replaces the count before the start-up check (#41069): the
      // pool is then that many blocks, whatever the budget left.
      u64 blocks = *in.settings.num_gpu_blocks;
      u64 pool = checked_mul(blocks, bytes_per_block, "--num-gpu-blocks-override × block bytes");
      why.add("vLLM: num_gpu_blocks_override ", num(blocks), " replaces ", num(num_blocks),
              " blocks: ", bytes(pool), " per GPU");
      if (pool > in.gpu.memory_bytes - std::min(in.gpu.memory_bytes, r.weights_bytes_per_gpu)) {
        // More than the GPU holds beside the weights: the allocation fails.
        r.fits = false;
        r.reason = "--num-gpu-blocks-override " + group_digits(blocks) + " blocks take " +
                   group_digits(pool) + " B per GPU, more than the " + in.gpu.name +
                   " holds beside the weights: vLLM runs out of memory allocating them";
      } else if (pool > in.pool_bytes) {
        r.notes.push_back("--num-gpu-blocks-override " + group_digits(blocks) + " blocks take " +
                          group_digits(pool) + " B per GPU, more than the " +
                          group_digits(in.pool_bytes) +
                          " B the budget leaves for the KV cache: vLLM allocates them all the "
                          "same and may run out of memory");
      }
      num_blocks = blocks;
      r.kv_pool_bytes_per_gpu = pool;
    }

    u64 n_groups = 0;
    u64 min_block = UINT64_MAX;
    for (const auto& s : specs) {
      n_groups += uniform_type ? 0 : s.num_groups;
      if (s.block_size > 0) {
        min_block = std::min(min_block, s.block_size);
      }
      PoolGroup pg{uniform_type ? std::string("uniform:") + s.group->name : s.group->name,
                   uniform_type ? s.group->layers : std::min(group_size, s.group->layers),
                   uniform_type ? 1 : s.num_groups,
                   s.block_size,
                   s.page,
                   0};
      r.pool_groups.push_back(pg);
    }
    n_groups = uniform_type ? 1 : n_groups;
    // A serving run draws whole blocks from one pool, the null block held back.
    SequencePool blocks{"blocks", "blocks", num_blocks > 0 ? num_blocks - 1 : 0, {}};
    for (const auto& s : specs) {
      if (uniform_type && &s != &specs.front()) {
        continue; // one block spans every layer of a uniform-type group
      }
      u64 per = s.group->spec.kind == CacheKind::state && mode == MambaCacheMode::align
                    ? 2 * s.num_groups
                    : s.num_groups;
      blocks.terms.push_back({s.group->spec.kind, s.group->spec.window,
                              std::max<u64>(s.block_size, 1) * in.parallel.dcp, per});
    }
    r.sequence_pools.push_back(std::move(blocks));
    min_block = min_block == UINT64_MAX ? 0 : min_block;
    r.block_size = min_block;
    r.num_blocks = num_blocks;
    // "GPU KV cache size: N tokens" as _report_kv_cache_config logs it.
    r.kv_tokens = checked_mul(num_blocks / n_groups * min_block, in.parallel.dcp);
    r.state_slots = has_state && attention == nullptr ? num_blocks : 0;
    why.add("vLLM: GPU KV cache size = ", num(num_blocks), " // ", num(n_groups), " groups × ",
            num(min_block), " = ", num(r.kv_tokens), " tokens",
            in.parallel.dcp > 1 ? " (× dcp)" : "");
    return std::make_unique<VllmPool>(std::move(specs), num_blocks, bytes_per_block,
                                      in.parallel.dcp, in.scheduler.max_batched_tokens, mode,
                                      uniform_type);
  }
};

} // namespace

const EngineRules& vllm_rules() {
  static const VllmRules rules;
  return rules;
}

} // namespace kvcalc::kv::detail
