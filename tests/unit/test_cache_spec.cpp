// Cache groups: one test per spec kind, each number derived by hand in a comment
// (docs/formulas.md, "Cache groups" and "Per-sequence state").

#include <catch2/catch.hpp>

#include <kvcalc/kv/cache_spec.hpp>
#include <kvcalc/model/loader.hpp>
#include <kvcalc/model/registry.hpp>

using namespace kvcalc;
using namespace kvcalc::kv;
using namespace kvcalc::model;

namespace {

const Model& zoo(const char* name) {
  return *find_builtin_model(name);
}

std::vector<CacheGroup> groups(const Model& m, u64 tp = 1, CacheRequest cache = {},
                               StateDtypeDefaults engine = {}) {
  CacheLayout layout;
  layout.cache = cache;
  layout.attention_tp = tp;
  layout.state_defaults = engine;
  return cache_groups(m, layout);
}

const CacheGroup& find(const std::vector<CacheGroup>& gs, const std::string& name) {
  for (const auto& g : gs) {
    if (g.name == name) {
      return g;
    }
  }
  FAIL("no group " << name);
  static CacheGroup none;
  return none;
}

Model yaml(const std::string& body) {
  return parse_model_yaml("name: t\nsource: test\nhidden_size: 4096\nvocab_size: 32000\n" + body,
                          "t.yaml");
}

} // namespace

TEST_CASE("full attention: KV heads per GPU, floor or ceiling", "[cache_spec][full]") {
  // Llama-3.1-8B: 32 layers, 8 KV heads of 128, bf16: 8 x (128 + 128) x 2 = 4,096 B per layer.
  const Model& m = zoo("llama-3.1-8b");
  auto g = groups(m);
  REQUIRE(g.size() == 1);
  CHECK(g[0].name == "full");
  CHECK(g[0].layers == 32);
  CHECK(g[0].spec.bytes_per_token == 4096);
  // tp 2: 4 heads, 2,048 B; tp 16: 8 heads cannot split, each rank keeps one (replicated).
  CHECK(groups(m, 2)[0].spec.bytes_per_token == 2048);
  CHECK(groups(m, 16)[0].spec.kv_heads == 1);
  // A tp that neither divides 8 nor is a multiple of it cannot split the heads.
  CHECK_THROWS_WITH(groups(m, 3), Catch::Contains("cannot be split over tensor parallel 3"));
  // TensorRT-LLM rounds up: at tp 16 the same one head.
  CacheLayout trt;
  trt.attention_tp = 16;
  trt.head_split = HeadSplit::ceiling;
  CHECK(cache_groups(m, trt)[0].spec.kv_heads == 1);
  CHECK(g[0].spec.bytes_at(1000) == 4096ULL * 1000);
}

TEST_CASE("sliding layers hold their window, with heads and widths of their own",
          "[cache_spec][sliding]") {
  // 4 layers, sliding, full, sliding, full; full: 8 KV heads x 128; sliding: 4 KV heads x 64.
  // full: 8 x 2 x 128 x 2 = 4,096 B; sliding: 4 x 2 x 64 x 2 = 1,024 B, window 512.
  Model m = yaml("layers: 4\nattention: {kind: gqa, heads: 32, kv_heads: 8, head_dim: 128}\n"
                 "sliding_attention: {kv_heads: 4, head_dim: 64}\nsliding_window: 512\n"
                 "layer_pattern: alternating\nmlp: {intermediate_size: 8192}\n");
  auto g = groups(m);
  const CacheGroup& full = find(g, "full");
  const CacheGroup& sliding = find(g, "sliding");
  CHECK(full.spec.bytes_per_token == 4096);
  CHECK(sliding.spec.bytes_per_token == 1024);
  CHECK(sliding.layers == 2);
  CHECK(sliding.spec.held_tokens(100) == 100);
  CHECK(sliding.spec.held_tokens(10000) == 512);
  // At 10,000 tokens: 2 x 4,096 x 10,000 + 2 x 1,024 x 512 = 82,968,576 B.
  CHECK(bytes_at(g, 10000) == 82968576ULL);
}

TEST_CASE("chunked layers hold their chunk", "[cache_spec][chunked]") {
  // Llama-4-Scout: 48 layers, 36 chunked (8,192) and 12 global, 8 KV heads x 128 = 4,096 B.
  // At 20,000 tokens: 12 x 4,096 x 20,000 + 36 x 4,096 x 8,192 = 983,040,000 + 1,207,959,552
  // = 2,190,999,552 B.
  auto g = groups(zoo("llama-4-scout"));
  CHECK(find(g, "chunked").layers == 36);
  CHECK(find(g, "chunked").spec.window == 8192);
  CHECK(find(g, "full").layers == 12);
  CHECK(bytes_at(g, 20000) == 2190999552ULL);
}

TEST_CASE("MLA: latent, expanded and fp8_ds_mla", "[cache_spec][mla]") {
  const Model& v3 = zoo("deepseek-v3");
  // Latent: (512 + 64) x 2 = 1,152 B, the same on every TP rank.
  CHECK(groups(v3)[0].spec.bytes_per_token == 1152);
  CHECK(groups(v3, 8)[0].spec.bytes_per_token == 1152);
  // Expanded at tp 8: 16 heads x ((128 + 64) + 128) x 2 = 10,240 B.
  CacheRequest expanded;
  expanded.mla_format = MlaCacheFormat::expanded;
  CHECK(groups(v3, 8, expanded)[0].spec.bytes_per_token == 10240);
  // fp8_ds_mla: 512 fp8 + 4 fp32 scales + 64 bf16 = 656 B.
  CacheRequest ds;
  ds.mla_format = MlaCacheFormat::fp8_ds_mla;
  CHECK(groups(v3, 1, ds)[0].spec.bytes_per_token == 656);
}

TEST_CASE("the DSA indexer keeps a key per token beside the latent", "[cache_spec][indexer]") {
  // DeepSeek-V3.2: 61 layers, index_head_dim 128: 128 fp8 values + 1 fp32 scale = 132 B.
  auto g = groups(zoo("deepseek-v3.2"));
  REQUIRE(g.size() == 2);
  const CacheGroup& indexer = find(g, "indexer");
  CHECK(indexer.layers == 61);
  CHECK(indexer.spec.bytes_per_token == 132);
  CHECK(bytes_per_token(g) == 61ULL * (1152 + 132));
}

TEST_CASE("Mamba state: conv tail and SSM, split over tp", "[cache_spec][state][mamba1]") {
  // mamba-2.8b: d_inner 5,120, d_state 16, conv 4: conv (3, 5,120) + SSM (5,120, 16), bf16:
  // (15,360 + 81,920) x 2 = 194,560 B per layer; tp 2: half.
  auto g = groups(zoo("mamba-2.8b"));
  REQUIRE(g.size() == 1);
  const CacheSpec& s = g[0].spec;
  REQUIRE(s.state.size() == 2);
  CHECK(s.state[0].shape == std::vector<u64>{3, 5120});
  CHECK(s.state[1].shape == std::vector<u64>{5120, 16});
  CHECK(s.state_bytes == 194560);
  CHECK(groups(zoo("mamba-2.8b"), 2)[0].spec.state_bytes == 97280);
  CHECK(s.bytes_at(1) == s.bytes_at(1000000)); // whatever the context
}

TEST_CASE("Mamba-2 state: groups go with the heads", "[cache_spec][state][mamba2]") {
  // Mamba-Codestral-7B: d_inner 8,192, 8 groups, d_state 128, 128 heads of 64, conv 4:
  // conv (3, 8,192 + 2 x 8 x 128) + SSM (128, 64, 128), bf16 = (30,720 + 1,048,576) x 2.
  const Model& m = zoo("mamba-codestral-7b");
  CHECK(groups(m)[0].spec.state_bytes == 2158592);
  // tp 2: conv (3, 5,120), SSM (64, 64, 128).
  CHECK(groups(m, 2)[0].spec.state[0].shape == std::vector<u64>{3, 5120});
  CHECK(groups(m, 2)[0].spec.state[1].shape == std::vector<u64>{64, 64, 128});
  // One group is replicated to every rank: d_inner 4,096, state 128, tp 4: conv width
  // (4,096 + 2 x 4 x 128) / 4 = 1,280 = 4,096 / 4 + 2 x 128.
  Model one = yaml("layers: 2\nlayer_pattern: state\nffn_pattern: none\n"
                   "state: {kind: mamba2, heads: 64, head_dim: 64, inner: 4096, groups: 1, "
                   "state_size: 128, conv_kernel: 4}\n");
  CHECK(groups(one, 4)[0].spec.state[0].shape == std::vector<u64>{3, 1280});
  // Three groups cannot split over two ranks.
  Model three = yaml("layers: 2\nlayer_pattern: state\nffn_pattern: none\n"
                     "state: {kind: mamba2, heads: 96, head_dim: 64, inner: 6144, groups: 3, "
                     "state_size: 128, conv_kernel: 4}\n");
  CHECK_THROWS_WITH(groups(three, 2), Catch::Contains("3 groups cannot be split"));
}

TEST_CASE("Gated DeltaNet, KDA and lightning states", "[cache_spec][state]") {
  // Qwen3-Next: conv (3, 2 x 16 x 128 + 32 x 128) + recurrent (32, 128, 128), bf16.
  CHECK(find(groups(zoo("qwen3-next-80b-a3b")), "state").spec.state_bytes ==
        (3 * 8192 + 32 * 128 * 128) * 2);
  // Kimi-Linear: conv (3, 3 x 32 x 128) in bf16 + recurrent (32, 128, 128) in fp32, whatever
  // is asked of the SSM part (vLLM's kda_state_dtype).
  CacheRequest bf16_ssm;
  bf16_ssm.ssm_state_dtype = DType::bf16;
  CacheSpec kda = find(groups(zoo("kimi-linear-48b-a3b"), 1, bf16_ssm), "state").spec;
  CHECK(kda.state[1].dtype == DType::fp32);
  CHECK(kda.state_bytes == 3 * 12288 * 2 + 32 * 128 * 128 * 4);
  // MiniMax-M1 lightning: 64 heads x 128 x 128, bf16; tp 8: 8 heads.
  CHECK(find(groups(zoo("minimax-m1")), "state").spec.state_bytes == 64 * 128 * 128 * 2);
  CHECK(find(groups(zoo("minimax-m1"), 8), "state").spec.state_bytes == 8 * 128 * 128 * 2);
  // 32 value heads cannot split over 3 ranks.
  CHECK_THROWS_WITH(groups(zoo("qwen3-next-80b-a3b"), 3), Catch::Contains("cannot be split"));
}

TEST_CASE("state dtypes: the user's, the model's where the engine keeps it, the engine's",
          "[cache_spec][state][dtype]") {
  // Qwen3.5-27B's config keeps its SSM state in fp32: recurrent 48 x 128 x 128 x 4 B.
  const Model& q = zoo("qwen3.5-27b");
  CacheSpec own = find(groups(q), "state").spec;
  CHECK(own.state[1].dtype == DType::fp32);
  // An engine that ignores the model's SSM dtype keeps the conv dtype (bf16).
  StateDtypeDefaults ignores{std::nullopt, std::nullopt, false};
  CHECK(find(groups(q, 1, {}, ignores), "state").spec.state[1].dtype == DType::bf16);
  // SGLang's rule: conv bf16, SSM fp32.
  StateDtypeDefaults sglang{DType::bf16, DType::fp32, true};
  CHECK(find(groups(zoo("qwen3-next-80b-a3b"), 1, {}, sglang), "state").spec.state[1].dtype ==
        DType::fp32);
  // The user's wins over all: --mamba-cache-dtype fp16 sets both parts.
  CacheRequest fp16;
  fp16.state_dtype = DType::fp16;
  CacheSpec asked = find(groups(q, 1, fp16, sglang), "state").spec;
  CHECK(asked.state[0].dtype == DType::fp16);
  CHECK(asked.state[1].dtype == DType::fp16);
}

TEST_CASE("KV-shared layers store none; MTP layers add full ones; pp takes a stage",
          "[cache_spec]") {
  // 6 layers, the last 2 read an earlier layer's KV: 4 store it.
  Model shared = yaml("layers: 6\nattention: {kind: gqa, heads: 32, kv_heads: 8, head_dim: 128}\n"
                      "mlp: {intermediate_size: 8192}\nkv_shared_layers: 2\n");
  auto g = groups(shared);
  CHECK(g[0].layers == 4);
  CHECK(g[0].shared_layers == 2);
  // DeepSeek-V3 with its MTP layer loaded: 62 layers of latent.
  CacheLayout mtp;
  mtp.mtp_layers = 1;
  CHECK(cache_groups(zoo("deepseek-v3"), mtp)[0].layers == 62);
  // pp 2 of 61 + 1 layers: the first stage's 31.
  mtp.pp = 2;
  CHECK(cache_groups(zoo("deepseek-v3"), mtp)[0].layers == 31);
}
