#include <catch2/catch.hpp>

#include <fstream>
#include <map>
#include <sstream>

#include <kvcalc/kv/footprint.hpp>
#include <kvcalc/model/loader.hpp>
#include <kvcalc/model/registry.hpp>
#include <kvcalc/report/table.hpp>

using namespace kvcalc;
using namespace kvcalc::report;
using namespace kvcalc::kv;
using namespace kvcalc::model;

namespace {

const Model& zoo(const char* name) {
  const Model* m = find_builtin_model(name);
  REQUIRE(m != nullptr);
  return *m;
}

Footprint fp(const Model& m, std::vector<u64> contexts = {}, CacheRequest cache = {},
             u64 block = 0) {
  FootprintOptions o;
  o.cache = cache;
  o.contexts = std::move(contexts);
  o.block_size = block;
  return compute_footprint(m, o);
}

CacheRequest dtype(DType t) {
  CacheRequest r;
  r.dtype = t;
  return r;
}

} // namespace

// The MLA article's table, per layer per token in bf16:
//   MHA 64 heads x 128: 2 x 64 x 128 x 2 B = 32,768 B
//   GQA 8 KV heads:     2 x 8 x 128 x 2 B  = 4,096 B (-87.5%)
//   MLA latent:         (512 + 64) x 2 B   = 1,152 B (-96.5%)
TEST_CASE("the article's table: MHA, GQA-8, MLA per layer", "[footprint][article]") {
  auto mha = fp(zoo("llama-1-65b"), {131072});
  auto gqa = fp(zoo("llama-3.1-70b"), {131072});
  auto mla = fp(zoo("deepseek-v3"), {131072});
  CHECK(mha.bytes_per_token_per_layer == 32768);
  CHECK(gqa.bytes_per_token_per_layer == 4096);
  CHECK(mla.bytes_per_token_per_layer == 1152);
  CHECK(1.0 - 4096.0 / 32768.0 == Approx(0.875));
  CHECK(1.0 - 1152.0 / 32768.0 == Approx(0.965).epsilon(0.001));
  // 80 layers x 32,768 B = 2,621,440 B per token; x 131,072 tokens = 320 GiB.
  CHECK(mha.bytes_per_token == 2621440);
  CHECK(mha.contexts[0].kv_bytes == 343597383680ULL);
  // 80 x 4,096 = 327,680 B (320 KiB) per token: 40 GiB at 128k.
  CHECK(gqa.bytes_per_token == 327680);
  CHECK(gqa.contexts[0].kv_bytes == 42949672960ULL);
}

TEST_CASE("public cross-checks", "[footprint]") {
  // LLaMA-7B = Llama-2-7B geometry: 32 layers x 2 x 32 heads x 128 x 2 B = 524,288 B/token;
  // 544 tokens = 285,212,672 B = 285.2 MB (llm-analysis).
  auto llama7 = fp(zoo("llama-2-7b"), {544});
  CHECK(llama7.bytes_per_token == 524288);
  CHECK(llama7.contexts[0].kv_bytes == 285212672);
  // Llama-2-13B: 40 x 2 x 40 x 128 x 2 = 819,200 B/token; 8,192 tokens = 6.7 GB.
  auto llama13 = fp(zoo("llama-2-13b"), {8192});
  CHECK(llama13.bytes_per_token == 819200);
  CHECK(llama13.contexts[0].kv_bytes == 6710886400ULL);
  // Llama-3-8B: 32 x 2 x 8 x 128 x 2 = 131,072 B/token.
  CHECK(fp(zoo("llama-3.1-8b")).bytes_per_token == 131072);
}

TEST_CASE("DeepSeek-V3 in every MLA cache format", "[footprint][mla]") {
  const Model& v3 = zoo("deepseek-v3");
  // latent bf16: 61 x (512 + 64) x 2 B = 70,272 B.
  CHECK(fp(v3).bytes_per_token == 70272);
  // fp8_ds_mla: 61 x (512 x 1 B + 4 x 4 B scales + 64 x 2 B RoPE) = 61 x 656 = 40,016 B.
  CacheRequest ds;
  ds.mla_format = MlaCacheFormat::fp8_ds_mla;
  auto f = fp(v3, {}, ds);
  CHECK(f.bytes_per_token_per_layer == 656);
  CHECK(f.bytes_per_token == 40016);
  // expanded bf16: 128 heads x (192 + 128) x 2 B = 81,920 B per layer; x 61 = 4,997,120 B.
  CacheRequest expanded;
  expanded.mla_format = MlaCacheFormat::expanded;
  CHECK(fp(v3, {}, expanded).bytes_per_token_per_layer == 81920);
  CHECK(fp(v3, {}, expanded).bytes_per_token == 4997120);
  // MiniCPM3 expanded, as HF and vLLM cache it: 62 x 40 x ((64 + 32) + 64) x 2 B = 793,600 B.
  CHECK(fp(zoo("minicpm3-4b"), {}, expanded).bytes_per_token == 793600);
  // fp8 latent with a per-tensor scale: 61 x 576 x 1 B = 35,136 B.
  CHECK(fp(v3, {}, dtype(DType::fp8_e4m3)).bytes_per_token == 35136);
  // nvfp4 latent: 576 / 2 = 288 B + 36 fp8 scales (one per 16) = 324 B; x 61 = 19,764 B.
  CHECK(fp(v3, {}, dtype(DType::nvfp4)).bytes_per_token == 19764);
  // fp8_ds_mla with another dtype is a contradiction, not a silent choice.
  ds.dtype = DType::bf16;
  CHECK_THROWS_WITH(fp(v3, {}, ds), Catch::Contains("fp8_ds_mla stores an fp8_e4m3 latent"));
}

TEST_CASE("DeepSeek-V2 paper: -93.3% needs about 6-bit KV", "[footprint][mla]") {
  // DeepSeek 67B: 95 layers, GQA 8 KV heads x 128: 95 x 2 x 8 x 128 x 2 B = 389,120 B/token.
  Model deepseek67b = parse_model_yaml(R"(name: deepseek-67b
source: DeepSeek LLM paper, table 2
layers: 95
hidden_size: 8192
vocab_size: 102400
attention: {kind: gqa, heads: 64, kv_heads: 8}
mlp: {intermediate_size: 22016}
)",
                                       "deepseek-67b.yaml");
  u64 gqa = fp(deepseek67b).bytes_per_token;
  CHECK(gqa == 389120);
  u64 v2 = fp(zoo("deepseek-v2")).bytes_per_token; // 60 x 576 x 2 = 69,120 B
  CHECK(v2 == 69120);
  CHECK(1.0 - static_cast<double>(v2) / static_cast<double>(gqa) == Approx(0.822).epsilon(0.001));
  // 60 x 576 x 6 bit / 8 = 25,920 B: -93.3%.
  CHECK(1.0 - 25920.0 / static_cast<double>(gqa) == Approx(0.933).epsilon(0.001));
}

TEST_CASE("quantized caches carry their scales", "[footprint][dtype]") {
  const Model& llama = zoo("llama-3.1-8b");
  // int8 + fp32 scale per token per head: 8 heads x 2 x (128 + 4) = 2,112 B/layer; x 32.
  CHECK(fp(llama, {}, dtype(DType::int8)).bytes_per_token == 67584);
  // int4, group 32, fp16 scales: 64 B + 4 x 2 B = 72 B per vector; 8 x 2 x 72 x 32 layers.
  CHECK(fp(llama, {}, dtype(DType::int4)).bytes_per_token == 36864);
  // nvfp4, group 16, fp8 scales: 64 B + 8 x 1 B = 72 B per vector.
  CHECK(fp(llama, {}, dtype(DType::nvfp4)).bytes_per_token == 36864);
  // fp8 per tensor: 8 x 2 x 128 x 1 B x 32 = 65,536 B.
  CHECK(fp(llama, {}, dtype(DType::fp8_e5m2)).bytes_per_token == 65536);
  // fp8 with token-head fp32 scales: 8 x 2 x (128 + 4) x 32 = 67,584 B.
  CacheRequest scaled = dtype(DType::fp8_e4m3);
  scaled.scale = ScaleGranularity::per_token_head;
  CHECK(fp(llama, {}, scaled).bytes_per_token == 67584);
  // fp32: 8 x 2 x 128 x 4 x 32 = 262,144 B.
  CHECK(fp(llama, {}, dtype(DType::fp32)).bytes_per_token == 262144);
  // Group of 48 over 128 elements: 3 scales (the last group is partial).
  CacheRequest group48 = dtype(DType::int4);
  group48.scale = ScaleGranularity::per_group;
  group48.scale_group = 48;
  CHECK(fp(llama, {}, group48).bytes_per_token_per_layer == 8 * 2 * (64 + 3 * 2));
  CacheRequest bad = dtype(DType::bf16);
  bad.scale = ScaleGranularity::per_token_head;
  CHECK_THROWS_WITH(fp(llama, {}, bad), Catch::Contains("a bf16 cache has no scales"));
}

TEST_CASE("sliding windows cap what a layer holds", "[footprint][window]") {
  // Mistral-7B-v0.1: every layer slides over 4,096 tokens: 32 x 4,096 B x 4,096.
  auto mistral = fp(zoo("mistral-7b-v0.1"), {1000, 4096, 32768});
  CHECK(mistral.bytes_per_token == 131072);
  CHECK(mistral.contexts[0].kv_bytes == 131072ULL * 1000);
  CHECK(mistral.contexts[1].kv_bytes == 536870912);
  CHECK(mistral.contexts[2].kv_bytes == 536870912);

  // Gemma-2-9B: 21 sliding (4,096) + 21 full layers, 2 x 8 x 256 x 2 = 8,192 B each.
  // At 8,192 tokens: 21 x 8,192 x 8,192 + 21 x 8,192 x 4,096 = 2,113,929,216 B.
  auto gemma2 = fp(zoo("gemma-2-9b"), {2048, 8192});
  CHECK(gemma2.bytes_per_token == 344064);
  CHECK(gemma2.contexts[0].kv_bytes == 344064ULL * 2048);
  CHECK(gemma2.contexts[1].kv_bytes == 2113929216ULL);
  REQUIRE(gemma2.groups.size() == 2);
  CHECK(gemma2.groups[1].spec.kind == CacheKind::sliding);
  CHECK(gemma2.groups[1].layers == 21);

  // Gemma-3-27B: 10 global + 52 local (1,024) layers of 8,192 B.
  // At 131,072: 10 x 8,192 x 131,072 + 52 x 8,192 x 1,024 = 11,173,625,856 B.
  CHECK(fp(zoo("gemma-3-27b"), {131072}).contexts[0].kv_bytes == 11173625856ULL);

  // gpt-oss-120b: 18 full + 18 sliding (128) layers of 2 x 8 x 64 x 2 = 2,048 B.
  CHECK(fp(zoo("gpt-oss-120b"), {131072}).contexts[0].kv_bytes ==
        18ULL * 2048 * 131072 + 18ULL * 2048 * 128);
}

TEST_CASE("state layers hold a constant state", "[footprint][hybrid]") {
  // Qwen3-Next: 12 full layers of 2 x 2 x 256 x 2 = 2,048 B; 36 Gated DeltaNet layers of
  // 548,864 bf16 elements = 1,097,728 B each.
  auto f = fp(zoo("qwen3-next-80b-a3b"), {1, 4096});
  CHECK(f.bytes_per_token == 24576);
  CHECK(f.state_bytes_per_sequence == 36ULL * 548864 * 2);
  CHECK(f.contexts[0].kv_bytes == 24576 + 39518208);
  CHECK(f.contexts[1].kv_bytes == 24576ULL * 4096 + 39518208);
}

// The state per sequence of every bundled recurrent model, by hand from its config (conv state
// (kernel − 1) × channels and SSM / recurrent state, vLLM's shapes; bf16 unless the model keeps
// its SSM state in fp32).
TEST_CASE("every bundled state model's state matches its hand derivation", "[footprint][zoo]") {
  const std::map<std::string, u64> expected{
      // 36 GDN: conv 3 x (2 x 16 x 128 + 32 x 128) + recurrent 32 x 128 x 128, bf16.
      {"qwen3-next-80b-a3b", 36ULL * (3 * 8192 + 32 * 128 * 128) * 2},
      // 48 GDN: conv 3 x 10,240 bf16 + recurrent 48 x 128 x 128 fp32 (mamba_ssm_dtype).
      {"qwen3.5-27b", 48ULL * (3 * 10240 * 2 + 48 * 128 * 128 * 4)},
      // 20 KDA: conv 3 x (3 x 32 x 128) bf16 + recurrent 32 x 128 x 128 fp32.
      {"kimi-linear-48b-a3b", 20ULL * (3 * 12288 * 2 + 32 * 128 * 128 * 4)},
      // 70 lightning layers: 64 heads x 128 x 128, bf16.
      {"minimax-m1", 70ULL * 64 * 128 * 128 * 2},
      // 24 Mamba-2: conv 3 x (8,192 + 2 x 8 x 128) bf16 + SSM 128 x 64 x 128 fp32.
      {"nemotron-h-8b", 24ULL * (3 * 10240 * 2 + 128 * 64 * 128 * 4)},
      // 54 Mamba-2: conv 3 x (16,384 + 2 x 8 x 256) bf16 + SSM 256 x 64 x 256 fp32.
      {"nemotron-h-56b", 54ULL * (3 * 20480 * 2 + 256 * 64 * 256 * 4)},
      // 64 Mamba-2: conv 3 x 10,240 + SSM 128 x 64 x 128, bf16.
      {"mamba-codestral-7b", 64ULL * (3 * 10240 + 128 * 64 * 128) * 2},
      // 64 Mamba: conv 3 x 5,120 + SSM 5,120 x 16, bf16.
      {"mamba-2.8b", 64ULL * (3 * 5120 + 5120 * 16) * 2},
      // 28 Mamba: conv 3 x 8,192 + SSM 8,192 x 16, bf16.
      {"jamba-mini-1.5", 28ULL * (3 * 8192 + 8192 * 16) * 2},
  };
  std::size_t checked = 0;
  for (const Model& m : builtin_models()) {
    if (!m.state) {
      continue;
    }
    INFO(m.name);
    auto it = expected.find(m.name);
    REQUIRE(it != expected.end());
    CHECK(fp(m).state_bytes_per_sequence == it->second);
    ++checked;
  }
  CHECK(checked == expected.size());
}

TEST_CASE("paging rounds each layer up to whole blocks", "[footprint][paging]") {
  // Llama-3.1-8B, 1,000 tokens in blocks of 16: 63 blocks = 1,008 tokens, 8 wasted.
  auto f = fp(zoo("llama-3.1-8b"), {1000, 1024}, {}, 16);
  CHECK(f.contexts[0].kv_bytes == 131072ULL * 1000);
  CHECK(f.contexts[0].paged_kv_bytes == 131072ULL * 1008);
  CHECK(f.contexts[1].paged_kv_bytes == f.contexts[1].kv_bytes);
  // Gemma-2: the window (4,096) is block-aligned, the full layers are not.
  auto g = fp(zoo("gemma-2-9b"), {5000}, {}, 16);
  CHECK(g.contexts[0].paged_kv_bytes - g.contexts[0].kv_bytes == 21ULL * 8192 * 8);
}

TEST_CASE("huge contexts are exact or refused, never wrapped", "[footprint][overflow]") {
  // 1M tokens of fp32 expanded DeepSeek-V3: 61 x 128 x 320 x 4 B x 2^20 = 10,480,690,380,800 B.
  CacheRequest expanded = dtype(DType::fp32);
  expanded.mla_format = MlaCacheFormat::expanded;
  auto f = fp(zoo("deepseek-v3"), {1ULL << 20}, expanded);
  CHECK(f.contexts[0].kv_bytes == 61ULL * 128 * 320 * 4 * (1ULL << 20));
  CHECK_THROWS_AS(fp(zoo("deepseek-v3"), {1ULL << 50}, expanded), OverflowError);
}

// The hand derivation of every bundled model, bf16/fp16 (2 B) unless noted. A model added to
// models/ without a line here fails this test.
TEST_CASE("every bundled model matches its hand derivation", "[footprint][zoo]") {
  const std::map<std::string, u64> expected{
      {"deepseek-v2", 60 * 576 * 2},          // MLA latent
      {"deepseek-v2-lite", 27 * 576 * 2},     // MLA latent
      {"deepseek-v3", 61 * 576 * 2},          // MLA latent
      {"falcon-40b", 60 * 2 * 8 * 64 * 2},    // GQA-8, head 64
      {"falcon-7b", 32 * 2 * 1 * 64 * 2},     // MQA, head 64
      {"gemma-2-27b", 46 * 2 * 16 * 128 * 2}, // full rate, half the layers slide
      {"gemma-2-9b", 42 * 2 * 8 * 256 * 2},   // head_dim 256 != 3584 / 16
      {"gemma-3-27b", 62 * 2 * 16 * 128 * 2}, // 5 local : 1 global
      {"gpt-oss-120b", 36 * 2 * 8 * 64 * 2},  // head_dim 64, alternating 128-token window
      {"kimi-k2", 61 * 576 * 2},              // MLA latent, 64 heads
      {"llama-1-65b", 80 * 2 * 64 * 128 * 2}, // MHA
      {"llama-2-13b", 40 * 2 * 40 * 128 * 2}, // MHA
      {"llama-2-70b", 80 * 2 * 8 * 128 * 2},  // GQA-8
      {"llama-2-7b", 32 * 2 * 32 * 128 * 2},  // MHA
      {"llama-3.1-405b", 126 * 2 * 8 * 128 * 2},
      {"llama-3.1-70b", 80 * 2 * 8 * 128 * 2},
      {"llama-3.1-8b", 32 * 2 * 8 * 128 * 2},
      {"minicpm3-4b", 62 * (256 + 32) * 2}, // MLA latent, d_c 256, d_R 32
      {"mistral-7b-v0.1", 32 * 2 * 8 * 128 * 2},
      {"mixtral-8x7b", 32 * 2 * 8 * 128 * 2},
      {"qwen2.5-72b", 80 * 2 * 8 * 128 * 2},
      {"qwen2.5-7b", 28 * 2 * 4 * 128 * 2},
      {"qwen3-235b-a22b", 94 * 2 * 4 * 128 * 2},
      {"qwen3-32b", 64 * 2 * 8 * 128 * 2},          // head_dim 128 != 5120 / 64
      {"qwen3-next-80b-a3b", 12 * 2 * 2 * 256 * 2}, // only the 12 full layers
      {"starcoder", 40 * 2 * 1 * 128 * 2},          // MQA
      {"llama-3.3-70b", 80 * 2 * 8 * 128 * 2},
      {"llama-4-scout", 48 * 2 * 8 * 128 * 2},    // full rate; 36 of 48 layers chunked at 8,192
      {"llama-4-maverick", 48 * 2 * 8 * 128 * 2}, // the same attention as Scout
      {"deepseek-v3.1", 61 * 576 * 2},
      {"deepseek-v3.2",
       61 * (576 * 2 + 128 + 4)}, // MLA latent + DSA indexer key (fp8 + fp32 scale)
      {"glm-4.5", 92 * 2 * 8 * 128 * 2},
      {"glm-4.6", 92 * 2 * 8 * 128 * 2},
      {"qwen3-8b", 36 * 2 * 8 * 128 * 2},
      {"qwen3-14b", 40 * 2 * 8 * 128 * 2},
      {"qwen3-30b-a3b", 48 * 2 * 4 * 128 * 2},
      {"qwen3-coder-480b-a35b", 62 * 2 * 8 * 128 * 2},
      {"gpt-oss-20b", 24 * 2 * 8 * 64 * 2},
      {"gemma-3-1b", 26 * 2 * 1 * 256 * 2}, // one KV head
      {"gemma-3-4b", 34 * 2 * 4 * 256 * 2}, // heads, KV heads, head_dim: Gemma3TextConfig defaults
      {"gemma-3-12b", 48 * 2 * 8 * 256 * 2},
      {"mistral-small-3", 40 * 2 * 8 * 128 * 2},
      {"mistral-large-2", 88 * 2 * 8 * 128 * 2},
      {"phi-4", 40 * 2 * 10 * 128 * 2},
      {"minimax-m1", 10 * 2 * 8 * 128 * 2},     // 10 softmax layers of 80; 70 lightning
      {"nemotron-h-8b", 4 * 2 * 8 * 128 * 2},   // 4 '*' layers of 52
      {"nemotron-h-56b", 10 * 2 * 8 * 128 * 2}, // 10 '*' layers of 118
      {"mamba-codestral-7b", 0},                // attention-free
      {"mamba-2.8b", 0},                        // attention-free
      {"jamba-mini-1.5", 4 * 2 * 8 * 128 * 2},  // attention at i % 8 == 4
      {"kimi-linear-48b-a3b", 7 * 576 * 2},     // 7 MLA layers of 27; 20 KDA
      {"qwen3.5-27b", 16 * 2 * 4 * 256 * 2},    // every 4th of 64 layers full
      {"chatglm3-6b", 28 * 2 * 2 * 128 * 2},    // multi_query_group_num 2, kv_channels 128
      {"gpt-j-6b", 28 * 2 * 16 * 256 * 2},      // MHA, 4,096 / 16 = 256 per head
      {"gpt-neox-20b", 44 * 2 * 64 * 96 * 2},   // MHA, 6,144 / 64 = 96 per head
  };
  CHECK(builtin_models().size() == expected.size());
  for (const Model& m : builtin_models()) {
    INFO(m.name);
    auto it = expected.find(m.name);
    REQUIRE(it != expected.end());
    CHECK(fp(m).bytes_per_token == it->second);
  }
}

TEST_CASE("the derivation shows every term", "[footprint][explain]") {
  FootprintOptions o;
  o.contexts = {4096};
  o.explain = true;
  auto lines = render_derivation(compute_footprint(zoo("deepseek-v3"), o).derivation);
  REQUIRE(lines.size() >= 4);
  CHECK(lines[1] == "full: 61 layers, per layer per token (MLA latent, one stream, no factor 2): "
                    "(kv_lora_rank 512 + qk_rope_head_dim 64) = 576 × 2 B (bf16) = 1,152 B");
  CHECK(lines[2] == "per token, every per-token group at the full rate: 61 full × 1,152 B = "
                    "70,272 B");
  CHECK(lines[3] == "at 4,096 tokens: 61 full × 1,152 B × 4,096 tokens = 287,834,112 B");
  // Not asked: nothing recorded.
  o.explain = false;
  CHECK(compute_footprint(zoo("deepseek-v3"), o).derivation.lines().empty());
}

TEST_CASE("numeric safety: the largest plausible inputs are exact or a clear error",
          "[footprint][overflow]") {
  // 200 layers × 128 heads of expanded MLA in fp32: per layer per token 128 × (128 + 64 + 128)
  // × 4 = 163,840 B; per token 32,768,000 B; at 1M (1,048,576) tokens 34,359,738,368,000 B.
  std::ifstream file(std::string(KVCALC_SOURCE_DIR) + "/tests/data/models/mla-200-layers.yaml");
  std::stringstream text;
  text << file.rdbuf();
  Model m = parse_model_yaml(text.str(), "mla-200-layers.yaml");
  CacheRequest expanded;
  expanded.dtype = DType::fp32;
  expanded.mla_format = MlaCacheFormat::expanded;
  Footprint f = fp(m, {1ULL << 20}, expanded, 64);
  CHECK(f.bytes_per_token_per_layer == 163'840);
  CHECK(f.bytes_per_token == 32'768'000);
  CHECK(f.contexts[0].kv_bytes == 34'359'738'368'000ULL);
  CHECK(f.contexts[0].paged_kv_bytes == 34'359'738'368'000ULL); // 1M is whole pages of 64
  // 10,000 such sequences: 343,597,383,680,000,000 B, still exact in 64 bits...
  CHECK(checked_mul(f.contexts[0].kv_bytes, 10'000) == 343'597'383'680'000'000ULL);
  // ...a million of them is not, and says so.
  CHECK_THROWS_AS(checked_mul(f.contexts[0].kv_bytes, 1'000'000), OverflowError);
  // One sequence past 2^64 bytes: 10^14 tokens × 32,768,000 B.
  CHECK_THROWS_WITH(fp(m, {100'000'000'000'000ULL}, expanded),
                    Catch::Contains("does not fit in 64 bits"));
}
