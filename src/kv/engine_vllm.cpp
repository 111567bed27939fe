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
#include <optional>

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

/// vLLM's KV cache groups on one GPU (get_kv_cache_groups) and the one pool of blocks they
/// share (get_kv_cache_config_from_groups).
struct VllmGroups {
  std::vector<VllmSpec> specs;
  /// Every spec full attention of one block size, pages differing (an MLA latent and its DSA
  /// indexer): one group of every layer (UniformTypeKVCacheSpecs).
  bool uniform_type = false;
  u64 group_size = 0;      ///< layers of one group
  u64 bytes_per_block = 0; ///< one block over every layer it spans
  u64 num_blocks = 0;      ///< blocks of the pool

  /// The KV cache groups: one when uniform-type, else each spec's.
  [[nodiscard]] u64 count() const {
    if (uniform_type) {
      return 1;
    }
    u64 n = 0;
    for (const auto& s : specs) {
      n += s.num_groups;
    }
    return n;
  }

  /// The smallest block of the specs in tokens; 0 when none has one.
  [[nodiscard]] u64 min_block() const {
    u64 least = UINT64_MAX;
    for (const auto& s : specs) {
      if (s.block_size > 0) {
        least = std::min(least, s.block_size);
      }
    }
    return least == UINT64_MAX ? 0 : least;
  }

  /// Blocks one request of `tokens` tokens takes from the pool.
  [[nodiscard]] u64 blocks_for(u64 tokens, u64 dcp, u64 max_batched, MambaCacheMode mode) const {
    u64 blocks = 0;
    for (const auto& s : specs) {
      u64 pages = pages_for(s, tokens, dcp, max_batched, mode);
      // A uniform-type group allocates one block across all its layers: the most pages any
      // layer needs.
      blocks = uniform_type ? std::max(blocks, pages)
                            : checked_add(blocks, checked_mul(s.num_groups, pages));
    }
    return blocks;
  }
};

class VllmPool : public Pool {
public:
  VllmPool(VllmGroups groups, u64 dcp, u64 max_batched, MambaCacheMode mode)
      : m_groups(std::move(groups)), m_dcp(dcp), m_max_batched(max_batched), m_mode(mode) {}

  [[nodiscard]] ContextCapacity at(u64 tokens) const override {
    ContextCapacity c;
    c.tokens = tokens;
    u64 blocks = m_groups.blocks_for(tokens, m_dcp, m_max_batched, m_mode);
    u64 num_blocks = m_groups.num_blocks;
    c.blocks_per_sequence = blocks;
    c.bytes_per_sequence = checked_mul(blocks, m_groups.bytes_per_block, "bytes per sequence");
    c.max_concurrency = static_cast<double>(num_blocks) / static_cast<double>(blocks);
    // The block pool holds one null block back; whole requests fit in the rest.
    c.max_sequences = num_blocks > 0 ? (num_blocks - 1) / blocks : 0;
    return c;
  }

private:
  VllmGroups m_groups;
  u64 m_dcp;
  u64 m_max_batched;
  MambaCacheMode m_mode;
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

bool is_state(const CacheGroup& g) {
  return g.spec.kind == CacheKind::state;
}

/// The first group of attention layers (neither a state nor a DSA indexer); null when none.
const CacheGroup* first_attention(const std::vector<CacheGroup>& groups) {
  auto it = std::find_if(groups.begin(), groups.end(), [](const CacheGroup& g) {
    return !is_state(g) && g.spec.kind != CacheKind::indexer;
  });
  return it == groups.end() ? nullptr : &*it;
}

/// The attention block size: the user's or 16, raised to what the attention backend needs
/// (vllm/platforms/cuda.py).
u64 attention_block_size(const PlanInputs& in) {
  bool mla = std::any_of(in.groups.begin(), in.groups.end(), latent_mla);
  bool sparse = in.model.indexer.has_value();
  u64 block = in.settings.block_size.value_or(16);
  if (sparse) {
    block = 64; // FlashMLA-sparse takes exactly 64
  } else if (mla && in.gpu.architecture == "hopper" && block % 64 != 0) {
    block = 64; // FlashMLA
  } else if (mla && in.gpu.architecture == "blackwell") {
    bool flashinfer = in.model.attention.mla.qk_nope_head_dim == 128 && in.parallel.dcp == 1;
    if (flashinfer && block != 32 && block % 64 != 0) {
      block = 64; // FlashInfer MLA
    } else if (!flashinfer && block % 128 != 0) {
      block = 128; // CUTLASS MLA
    }
  }
  return block;
}

/// The attention block, and the page every state layer takes in a hybrid attention + state
/// model.
struct VllmBlock {
  u64 block = 0; ///< tokens per attention block
  /// Hybrid models: every state layer's page, the attention page of `block` tokens; unset
  /// elsewhere, where a state's page is its own state bytes.
  std::optional<u64> state_page;
};

/// Platform._align_hybrid_block_size: in a hybrid attention + state model the attention block
/// grows until one attention page covers the largest state, and the state page is padded to
/// the attention page.
VllmBlock align_hybrid_block_size(const std::vector<CacheGroup>& groups, u64 block,
                                  Derivation& why) {
  const CacheGroup* attention = first_attention(groups);
  if (attention == nullptr || std::none_of(groups.begin(), groups.end(), is_state)) {
    return {block, std::nullopt};
  }
  u64 state_page = 0;
  for (const auto& g : groups) {
    if (is_state(g)) {
      state_page = std::max(state_page, g.spec.state_bytes);
    }
  }
  u64 a1 = attention->spec.bytes_per_token;
  u64 aligned = checked_mul(block, ceil_div(state_page, checked_mul(block, a1)));
  why.add("vLLM hybrid: attention block = ", num(block), " × ⌈state page ", bytes(state_page),
          " / (", num(block), " × ", bytes(a1), " per token)⌉ = ", num(aligned),
          " tokens; state page padded to ", num(std::max(block, aligned)), " × ", bytes(a1));
  block = std::max(block, aligned);
  return {block, checked_mul(block, a1)};
}

/// One spec per cache group, with its block and page (page_size_bytes): an attention layer's
/// page is the block's tokens at its bytes per token; a state's is one state, and its block
/// the attention block with `align`, else the whole context (0).
std::vector<VllmSpec> kv_cache_specs(const std::vector<CacheGroup>& groups, const VllmBlock& b,
                                     MambaCacheMode mode) {
  std::vector<VllmSpec> specs;
  for (const auto& g : groups) {
    VllmSpec s{&g, b.block, 0, 1};
    if (is_state(g)) {
      s.page = b.state_page.value_or(g.spec.state_bytes);
      s.block_size = mode == MambaCacheMode::align ? b.block : 0; // 0: the whole context
    } else {
      s.page = checked_mul(b.block, g.spec.bytes_per_token, "vLLM page");
    }
    specs.push_back(s);
  }
  return specs;
}

/// An MLA latent and its DSA indexer (every spec full attention of one block size, pages
/// differing): one uniform-type group of every layer; a block spans all of them.
VllmGroups uniform_type_group(std::vector<VllmSpec> specs, u64 pool_bytes, Derivation& why) {
  VllmGroups g;
  g.specs = std::move(specs);
  g.uniform_type = true;
  for (const auto& s : g.specs) {
    g.bytes_per_block = checked_add(g.bytes_per_block, checked_mul(s.page, s.group->layers));
  }
  g.num_blocks = pool_bytes / g.bytes_per_block;
  g.group_size = g.specs[0].group->layers;
  why.add("vLLM: one uniform-type group (layers of one block size, pages differ): ",
          bytes(pool_bytes), " // ", bytes(g.bytes_per_block),
          " per block of every layer = ", num(g.num_blocks), " blocks");
  return g;
}

/// unify_kv_cache_spec_page_size: every page grows to the largest, a smaller one's block with
/// it; a page that does not divide the largest is refused. Returns the page.
u64 unify_page_size(std::vector<VllmSpec>& specs, const std::string& model) {
  u64 page = 0;
  for (const auto& s : specs) {
    page = std::max(page, s.page);
  }
  for (auto& s : specs) {
    if (page % s.page != 0) {
      throw InputError(model + ": vLLM cannot unify its page sizes (" + group_digits(s.page) +
                       " B does not divide " + group_digits(page) +
                       " B; kv_cache_utils.py raises NotImplementedError)");
    }
    if (s.block_size > 0) {
      s.block_size *= page / s.page;
    }
    s.page = page;
  }
  return page;
}

/// _get_kv_cache_groups_uniform_page_size: layers per group, the smallest layer count of the
/// specs, or the largest when it is under 1.5× the smallest (#36684).
u64 group_size(const std::vector<VllmSpec>& specs) {
  u64 low = UINT64_MAX;
  u64 high = 0;
  for (const auto& s : specs) {
    low = std::min(low, s.group->layers);
    high = std::max(high, s.group->layers);
  }
  return static_cast<double>(high) < 1.5 * static_cast<double>(low) ? high : low;
}

/// Pages of one size (unified), each spec's layers in groups of group_size layers, and the
/// blocks the pool holds: pool // page // group_size. One spec is one group of every layer.
VllmGroups uniform_page_groups(std::vector<VllmSpec> specs, u64 pool_bytes,
                               const std::string& model, Derivation& why) {
  VllmGroups g;
  g.specs = std::move(specs);
  u64 page = unify_page_size(g.specs, model);
  g.group_size = group_size(g.specs);
  for (auto& s : g.specs) {
    s.num_groups = ceil_div(s.group->layers, g.group_size);
  }
  g.bytes_per_block = checked_mul(page, g.group_size);
  g.num_blocks = pool_bytes / page / g.group_size;
  if (g.specs.size() == 1) {
    why.add("vLLM: page = ", bytes(page), " (block ", num(g.specs[0].block_size),
            "); num_blocks = ", bytes(pool_bytes), " // ", bytes(page), " // ", num(g.group_size),
            " layers = ", num(g.num_blocks));
    return g;
  }
  DerivationLine line{"vLLM: page = ", bytes(page), "; groups of ", num(g.group_size), " layers:"};
  for (const auto& s : g.specs) {
    line.insert(line.end(), {" ", num(s.num_groups), " " + s.group->name});
  }
  line.insert(line.end(), {"; num_blocks = ", bytes(pool_bytes), " // ", bytes(page), " // ",
                           num(g.group_size), " = ", num(g.num_blocks)});
  why.add_line(std::move(line));
  return g;
}

/// get_kv_cache_groups, with the block count of get_kv_cache_config_from_groups: one uniform-type
/// group when every spec is full attention of one block size (more than one spec), else pages
/// unify and each spec's layers split into groups.
VllmGroups kv_cache_groups(std::vector<VllmSpec> specs, u64 pool_bytes, const std::string& model,
                           Derivation& why) {
  bool uniform_type =
      specs.size() > 1 && std::all_of(specs.begin(), specs.end(), [](const VllmSpec& s) {
        return s.group->spec.kind == CacheKind::full || s.group->spec.kind == CacheKind::indexer;
      });
  return uniform_type ? uniform_type_group(std::move(specs), pool_bytes, why)
                      : uniform_page_groups(std::move(specs), pool_bytes, model, why);
}

/// --num-gpu-blocks-override replaces the count before the start-up check (#41069): the pool is
/// then that many blocks, whatever the budget left; more than the GPU holds beside the weights
/// does not fit, more than the budget left draws a note.
void override_num_blocks(u64 blocks, const PlanInputs& in, VllmGroups& g, CapacityResult& r,
                         Derivation& why) {
  u64 pool = checked_mul(blocks, g.bytes_per_block, "--num-gpu-blocks-override × block bytes");
  why.add("vLLM: num_gpu_blocks_override ", num(blocks), " replaces ", num(g.num_blocks),
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
  g.num_blocks = blocks;
  r.kv_pool_bytes_per_gpu = pool;
}

/// The groups as the capacity JSON gives them: per spec, its layers in one group, the groups it
/// fills, its block and page.
std::vector<PoolGroup> pool_groups(const VllmGroups& g) {
  std::vector<PoolGroup> out;
  for (const auto& s : g.specs) {
    out.push_back({g.uniform_type ? std::string("uniform:") + s.group->name : s.group->name,
                   g.uniform_type ? s.group->layers : std::min(g.group_size, s.group->layers),
                   g.uniform_type ? 1 : s.num_groups, s.block_size, s.page, 0});
  }
  return out;
}

/// How a serving run draws on the pool: whole blocks, the null block held back.
SequencePool block_pool(const VllmGroups& g, u64 dcp, MambaCacheMode mode) {
  SequencePool blocks{"blocks", "blocks", g.num_blocks > 0 ? g.num_blocks - 1 : 0, {}};
  for (const auto& s : g.specs) {
    if (g.uniform_type && &s != &g.specs.front()) {
      continue; // one block spans every layer of a uniform-type group
    }
    u64 per = s.group->spec.kind == CacheKind::state && mode == MambaCacheMode::align
                  ? 2 * s.num_groups
                  : s.num_groups;
    blocks.terms.push_back(
        {s.group->spec.kind, s.group->spec.window, std::max<u64>(s.block_size, 1) * dcp, per});
  }
  return blocks;
}

/// "GPU KV cache size: N tokens" as _report_kv_cache_config logs it: num_blocks // groups × the
/// smallest block (× dcp).
u64 logged_kv_tokens(const VllmGroups& g, u64 dcp, Derivation& why) {
  u64 groups = g.count();
  u64 block = g.min_block();
  u64 tokens = checked_mul(g.num_blocks / groups * block, dcp);
  why.add("vLLM: GPU KV cache size = ", num(g.num_blocks), " // ", num(groups), " groups × ",
          num(block), " = ", num(tokens), " tokens", dcp > 1 ? " (× dcp)" : "");
  return tokens;
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
    MambaCacheMode mode = in.settings.mamba_cache_mode;
    u64 dcp = in.parallel.dcp;
    u64 max_batched = in.scheduler.max_batched_tokens;
    VllmBlock block = align_hybrid_block_size(in.groups, attention_block_size(in), why);
    std::vector<VllmSpec> specs = kv_cache_specs(in.groups, block, mode);
    if (specs.empty()) {
      r.block_size = block.block;
      return std::make_unique<VllmPool>(VllmGroups{}, dcp, max_batched, mode);
    }
    VllmGroups groups = kv_cache_groups(std::move(specs), in.pool_bytes, in.model.name, why);
    if (in.settings.num_gpu_blocks) {
      override_num_blocks(*in.settings.num_gpu_blocks, in, groups, r, why);
    }
    r.pool_groups = pool_groups(groups);
    r.sequence_pools.push_back(block_pool(groups, dcp, mode));
    r.block_size = groups.min_block();
    r.num_blocks = groups.num_blocks;
    r.kv_tokens = logged_kv_tokens(groups, dcp, why);
    // An attention-free model: the pool is all state blocks.
    bool states_only = std::any_of(in.groups.begin(), in.groups.end(), is_state) &&
                       first_attention(in.groups) == nullptr;
    r.state_slots = states_only ? groups.num_blocks : 0;
    return std::make_unique<VllmPool>(std::move(groups), dcp, max_batched, mode);
  }
};

} // namespace

const EngineRules& vllm_rules() {
  static const VllmRules rules;
  return rules;
}

} // namespace kvcalc::kv::detail
