#include <catch2/catch.hpp>

#include <algorithm>

#include <kvcalc/core/units.hpp>
#include <kvcalc/kv/capacity.hpp>
#include <kvcalc/model/loader.hpp>
#include <kvcalc/model/registry.hpp>
#include <kvcalc/plan/plan.hpp>
#include <kvcalc/report/table.hpp>

using namespace kvcalc;
using namespace kvcalc::report;
using namespace kvcalc::kv;
using namespace kvcalc::device;
using namespace kvcalc::model;

namespace {

const Gpu& gpu(const char* name) {
  static const GpuCatalog catalog;
  return catalog.find(name);
}

CapacityRequest request(const Model& m, const char* gpu_name, Engine engine,
                        std::vector<u64> contexts) {
  CapacityRequest r;
  r.model = m;
  r.gpu = gpu(gpu_name);
  r.engine.engine = engine;
  r.contexts = std::move(contexts);
  return r;
}

const Model& zoo(const char* name) {
  return *find_builtin_model(name);
}

// Qwen3-14B (not bundled): 40 layers, 8 KV heads of 128.
Model qwen3_14b() {
  return parse_model_yaml(R"(name: qwen3-14b
source: https://huggingface.co/Qwen/Qwen3-14B/blob/main/config.json
layers: 40
hidden_size: 5120
vocab_size: 151936
max_context: 40960
attention: {kind: gqa, heads: 40, kv_heads: 8, head_dim: 128, qk_norm: true}
mlp: {intermediate_size: 17408}
)",
                          "qwen3-14b.yaml");
}

} // namespace

// vLLM logged "Available KV cache memory: 6.51 GiB", "GPU KV cache size: 42,656 tokens",
// "Maximum concurrency for 32,768 tokens per request: 1.30x" (LMCache issue 1739).
// page = 16 x 2 x 8 x 128 x 2 B = 65,536 B; 6.51 GiB // 65,536 // 40 layers = 2,666 blocks;
// 2,666 x 16 = 42,656 tokens; 2,666 / cdiv(32,768, 16) = 1.30.
TEST_CASE("vLLM anchor: Qwen3-14B from the logged pool", "[capacity][vllm]") {
  auto req = request(qwen3_14b(), "h100-sxm", Engine::vllm, {32768});
  req.engine.kv_cache_bytes = parse_bytes("6.51GiB", "--kv-cache-memory");
  CapacityResult r = compute_capacity(req);
  CHECK(r.num_blocks == 2666);
  CHECK(r.kv_tokens == 42656);
  CHECK(r.contexts[0].blocks_per_sequence == 2048);
  CHECK(r.contexts[0].max_concurrency == Approx(2666.0 / 2048.0));
  CHECK(r.contexts[0].max_sequences == 1);
}

// vLLM hybrid allocator: gpt-oss-120b has 18 sliding (W = 128) and 18 full layers: two groups
// of 18 share one pool. Logged 5.38 GiB (5.3826 unrounded) and 78,384 tokens (hf-mem issue 60):
// page 32,768 B; 5.3826 GiB // 32,768 // 18 = 9,798 blocks; 9,798 // 2 groups x 16 = 78,384.
TEST_CASE("vLLM anchor: gpt-oss-120b hybrid groups", "[capacity][vllm]") {
  auto req = request(zoo("gpt-oss-120b"), "h100-sxm", Engine::vllm, {131072});
  req.engine.kv_cache_bytes = parse_bytes("5.3826GiB", "--kv-cache-memory");
  CapacityResult r = compute_capacity(req);
  CHECK(r.num_blocks == 9798);
  CHECK(r.kv_tokens == 78384);
  // Per request: cdiv(131,072, 16) full blocks + cdiv(min(127 + 8,192, 131,072), 16) + 1
  // sliding blocks = 8,192 + 521.
  CHECK(r.contexts[0].blocks_per_sequence == 8192 + 521);
}

// Gemma-3-27B on one H200, vLLM defaults: 10 full + 52 sliding (W = 1,024) layers give group
// size 10: 1 full group and 6 sliding groups. At 32k with 8,192 batched tokens a request needs
// 2,048 + 6 x (cdiv(1,023 + 8,192, 16) + 1) = 2,048 + 6 x 577 = 5,510 blocks.
// The pool (H200: 150,754,820,096 B; h 5,376, 62 layers, 32 heads and 16 KV heads of 128,
// I 21,504, V 262,208 tied):
//   requested = floor(150,754,820,096 x 0.9) = 135,679,338,086
//   weights = 2 B x (262,208 x 5,376 + 62 x (2 x 5,376 x 4,096 + 2 x 5,376 x 2,048
//             + 3 x 5,376 x 21,504 + 4 x 5,376 + 2 x 128) + 5,376)
//           = 2 x 27,009,346,304 = 54,018,692,608
//   reserve = 8,192 x (4 x 5,376 + 2 x 21,504) x 2 B + 1,024 x 262,208 x 4 B + 512 MiB
//           = 1,056,964,608 + 1,074,003,968 + 536,870,912 = 2,667,839,488
//   pool = 135,679,338,086 - 54,018,692,608 - 2,667,839,488 = 78,992,805,990
//   page = 16 x 2 x 16 x 128 x 2 B = 131,072 (full and sliding alike)
//   num_blocks = 78,992,805,990 // 131,072 // 10 = 602,667 // 10 = 60,266
//   tokens = 60,266 // 7 groups x 16 = 137,744; concurrency 60,266 / 5,510 = 10.94;
//   whole requests (60,266 - 1) // 5,510 = 10.
TEST_CASE("vLLM groups for 5:1 local:global layers", "[capacity][vllm]") {
  CapacityResult r = compute_capacity(request(zoo("gemma-3-27b"), "h200", Engine::vllm, {32768}));
  CHECK(r.max_batched_tokens == 8192);
  CHECK(r.contexts[0].blocks_per_sequence == 5510);
  CHECK(r.budget_bytes == 135679338086ULL);
  CHECK(r.weights_bytes_per_gpu == 54018692608ULL);
  CHECK(r.other_non_kv_bytes_per_gpu == 2667839488ULL);
  CHECK(r.kv_pool_bytes_per_gpu == 78992805990ULL);
  CHECK(r.num_blocks == 60266);
  CHECK(r.kv_tokens == 137744);
  CHECK(r.contexts[0].max_concurrency == Approx(60266.0 / 5510));
  CHECK(r.contexts[0].max_sequences == 10);
}

// The whole vLLM budget, by hand, for Llama-3.1-8B on an RTX 3090 (24 GiB = 25,769,803,776 B):
//   requested = floor(25,769,803,776 x 0.9) = 23,192,823,398
//   weights = 8,030,261,248 x 2 = 16,060,522,496
//   reserve = 2,048 tokens x (4 x 4,096 + 2 x 14,336) x 2 B + 256 x 128,256 x 4 B + 512 MiB
//           = 184,549,376 + 131,334,144 + 536,870,912 = 852,754,432
//   pool = 23,192,823,398 - 16,913,276,928 = 6,279,546,470
//   blocks = 6,279,546,470 // 65,536 // 32 = 2,994; tokens = 47,904; at 20,000: 2,994 / 1,250.
Model load(const std::string& path) {
  Diagnostics d;
  return load_model(std::string(KVCALC_SOURCE_DIR) + "/" + path, d);
}

// vLLM grows the attention block of a hybrid model until one attention page covers a state page
// (platforms/interface.py _align_hybrid_block_size): block = 16 · ⌈state / (16 · a1)⌉. Two
// published anchors:
// - NVIDIA-Nemotron-Nano-9B-v2 (vLLM issue #24280: "672 tokens"), its SSM state in bf16 as vLLM
//   kept it then: conv 3 x (10,240 + 2 x 8 x 128) x 2 + SSM 128 x 80 x 128 x 2 = 2,695,168 B; a1 =
//   8 x 2 x 128 x 2 = 4,096 B: 16 x ⌈2,695,168 / 65,536⌉ = 16 x 42 = 672.
// - Qwen3.5-9B served as Qwen3_5ForCausalLM (vLLM 0.19.0 log in issue #39993: "Setting attention
//   block size to 272 tokens"): no config hook reads its mamba_ssm_dtype, so bf16: conv 3 x 8,192
//   x 2 + 32 x 128 x 128 x 2 = 1,097,728 B; a1 = 4 x 2 x 256 x 2 = 4,096 B: 16 x 17 = 272.
TEST_CASE("vLLM hybrid block alignment reproduces the engine's logs", "[capacity][vllm][hybrid]") {
  auto nano =
      request(load("tests/data/models/nemotron-nano-9b-v2.yaml"), "h100-sxm", Engine::vllm, {8192});
  nano.cache.ssm_state_dtype = DType::bf16;
  nano.engine.kv_cache_bytes = 10ULL << 30;
  CapacityResult r = compute_capacity(nano);
  CHECK(r.block_size == 672);
  // 4 attention and 27 Mamba layers: groups of 4 (27 is not under 1.5 x 4), 1 full + 7 state;
  // page 672 x 4,096 = 2,752,512 B; 10 GiB // page // 4 = 975 blocks; a request of 8,192
  // tokens holds ⌈8,192 / 672⌉ = 13 attention blocks and 7 state blocks.
  REQUIRE(r.pool_groups.size() == 2);
  CHECK(r.pool_groups[0].kind == "full");
  CHECK(r.pool_groups[0].groups == 1);
  CHECK(r.pool_groups[1].kind == "state");
  CHECK(r.pool_groups[1].groups == 7);
  CHECK(r.num_blocks == 975);
  CHECK(r.contexts[0].blocks_per_sequence == 20);
  CHECK(r.contexts[0].max_concurrency == Approx(48.75));
  CHECK(r.contexts[0].max_sequences == 48); // (975 − the null block) // 20

  auto causal =
      request(load("tests/data/models/qwen3.5-9b-causallm.json"), "h100-sxm", Engine::vllm, {1024});
  causal.engine.kv_cache_bytes = 10ULL << 30;
  CHECK(compute_capacity(causal).block_size == 272);
  // As Qwen3_5ForConditionalGeneration the fp32 state counts: 16 x ⌈2,146,304 / 65,536⌉ = 528.
  causal.model.architecture = "Qwen3_5ForConditionalGeneration";
  CHECK(compute_capacity(causal).block_size == 528);
}

// DeepSeek-V3.2 under vLLM: an fp8 cache is stored as fp8_ds_mla (656 B), its indexer's keys
// (132 B) beside it, one uniform-type group of blocks of 64 (FlashMLA-sparse):
// num_blocks = 40 GiB // (64 x 61 x (656 + 132)) = 13,961; GPU KV cache size 13,961 x 64 =
// 893,504 tokens; at 131,072 tokens 2,048 blocks: 6.82x, 6 whole requests.
TEST_CASE("vLLM sizes DSA as one uniform-type group", "[capacity][vllm][dsa]") {
  auto v32 = request(zoo("deepseek-v3.2"), "h200", Engine::vllm, {131072});
  v32.cache.dtype = DType::fp8_e4m3;
  v32.parallel.tp = 8;
  v32.engine.kv_cache_bytes = 40ULL << 30;
  CapacityResult r = compute_capacity(v32);
  CHECK(r.cache.mla_format == MlaCacheFormat::fp8_ds_mla);
  CHECK(r.block_size == 64);
  CHECK(r.num_blocks == 13961);
  CHECK(r.kv_tokens == 893504);
  REQUIRE(r.pool_groups.size() == 2);
  CHECK(r.pool_groups[0].kind == "uniform:full");
  CHECK(r.pool_groups[1].kind == "uniform:indexer");
  CHECK(r.contexts[0].max_concurrency == Approx(13961.0 / 2048));
  CHECK(r.contexts[0].max_sequences == 6);
}

// vLLM's attention block for an MLA cache is the backend's (vllm/platforms/cuda.py): 16 unless
// --block-size; on Hopper FlashMLA takes multiples of 64 (16 → 64, 128 stays); on Blackwell
// FlashInfer MLA, when d_nope = 128 and dcp = 1, takes 32 or multiples of 64 (16 → 64, 32
// stays), else CUTLASS MLA multiples of 128 (16 → 128). No rule elsewhere (A100: 16).
TEST_CASE("vLLM's MLA block follows the attention backend", "[capacity][vllm][mla]") {
  auto block = [](const Model& m, const char* gpu_name, std::optional<u64> block_size, u64 dcp) {
    auto req = request(m, gpu_name, Engine::vllm, {4096});
    req.engine.block_size = block_size;
    req.parallel.tp = dcp;
    req.parallel.dcp = dcp;
    return compute_capacity(req).block_size;
  };
  const Model& lite = zoo("deepseek-v2-lite"); // d_nope 128
  CHECK(block(lite, "h100-sxm", std::nullopt, 1) == 64);
  CHECK(block(lite, "h100-sxm", 128, 1) == 128);
  CHECK(block(lite, "b200", std::nullopt, 1) == 64);
  CHECK(block(lite, "b200", 32, 1) == 32);
  CHECK(block(lite, "b200", std::nullopt, 2) == 128);               // dcp 2: CUTLASS MLA
  CHECK(block(zoo("minicpm3-4b"), "b200", std::nullopt, 1) == 128); // d_nope 64: CUTLASS MLA
  CHECK(block(lite, "a100-sxm-80gb", std::nullopt, 1) == 16);
}

// vLLM unifies page sizes before grouping (kv_cache_utils.py unify_kv_cache_spec_page_size, then
// _get_kv_cache_groups_uniform_page_size). 40 layers '3:1': 30 sliding (W = 1,024) with
// head_dim 64 and 10 full with head_dim 128, 8 KV heads, bf16:
//   full page 16 x 2 x 8 x 128 x 2 = 65,536 B; sliding page 16 x 2 x 8 x 64 x 2 = 32,768 B,
//   which divides 65,536: the sliding block grows to 16 x 2 = 32, its page to 65,536 B;
//   group_size: 30 is not under 1.5 x 10, so 10: 1 full group, 3 sliding groups;
//   num_blocks = 1 GiB // 65,536 // 10 = 16,384 // 10 = 1,638;
//   GPU KV cache size = 1,638 // 4 groups x 16 (the smallest block) = 409 x 16 = 6,544 tokens;
//   one request of 8,192 tokens (max_num_batched_tokens 8,192 on an H100): full ⌈8,192 / 16⌉ =
//   512, each sliding group ⌈min(1,023 + 8,192, 8,192) / 32⌉ + 1 = 257: 512 + 3 x 257 = 1,283
//   blocks; (1,638 − 1) // 1,283 = 1 request.
// A sliding head_dim of 96 gives a 49,152 B page, which does not divide 65,536: vLLM raises.
TEST_CASE("vLLM unifies page sizes by growing the smaller page's block", "[capacity][vllm]") {
  auto model = [](const char* sliding_head_dim) {
    return parse_model_yaml(std::string(R"(name: unify
source: hand-made
layers: 40
hidden_size: 4096
vocab_size: 32000
max_context: 32768
attention: {kind: gqa, heads: 32, kv_heads: 8, head_dim: 128}
sliding_attention: {head_dim: )") +
                                sliding_head_dim + R"(}
mlp: {intermediate_size: 14336}
sliding_window: 1024
layer_pattern: '3:1'
)",
                            "unify.yaml");
  };
  auto req = request(model("64"), "h100-sxm", Engine::vllm, {8192});
  req.engine.kv_cache_bytes = 1ULL << 30;
  CapacityResult r = compute_capacity(req);
  REQUIRE(r.pool_groups.size() == 2);
  CHECK(r.pool_groups[0].kind == "full");
  CHECK(r.pool_groups[0].groups == 1);
  CHECK(r.pool_groups[0].block_size == 16);
  CHECK(r.pool_groups[0].page_bytes == 65536);
  CHECK(r.pool_groups[1].kind == "sliding");
  CHECK(r.pool_groups[1].layers == 10);
  CHECK(r.pool_groups[1].groups == 3);
  CHECK(r.pool_groups[1].block_size == 32);
  CHECK(r.pool_groups[1].page_bytes == 65536);
  CHECK(r.num_blocks == 1638);
  CHECK(r.block_size == 16);
  CHECK(r.kv_tokens == 6544);
  CHECK(r.contexts[0].blocks_per_sequence == 1283);
  CHECK(r.contexts[0].max_concurrency == Approx(1638.0 / 1283));
  CHECK(r.contexts[0].max_sequences == 1);

  auto odd = request(model("96"), "h100-sxm", Engine::vllm, {8192});
  odd.engine.kv_cache_bytes = 1ULL << 30;
  CHECK_THROWS_WITH(compute_capacity(odd),
                    Catch::Contains("vLLM cannot unify its page sizes (49,152 B does not divide "
                                    "65,536 B"));
}

// SGLang's state pool for Qwen3-Next-80B-A3B at tp 1: one slot is conv 3 x 8,192 bf16 + recurrent
// 32 x 128 x 128 fp32 per layer, x 36 = 77,266,944 B (its mamba_cache_per_req); with a 40 GiB
// rest: K = ⌊(42,949,672,960 x 0.9 / 1.9 − 77,266,944) / 77,266,944⌋ = 262 slots, K + 1 charged;
// the KV pool gets the rest at 12 x 2 x 2 x 256 x 2 = 24,576 B per token.
TEST_CASE("SGLang sets a hybrid's state slots aside first", "[capacity][sglang][hybrid]") {
  auto next = request(zoo("qwen3-next-80b-a3b"), "h200", Engine::sglang, {4096});
  next.weight_dtype = DType::fp8_e4m3; // the weights fit one H200
  next.engine.kv_cache_bytes = 40ULL << 30;
  CapacityResult r = compute_capacity(next);
  REQUIRE(r.pool_groups.size() == 2);
  CHECK(r.pool_groups[1].kind == "state");
  CHECK(r.pool_groups[1].page_bytes == 77266944);
  CHECK(r.state_slots == 262);
  u64 rest = (40ULL << 30) - 263ULL * 77266944;
  CHECK(r.kv_tokens == rest / 24576);
  // Running requests: three slots each under its no_buffer strategy: 262 // 3 = 87.
  CHECK(r.contexts[0].max_sequences == 87);
}

// TensorRT-LLM charges every batch slot's state before the tokens: (max_batch_size x pp + 1) x
// the state of one sequence. Nemotron-H-8B: 24 Mamba layers x (61,440 + 128 x 64 x 128 x 4) =
// 102,137,856 B; with 64 slots and a 20 GiB budget: 21,474,836,480 − 65 x 102,137,856 =
// 14,835,875,840 B; 16,384 B per token: 905,510 tokens, 28,297 blocks of 32.
TEST_CASE("TensorRT-LLM takes a hybrid's states off the budget first",
          "[capacity][trtllm][hybrid]") {
  auto h = request(zoo("nemotron-h-8b"), "h100-sxm", Engine::trtllm, {8192});
  h.engine.kv_cache_bytes = 20ULL << 30;
  h.engine.max_seqs = 64;
  CapacityResult r = compute_capacity(h);
  CHECK(r.kv_tokens == 905510);
  CHECK(r.num_blocks == 28297);
  CHECK(r.state_slots == 64);
  CHECK(r.contexts[0].max_sequences == 64); // 3,536 sequences' blocks, 64 state slots
}

TEST_CASE("vLLM budget by hand: Llama-3.1-8B on an RTX 3090", "[capacity][vllm]") {
  auto req = request(zoo("llama-3.1-8b"), "rtx-3090", Engine::vllm, {20000});
  req.engine.memory_fraction = 0.9;
  CapacityResult r = compute_capacity(req);
  CHECK(r.budget_bytes == 23192823398ULL);
  CHECK(r.weights_bytes_per_gpu == 16060522496ULL);
  CHECK(r.other_non_kv_bytes_per_gpu == 852754432ULL);
  CHECK(r.kv_pool_bytes_per_gpu == 6279546470ULL);
  CHECK(r.num_blocks == 2994);
  CHECK(r.kv_tokens == 47904);
  CHECK(r.contexts[0].max_concurrency == Approx(2994.0 / 1250.0));
  CHECK(r.contexts[0].max_sequences == 2);
}

TEST_CASE("SGLang mem_fraction_static follows its GPU rule", "[capacity][sglang]") {
  // H100: 81,559 MiB; reserved 512 + 8,192 x 1.5 + 256 x 2 + 1/8 x 1,024 = 13,440 MiB.
  CHECK(sglang_mem_fraction_static(gpu("h100-sxm"), 1, 1, false) == Approx(0.835));
  CHECK(sglang_mem_fraction_static(gpu("h200"), 1, 1, false) == Approx(0.907));
  CHECK(sglang_mem_fraction_static(gpu("h200"), 8, 1, false) == Approx(0.897));
}

TEST_CASE("SGLang is token-granular over a cell of all layers", "[capacity][sglang]") {
  // DeepSeek-V3: cell = 61 x 576 x 2 B = 70,272 B, the latent on every rank.
  auto req = request(zoo("deepseek-v3"), "h200", Engine::sglang, {131072});
  req.parallel.tp = 8;
  req.engine.kv_cache_bytes = 10ULL << 30;
  CapacityResult r = compute_capacity(req);
  CHECK(r.kv_bytes_per_token_per_gpu == 70272);
  CHECK(r.kv_tokens == (10ULL << 30) / 70272);
  CHECK(r.contexts[0].max_sequences == (10ULL << 30) / 70272 / 131072);
  CHECK(r.block_size == 0);
}

// SGLang's max_running_requests when not given (resolve_max_num_reqs): ⌊tokens / context · 512⌋
// within [2,048, 4,096], at most tokens // 2. Qwen3-14B: context 40,960, cell 40 x 2 x 8 x 128 x
// 2 = 163,840 B per token, pages of 1 on an H100:
//   40 GiB: 42,949,672,960 // 163,840 = 262,144 tokens; ⌊6.4 x 512⌋ = 3,276
//   70 GiB: 458,752 tokens; 11.2 x 512 = 5,734.4, capped at 4,096
//   2 GiB: 13,107 tokens; ⌊163.8⌋ raised to 2,048, under 13,107 // 2 = 6,553
//   256 MiB: 1,638 tokens; 2,048, but at most 1,638 // 2 = 819
TEST_CASE("SGLang's running requests follow its pool", "[capacity][sglang]") {
  auto running = [](u64 pool) {
    auto req = request(qwen3_14b(), "h100-sxm", Engine::sglang, {4096});
    req.engine.kv_cache_bytes = pool;
    return compute_capacity(req).max_seqs;
  };
  CHECK(running(40ULL << 30) == 3276);
  CHECK(running(70ULL << 30) == 4096);
  CHECK(running(2ULL << 30) == 2048);
  CHECK(running(256ULL << 20) == 819);
}

// TensorRT-LLM: Llama-3.1-70B at TP 4: ceil(8 / 4) = 2 KV heads per rank:
// 80 x 2 x 2 x 128 x 2 B = 81,920 B per token. With 40 GiB measured peak on an H100:
// kv = floor((85,520,809,984 - 42,949,672,960) x 0.9) = 38,314,023,321 B; max_tokens =
// 38,314,023,321 // 81,920 = 467,700; blocks of 32 rounded down (resource_manager.py
// calculate_max_num_blocks: int(max_tokens // tokens_per_block)) = 14,615.
TEST_CASE("TensorRT-LLM takes its fraction of what is free after the peak", "[capacity][trtllm]") {
  auto req = request(zoo("llama-3.1-70b"), "h100-sxm", Engine::trtllm, {8192});
  req.parallel.tp = 4;
  req.engine.non_kv_bytes = 40ULL << 30;
  CapacityResult r = compute_capacity(req);
  CHECK(r.kv_bytes_per_token_per_gpu == 81920);
  CHECK(r.kv_pool_bytes_per_gpu == 38314023321ULL);
  CHECK(r.kv_tokens == 467700);
  CHECK(r.block_size == 32);
  CHECK(r.num_blocks == 14615);
  CHECK(r.contexts[0].max_sequences == 14615 / 256); // 8,192 tokens: 256 blocks each
}

TEST_CASE("tensor parallelism splits GQA heads and replicates the MLA latent", "[capacity][tp]") {
  auto llama = request(zoo("llama-3.1-70b"), "h100-sxm", Engine::plain, {4096});
  llama.parallel.tp = 16;
  llama.parallel.gpus = 16;
  // 8 KV heads over 16 ranks: one head per rank, replicated.
  CHECK(compute_capacity(llama).kv_bytes_per_token_per_gpu == 80ULL * 2 * 1 * 128 * 2);
  llama.parallel.tp = 3;
  llama.parallel.gpus = 3;
  CHECK_THROWS_WITH(compute_capacity(llama), Catch::Contains("cannot be split"));

  auto v3 = request(zoo("deepseek-v3"), "h200", Engine::plain, {131072});
  v3.parallel.tp = 8;
  CapacityResult tp8 = compute_capacity(v3);
  CHECK(tp8.kv_bytes_per_token_per_gpu == 70272); // 8 copies of the latent
  CHECK(tp8.kv_pools == 1);
  v3.parallel.dp_attention = true;
  CapacityResult dp = compute_capacity(v3);
  CHECK(dp.kv_pools == 8);                                     // each rank its own sequences
  CHECK(dp.weights_bytes_per_gpu > tp8.weights_bytes_per_gpu); // attention replicated
  CHECK(dp.contexts[0].max_sequences % 8 == 0);
  v3.parallel.dp_attention = false;
  v3.parallel.dcp = 8;
  CapacityResult dcp = compute_capacity(v3);
  // Each of the 8 ranks holds every 8th token: the same pool holds 8x the tokens.
  CHECK(dcp.kv_pool_bytes_per_gpu == tp8.kv_pool_bytes_per_gpu);
  CHECK(dcp.kv_tokens == tp8.kv_tokens * 8);
  CHECK(dcp.contexts[0].max_sequences >= 7 * tp8.contexts[0].max_sequences);
}

TEST_CASE("tensor parallelism splits a state layer's state as it splits heads", "[capacity][tp]") {
  // Qwen3-Next-80B-A3B: 36 Gated DeltaNet layers x 548,864 bf16 elements of state, 12 full
  // layers of 2 KV heads x 256 x 2 (K and V) x 2 B (docs/formulas.md §5).
  auto next = request(zoo("qwen3-next-80b-a3b"), "h200", Engine::plain, {4096});
  next.explain = true;
  for (u64 tp : {1u, 2u, 4u}) {
    next.parallel.tp = tp;
    next.parallel.gpus = tp;
    CapacityResult r = compute_capacity(next);
    INFO("tp " << tp);
    u64 state = 36 * (548864 / tp) * 2;
    u64 kv_heads = 2 / std::min<u64>(tp, 2); // one per rank from tp 2, replicated past it
    u64 kv = 12 * kv_heads * 256 * 2 * 2 * 4096;
    CHECK(r.contexts[0].bytes_per_sequence == state + kv);
    if (tp == 4) {
      // conv: 3 x (8,192 / 4) channels; recurrent: 32 / 4 value heads x 128 x 128.
      auto lines = render_derivation(r.derivation);
      CHECK(std::find(lines.begin(), lines.end(),
                      "state: 36 layers, gated_deltanet state per layer per sequence: conv 3 × "
                      "2,048 × 2 B (bf16) + recurrent 8 × 128 × 128 × 2 B (bf16) = 274,432 B, "
                      "whatever the context") != lines.end());
    }
  }
}

TEST_CASE("weights that do not fit say so", "[capacity]") {
  CapacityResult r =
      compute_capacity(request(zoo("llama-3.1-405b"), "h100-sxm", Engine::plain, {4096}));
  CHECK_FALSE(r.fits);
  CHECK(r.reason.find("the weights alone") != std::string::npos);
  CHECK(r.contexts[0].max_sequences == 0);
}

TEST_CASE("the longest context at a concurrency is the boundary", "[capacity]") {
  auto req = request(zoo("llama-3.1-8b"), "h100-sxm", Engine::plain, {});
  req.max_context_at = 64;
  CapacityResult r = compute_capacity(req);
  REQUIRE(r.max_context_at);
  u64 l = *r.max_context_at;
  // plain: sequences = pool // (131,072 x L).
  CHECK(r.kv_pool_bytes_per_gpu / (131072 * l) >= 64);
  CHECK(r.kv_pool_bytes_per_gpu / (131072 * (l + 1)) < 64);
  REQUIRE(r.contexts.size() == 1);
  CHECK(r.contexts[0].tokens == l);
}

TEST_CASE("fp8 weights carry one fp32 scale per 128 x 128 block", "[capacity][weights]") {
  // Llama-3.1-8B: 6,979,321,856 linear weights in fp8 + 425,984 block scales x 4 B; the
  // embedding, head and norms (1,050,939,392) stay bf16: 9,082,904,576 B.
  const Model& m = zoo("llama-3.1-8b");
  WeightBytes w = weight_bytes(m, count_params(m), DType::fp8_e4m3, {});
  CHECK(w.total == 9082904576ULL);
  // DeepSeek-V3 with its MTP module: 41,540,496 scales, as its checkpoint stores.
  const Model& v3 = zoo("deepseek-v3");
  ParamCount p = count_params(v3);
  u64 linear = 0;
  u64 other = 0;
  for (const auto& t : p.tensors) {
    (t.linear ? linear : other) += t.params();
  }
  WeightSharding with_mtp;
  with_mtp.mtp = true;
  CHECK(weight_bytes(v3, p, std::nullopt, with_mtp).total == linear + 41540496ULL * 4 + other * 2);
}

// SGLang keeps a sliding-window pool apart only for the architectures it lists
// (model_config.py is_hybrid_swa_model). gpt-oss is listed: F = S = 18 layers x 2,048 B;
// cell = F + 0.8 S = 66,355.2 B; with a 40 GiB pool full = ⌊42,949,672,960 / 66,355.2⌋ =
// 647,269 tokens and sliding = ⌊0.8 x full⌋ = 517,815 (page 1 on Hopper). At 32,768 tokens:
// min(647,269 // 32,768, 517,815 // 128) = 19 sequences.
TEST_CASE("SGLang splits full and sliding pools 1 : 0.8 for the models it lists",
          "[capacity][sglang]") {
  auto req = request(zoo("gpt-oss-120b"), "h200", Engine::sglang, {32768});
  req.engine.kv_cache_bytes = 40ULL << 30;
  CapacityResult r = compute_capacity(req);
  CHECK(r.kv_tokens == 647269);
  REQUIRE(r.pool_groups.size() == 2);
  CHECK(r.pool_groups[0].kind == "full");
  CHECK(r.pool_groups[0].capacity == 647269);
  CHECK(r.pool_groups[1].kind == "sliding");
  CHECK(r.pool_groups[1].capacity == 517815);
  CHECK(r.contexts[0].max_sequences == 19);

  // Gemma 3 is not listed: one pool of 62 layers x 8,192 B = 507,904 B per token, every layer
  // at the full context: 42,949,672,960 // 507,904 = 84,562 tokens, 2 sequences of 32k.
  req = request(zoo("gemma-3-27b"), "h200", Engine::sglang, {32768});
  req.engine.kv_cache_bytes = 40ULL << 30;
  r = compute_capacity(req);
  CHECK(r.kv_tokens == 84562);
  REQUIRE(r.pool_groups.size() == 1);
  CHECK(r.contexts[0].max_sequences == 2);
}

// --mtp loads DeepSeek-V3's MTP module and gives its layer a KV cache: 62 × 1,152 B per token.
TEST_CASE("the MTP module adds weights and one layer of KV", "[capacity][mtp]") {
  auto req = request(zoo("deepseek-v3"), "h200", Engine::plain, {4096});
  req.parallel.tp = 8;
  CapacityResult without = compute_capacity(req);
  req.mtp = true;
  CapacityResult with = compute_capacity(req);
  CHECK(without.kv_bytes_per_token_per_gpu == 61 * 1152);
  CHECK(with.kv_bytes_per_token_per_gpu == 62 * 1152);
  CHECK(with.weights_bytes_per_gpu > without.weights_bytes_per_gpu);
}

TEST_CASE("a sequence's units stay what they are up to stable_until", "[capacity][pool]") {
  // Small blocks, windows and chunks, so every edge (block, window, chunk) is crossed.
  const PoolTerm full{CacheKind::full, 0, 4, 3};
  const PoolTerm sliding{CacheKind::sliding, 10, 4, 1};
  const PoolTerm sliding_edge{CacheKind::sliding, 8, 4, 2}; // window a whole number of blocks
  const PoolTerm chunked{CacheKind::chunked, 12, 4, 1};
  const PoolTerm chunked_short{CacheKind::chunked, 6, 4, 1}; // chunk not a whole number
  const PoolTerm state{CacheKind::state, 0, 1, 1};
  const std::vector<std::vector<PoolTerm>> pools{{full},
                                                 {sliding},
                                                 {sliding_edge},
                                                 {chunked},
                                                 {chunked_short},
                                                 {state},
                                                 {full, sliding},
                                                 {full, chunked, state},
                                                 {sliding, chunked_short, sliding_edge}};
  for (const auto& terms : pools) {
    SequencePool pool{"test", "blocks", 1000, terms};
    for (u64 t = 0; t <= 120; ++t) {
      INFO("terms " << terms.size() << ", first kind " << static_cast<int>(terms[0].kind)
                    << ", tokens " << t);
      u64 until = pool.stable_until(t);
      REQUIRE(until >= t);
      u64 units = pool.units_at(t);
      for (u64 x = t; x <= std::min<u64>(until, t + 64); ++x) {
        REQUIRE(pool.units_at(x) == units);
      }
      if (terms.size() == 1 && terms[0].kind == CacheKind::full) {
        CHECK(pool.units_at(until + 1) == units + 3); // tight: one token more takes a block
      }
    }
  }
  // A state holds its one slot at any length.
  SequencePool states{"test", "slots", 10, {state}};
  CHECK(states.stable_until(0) == ~u64{0});
  CHECK(states.stable_until(1'000'000) == ~u64{0});
}

TEST_CASE("a deployment is checked once and its counts derived", "[capacity][deployment]") {
  const Model& v3 = *find_builtin_model("deepseek-v3");
  // 16 GPUs at tp 8: two copies; dp-attention gives each rank its own pool.
  Deployment d = resolve_deployment(v3, {16, 8, 1, 0, 1, true}, std::nullopt);
  CHECK(d.parallel.gpus == 16);
  CHECK(d.parallel.ep == 8); // experts over tp when unset
  CHECK(d.replicas == 2);
  CHECK(d.attention_tp == 1);
  CHECK(d.kv_pools == 16);
  CHECK(d.weight_dtype == DType::fp8_e4m3); // the checkpoint's
  CHECK(resolve_deployment(v3, {0, 8, 1, 0, 1, false}, DType::bf16).weight_dtype == DType::bf16);
  CHECK(resolve_deployment(v3, {0, 8, 1, 0, 1, false}, std::nullopt).parallel.gpus == 8);
  CHECK_THROWS_WITH(resolve_deployment(v3, {12, 8, 1, 0, 1, false}, std::nullopt),
                    Catch::Contains("not a multiple of tp × pp = 8"));
  CHECK_THROWS_WITH(resolve_deployment(v3, {0, 8, 1, 0, 3, false}, std::nullopt),
                    Catch::Contains("--dcp 3 must divide --tp 8"));
  CHECK_THROWS_WITH(
      resolve_deployment(*find_builtin_model("llama-3.1-8b"), {0, 2, 1, 0, 2, false}, std::nullopt),
      Catch::Contains("--dcp applies to MLA models"));
  CHECK_THROWS_WITH(resolve_deployment(v3, {0, 1, 62, 0, 1, false}, std::nullopt),
                    Catch::Contains("more pipeline stages than deepseek-v3's 61 layers"));
  CHECK_THROWS_WITH(resolve_deployment(v3, {0, 8, 1, 16, 1, false}, std::nullopt),
                    Catch::Contains("--ep 16 shards the experts over more GPUs than the 8 GPUs"));
  CHECK_THROWS_WITH(resolve_deployment(v3, {0, 0, 1, 0, 1, false}, std::nullopt),
                    Catch::Contains("at least 1"));
  // 128 query heads over tp 3; with dp-attention each rank holds all heads.
  CHECK_THROWS_WITH(resolve_deployment(v3, {0, 3, 1, 0, 1, false}, std::nullopt),
                    Catch::Contains("128 query heads cannot be split over tensor parallel 3"));
  CHECK(resolve_deployment(v3, {0, 3, 1, 0, 1, true}, std::nullopt).attention_tp == 1);
}

TEST_CASE("a plan reads dp and redundant_experts into its deployment", "[plan][deployment]") {
  plan::Plan p = plan::parse_plan("scenarios:\n"
                                  "  - name: wide\n"
                                  "    model: deepseek-v3\n"
                                  "    gpu: h200\n"
                                  "    gpus: 16\n"
                                  "    tp: 16\n"
                                  "    dp: 2\n"
                                  "    ep: 16\n"
                                  "    redundant_experts: 16\n"
                                  "    require:\n"
                                  "      - fits: true\n",
                                  "plan.yaml");
  REQUIRE(p.scenarios.size() == 1);
  const kv::Parallelism& par = p.scenarios[0].request.parallel;
  CHECK(par.dp == 2);
  CHECK(par.redundant_experts == 16);
  kv::Deployment d = kv::resolve_deployment(*find_builtin_model("deepseek-v3"), par, std::nullopt);
  CHECK(d.attention_tp == 8);
  CHECK(d.experts_per_rank == 17); // (256 + 16) / 16
}

TEST_CASE("a plan's engine keys are checked against each scenario's engine, defaults merged",
          "[plan][engine]") {
  auto parse = [](const std::string& body) { return plan::parse_plan(body, "plan.yaml"); };
  SECTION("defaults: engine applies to every scenario, and so does its fraction") {
    plan::Plan p = parse("defaults:\n"
                         "  engine: sglang\n"
                         "  mem_fraction_static: 0.8\n"
                         "scenarios:\n"
                         "  - model: llama-3.1-8b\n"
                         "    require: [{fits: true}]\n");
    CHECK(p.scenarios[0].request.engine.engine == kv::Engine::sglang);
    CHECK(p.scenarios[0].request.engine.memory_fraction == 0.8);
  }
  SECTION("a default fraction reaches only the scenarios of its engine") {
    plan::Plan p = parse("defaults:\n"
                         "  gpu_memory_utilization: 0.85\n"
                         "  mem_fraction_static: 0.8\n"
                         "scenarios:\n"
                         "  - model: llama-3.1-8b\n"
                         "    require: [{fits: true}]\n"
                         "  - model: llama-3.1-8b\n"
                         "    engine: sglang\n"
                         "    require: [{fits: true}]\n"
                         "  - model: llama-3.1-8b\n"
                         "    engine: trtllm\n"
                         "    require: [{fits: true}]\n");
    CHECK(p.scenarios[0].request.engine.memory_fraction == 0.85);
    CHECK(p.scenarios[1].request.engine.memory_fraction == 0.8);
    CHECK_FALSE(p.scenarios[2].request.engine.memory_fraction.has_value());
  }
  SECTION("a vLLM-only default does not reach an SGLang scenario") {
    plan::Plan p = parse("defaults:\n"
                         "  num_gpu_blocks_override: 1000\n"
                         "scenarios:\n"
                         "  - model: llama-3.1-8b\n"
                         "    require: [{fits: true}]\n"
                         "  - model: llama-3.1-8b\n"
                         "    engine: sglang\n"
                         "    require: [{fits: true}]\n");
    CHECK(p.scenarios[0].request.engine.num_gpu_blocks == 1000);
    CHECK_FALSE(p.scenarios[1].request.engine.num_gpu_blocks.has_value());
  }
  SECTION("a scenario's own key of another engine is refused where it stands") {
    CHECK_THROWS_WITH(parse("defaults:\n"
                            "  engine: sglang\n"
                            "scenarios:\n"
                            "  - model: llama-3.1-8b\n"
                            "    num_gpu_blocks_override: 1000\n"
                            "    require: [{fits: true}]\n"),
                      Catch::Contains("plan.yaml:5:") &&
                          Catch::Contains("num_gpu_blocks_override belongs to engine vllm") &&
                          Catch::Contains("runs sglang"));
  }
  SECTION("a default no scenario can use is refused") {
    CHECK_THROWS_WITH(parse("defaults:\n"
                            "  free_gpu_memory_fraction: 0.9\n"
                            "scenarios:\n"
                            "  - model: llama-3.1-8b\n"
                            "    require: [{fits: true}]\n"),
                      Catch::Contains("plan.yaml:2:") && Catch::Contains("no scenario runs it"));
  }
  SECTION("a fraction of 0 is a bad plan, not a failed requirement") {
    CHECK_THROWS_WITH(parse("scenarios:\n"
                            "  - model: llama-3.1-8b\n"
                            "    gpu_memory_utilization: 0\n"
                            "    require: [{fits: true}]\n"),
                      Catch::Contains("must be above 0"));
  }
}

TEST_CASE("a plan's model files are relative to the plan; names and repo ids stay as given",
          "[plan][paths]") {
  auto model_of = [](const std::string& model) {
    return plan::parse_plan("scenarios:\n  - model: " + model + "\n    require: [{fits: true}]\n",
                            "plans/gate/plan.yaml")
        .scenarios[0]
        .model;
  };
  CHECK(model_of("m.yaml") == "plans/gate/m.yaml");
  CHECK(model_of("sub/config.json") == "plans/gate/sub/config.json");
  CHECK(model_of("../zoo/m.yml") == "plans/gate/../zoo/m.yml");
  CHECK(model_of("/abs/m.yaml") == "/abs/m.yaml");
  CHECK(model_of("llama-3.1-8b") == "llama-3.1-8b");
  CHECK(model_of("Qwen/Qwen3-32B") == "Qwen/Qwen3-32B");
}

TEST_CASE("vLLM's start-up check holds the null block back, and SGLang and TensorRT-LLM start",
          "[capacity][max_model_len]") {
  // Llama-3.1-8B: a block of 16 tokens over 32 layers of 8 heads × 2 × 128 × 2 B is 2 MiB, so a
  // pool given as 100 such blocks has 100 blocks; one request may take 99.
  const u64 block_bytes = 16ULL * 32 * 8 * 2 * 128 * 2;
  REQUIRE(block_bytes == 2097152);
  CapacityRequest q = request(zoo("llama-3.1-8b"), "h100", Engine::vllm, {1024});
  q.engine.kv_cache_bytes = 100 * block_bytes;

  SECTION("a length of 99 blocks starts; its estimate is 99 × 16 = 1,584") {
    q.engine.max_model_len = 1584;
    CapacityResult r = compute_capacity(q);
    CHECK(r.num_blocks == 100);
    CHECK(r.fits);
    CHECK(r.longest_request == 1584);
  }
  SECTION("one token more needs the 100th block, which the null block holds") {
    q.engine.max_model_len = 1585;
    CapacityResult r = compute_capacity(q);
    CHECK_FALSE(r.fits);
    CHECK(r.longest_request == 1584);
    CHECK(r.reason.find("vLLM refuses to start") != std::string::npos);
    CHECK(r.reason.find("estimated maximum model length is 1,584") != std::string::npos);
    CHECK_FALSE(holds_every_context(r));
  }
  SECTION("without --max-model-len the model's 131,072 is checked and only remarked on") {
    CapacityResult r = compute_capacity(q);
    CHECK(r.fits);
    CHECK(r.max_model_len == 131072);
    CHECK_FALSE(r.max_model_len_given);
    CHECK(std::any_of(r.notes.begin(), r.notes.end(), [](const std::string& n) {
      return n.find("started without --max-model-len") != std::string::npos;
    }));
  }
  SECTION("--num-gpu-blocks-override replaces the count before the check") {
    q.engine.kv_cache_bytes.reset();
    q.engine.num_gpu_blocks = 50;
    q.engine.max_model_len = 49 * 16;
    q.contexts = {512};
    CapacityResult r = compute_capacity(q);
    CHECK(r.num_blocks == 50);
    CHECK(r.kv_pool_bytes_per_gpu == 50 * block_bytes);
    CHECK(r.fits);
    q.engine.max_model_len = 49 * 16 + 1;
    CHECK_FALSE(compute_capacity(q).fits);
  }
  SECTION("--max-model-len auto fits the length to the blocks left after the null block") {
    q.engine.max_model_len_auto = true;
    q.contexts.clear();
    CapacityResult r = compute_capacity(q);
    CHECK(r.fits);
    CHECK(r.max_model_len == 1584);
    REQUIRE(r.contexts.size() == 1); // the length it fitted is the row
    CHECK(r.contexts[0].tokens == 1584);
    CHECK(r.contexts[0].max_sequences == 1);
  }
  SECTION("--max-context-at stops at --max-model-len and says so") {
    q.engine.max_model_len = 1000;
    q.contexts.clear();
    q.max_context_at = 1;
    CapacityResult r = compute_capacity(q);
    CHECK(r.max_context_at == 1000);
    CHECK(r.max_context_limited_by == "max_model_len");
  }
  SECTION("a context past --max-model-len is refused as bad input") {
    q.engine.max_model_len = 1000;
    CHECK_THROWS_AS(compute_capacity(q), InputError);
  }
  SECTION("SGLang starts with a short pool and rejects long requests; a context it cannot hold "
          "is no fit") {
    q.engine.engine = Engine::sglang;
    q.contexts = {1024, 4096};
    q.engine.kv_cache_bytes = 2000 * 131072ULL; // 2,000 tokens of 128 KiB
    CapacityResult r = compute_capacity(q);
    CHECK(r.fits);
    CHECK(r.longest_request == 2000);
    CHECK(r.contexts[0].max_sequences == 1);
    CHECK(r.contexts[1].max_sequences == 0);
    CHECK_FALSE(holds_every_context(r));
    CHECK(std::any_of(r.notes.begin(), r.notes.end(), [](const std::string& n) {
      return n.find("rejects requests over 1,999 tokens") != std::string::npos;
    }));
  }
  SECTION("TensorRT-LLM lowers max_seq_len to its blocks × 32") {
    q.engine.engine = Engine::trtllm;
    q.engine.kv_cache_bytes = 64 * 32 * 131072ULL; // 64 blocks of 32 tokens
    CapacityResult r = compute_capacity(q);
    CHECK(r.fits);
    CHECK(r.longest_request == 64 * 32);
  }
}

TEST_CASE("a deployment that does not fit names the smallest tp that does", "[capacity]") {
  CapacityRequest q = request(zoo("llama-3.1-70b"), "h100", Engine::vllm, {32768});
  q.parallel.tp = 2;
  q.parallel.gpus = 2;
  CapacityResult r = compute_capacity(q);
  CHECK(r.fits);
  CHECK_FALSE(holds_every_context(r)); // 2,048 blocks needed, 1,756 usable
  std::optional<Parallelism> p = smallest_fitting_tp(q);
  REQUIRE(p);
  CHECK(p->tp == 4);
  CHECK(p->gpus == 4);
}
