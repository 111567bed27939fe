#include <catch2/catch.hpp>

#include <map>

#include <kvcalc/model/params.hpp>
#include <kvcalc/model/registry.hpp>

using namespace kvcalc;
using namespace kvcalc::model;

// Published exact counts (the sum over the model's modules, tied embeddings once). Sources in
// docs/formulas.md, "Parameters": HF safetensors totals, corrected where the checkpoint stores
// extra tensors (Llama-2 rotary tables, Falcon's untied head copy, DeepSeek-V3's MTP and fp8
// scales, gpt-oss's mxfp4 scales, Gemma 3's vision tower).
TEST_CASE("parameter counts match the published exact figures", "[params][zoo]") {
  const std::map<std::string, u64> published{
      {"llama-1-65b", 65285660672ULL},
      {"llama-2-7b", 6738415616ULL},
      {"llama-2-13b", 13015864320ULL},
      {"llama-2-70b", 68976648192ULL},
      {"llama-3.1-8b", 8030261248ULL},
      {"llama-3.1-70b", 70553706496ULL},
      {"llama-3.1-405b", 405853388800ULL},
      {"mistral-7b-v0.1", 7241732096ULL},
      {"mixtral-8x7b", 46702792704ULL},
      {"falcon-7b", 6921720704ULL},
      {"falcon-40b", 41303293952ULL},
      {"starcoder", 15517456384ULL},
      {"qwen2.5-7b", 7615616512ULL},
      {"qwen2.5-72b", 72706203648ULL},
      {"qwen3-32b", 32762123264ULL},
      {"qwen3-235b-a22b", 235093634560ULL},
      {"deepseek-v2", 235741434880ULL},
      {"deepseek-v2-lite", 15706484224ULL},
      {"deepseek-v3", 671026419200ULL},
      {"kimi-k2", 1026408232448ULL},
      {"gemma-2-9b", 9241705984ULL},
      {"gemma-2-27b", 27227128320ULL},
      {"gemma-3-27b", 27009346304ULL},
      {"gpt-oss-120b", 116829156672ULL},
      {"qwen3-next-80b-a3b", 79674391296ULL}, // 81,324,862,720 less 1,650,471,424 MTP
      {"llama-3.3-70b", 70553706496ULL},
      // Text towers: 108,641,793,536 and 401,583,781,376 less 871,932,416 of vision and projector.
      {"llama-4-scout", 107769861120ULL},
      {"llama-4-maverick", 400711848960ULL},
      {"deepseek-v3.1", 671026419200ULL},
      // 685,355,329,792 (fp8 scales not counted) less the MTP layer as stored, 13,477,385,728
      // (its own 11,610,068,224, its indexer's 13,959,424, its embedding and head copies).
      {"deepseek-v3.2", 671877944064ULL},
      // 358,337,791,296 and 356,785,898,816 less the MTP layer (3,988,069,792; GLM-4.5 also
      // stores its own embedding and head, 1,551,892,480).
      {"glm-4.5", 352797829024ULL},
      {"glm-4.6", 352797829024ULL},
      {"qwen3-8b", 8190735360ULL},
      {"qwen3-14b", 14768307200ULL},
      {"qwen3-30b-a3b", 30532122624ULL},
      {"qwen3-coder-480b-a35b", 480154875392ULL},
      {"gpt-oss-20b", 20914757184ULL},
      {"gemma-3-1b", 999885952ULL},
      // 4,300,079,472 and 12,187,325,040 less the SigLIP tower (416,866,032) and projector.
      {"gemma-3-4b", 3880263168ULL},
      {"gemma-3-12b", 11766034176ULL},
      {"mistral-small-3", 23572403200ULL},
      {"mistral-large-2", 122610069504ULL},
      {"phi-4", 14659507200ULL},
      {"minimax-m1", 456089655296ULL},
      {"mamba-codestral-7b", 7285403648ULL},
      {"mamba-2.8b", 2768345600ULL},
      // 27,781,427,952 less the vision tower (460,730,096) and MTP (424,699,392).
      {"qwen3.5-27b", 26895998464ULL},
      {"chatglm3-6b", 6243584000ULL},
      // The tensors' sum; the model card's 6,053,381,344 comes from the JAX code.
      {"gpt-j-6b", 6050882784ULL},
      {"gpt-neox-20b", 20554567680ULL},
      // No exact published figure: the formula's own count (the card says 4.07B).
      {"minicpm3-4b", 4073875968ULL},
      // No exact published figure; the formula agrees with the checkpoints' index sizes to their
      // three decimals (8.101B, 49.123B, 51.574B with fp32 A_log and D) or with the card (56B).
      {"nemotron-h-8b", 8100852736ULL},
      {"nemotron-h-56b", 56324350464ULL},
      {"jamba-mini-1.5", 51570323328ULL},
      {"kimi-linear-48b-a3b", 49122681728ULL},
  };
  CHECK(builtin_models().size() == published.size());
  for (const Model& m : builtin_models()) {
    INFO(m.name);
    auto it = published.find(m.name);
    REQUIRE(it != published.end());
    CHECK(count_params(m).main == it->second);
  }
}

TEST_CASE("DeepSeek-V3: 671B main, the MTP module apart", "[params][mla]") {
  ParamCount p = count_params(*find_builtin_model("deepseek-v3"));
  CHECK(p.main == 671026419200ULL);
  // enorm + hnorm + eh_proj + one MoE block + head norm; its embedding and head are shared
  // (stored again in the checkpoint: + 2 x 129,280 x 7,168 = 13,463,426,304 as stored).
  CHECK(p.mtp == 11610068224ULL);
  CHECK(p.mtp + 2ULL * 129280 * 7168 == 13463426304ULL);
  // 256 routed experts x 3 x 7,168 x 2,048 x 58 MoE layers.
  CHECK(p.experts == 256ULL * 3 * 7168 * 2048 * 58);
  // About 37B active per token (the paper's figure): 8 of 256 routed experts.
  CHECK(p.active_per_token / 1000000000ULL == 37);
}

// MTP modules as their checkpoints store them, less the embedding and head copies some keep.
TEST_CASE("MTP modules of the current families", "[params][mtp]") {
  CHECK(count_params(*find_builtin_model("qwen3.5-27b")).mtp == 424699392ULL);
  CHECK(count_params(*find_builtin_model("glm-4.5")).mtp == 3988069792ULL);
  // DeepSeek-V3's 11,610,068,224 plus the MTP layer's own indexer, 13,959,424.
  CHECK(count_params(*find_builtin_model("deepseek-v3.2")).mtp == 11624027648ULL);
}

TEST_CASE("a params override places the remainder and refuses to shrink", "[params]") {
  Model m = *find_builtin_model("llama-3.1-8b");
  m.params = 8030261248ULL + 1000;
  ParamCount p = count_params(m);
  CHECK(p.main == 8030261248ULL + 1000);
  CHECK(p.overridden);
  m.params = 1000;
  CHECK_THROWS_WITH(count_params(m), Catch::Contains("below the 8030261248 parameters"));
  // A custom state kind has no weight formula: it needs the override.
  Model hybrid = *find_builtin_model("qwen3-next-80b-a3b");
  hybrid.state = StateSpec{};
  hybrid.state->elements = 548864;
  CHECK_THROWS_WITH(count_params(hybrid), Catch::Contains("set 'params'"));
}
