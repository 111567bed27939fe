#include <catch2/catch.hpp>

#include <map>

#include <kvcalc/model/params.hpp>
#include <kvcalc/model/registry.hpp>

using namespace kvcalc;

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
      {"qwen3-next-80b-a3b", 79674391296ULL},
      // No exact published figure: the formula's own count (the card says 4.07B).
      {"minicpm3-4b", 4073875968ULL},
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
