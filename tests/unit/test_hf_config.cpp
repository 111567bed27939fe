#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <kvcalc/kv/footprint.hpp>
#include <kvcalc/kv/weights.hpp>
#include <kvcalc/model/loader.hpp>
#include <kvcalc/model/params.hpp>
#include <kvcalc/model/registry.hpp>

using namespace kvcalc;
using namespace kvcalc::kv;
using namespace kvcalc::model;

namespace {

const std::filesystem::path k_fixtures = std::filesystem::path(KVCALC_SOURCE_DIR) / "tests/data/hf";

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

Model import(const std::string& file, Diagnostics& d) {
  return parse_hf_config(slurp(k_fixtures / file), file, d);
}

u64 kv_per_token(const Model& m) {
  return compute_footprint(m, {}).bytes_per_token;
}

bool mentions(const Diagnostics& d, const std::string& text) {
  return std::any_of(d.warnings.begin(), d.warnings.end(),
                     [&](const std::string& w) { return w.find(text) != std::string::npos; });
}

} // namespace

// Each fixture holds the architecture keys of a real config.json (tests/data/hf/README.md).
// Importing it must give the bundled model of the same name, field for field.
TEST_CASE("every HF fixture imports to its bundled model", "[hf][zoo]") {
  std::size_t checked = 0;
  for (const auto& entry : std::filesystem::directory_iterator(k_fixtures)) {
    if (entry.path().extension() != ".json") {
      continue;
    }
    std::string stem = entry.path().stem().string();
    std::string zoo_name = stem.substr(0, stem.find(".rw"));
    const Model* zoo = find_builtin_model(zoo_name);
    INFO(entry.path().filename().string());
    REQUIRE(zoo != nullptr);
    Diagnostics d;
    Model m = import(entry.path().filename().string(), d);
    CHECK(m.layers == zoo->layers);
    CHECK(m.hidden_size == zoo->hidden_size);
    CHECK(m.vocab_size == zoo->vocab_size);
    CHECK(m.max_context == zoo->max_context);
    CHECK(m.tie_word_embeddings == zoo->tie_word_embeddings);
    CHECK(m.dtype == zoo->dtype);
    CHECK(m.weight_dtype == zoo->weight_dtype);
    CHECK(m.attention.kind == zoo->attention.kind);
    CHECK(m.attention.heads == zoo->attention.heads);
    CHECK(m.attention.kv_heads == zoo->attention.kv_heads);
    CHECK(m.attention.head_dim == zoo->attention.head_dim);
    CHECK(m.attention.v_head_dim == zoo->attention.v_head_dim);
    CHECK(m.attention.mla.q_lora_rank == zoo->attention.mla.q_lora_rank);
    CHECK(m.attention.mla.kv_lora_rank == zoo->attention.mla.kv_lora_rank);
    CHECK(m.attention.mla.qk_rope_head_dim == zoo->attention.mla.qk_rope_head_dim);
    CHECK(m.mlp.kind == zoo->mlp.kind);
    CHECK(m.layer_types == zoo->layer_types);
    CHECK(m.sliding_window == zoo->sliding_window);
    CHECK(m.mtp_layers == zoo->mtp_layers);
    REQUIRE(m.moe.has_value() == zoo->moe.has_value());
    if (m.moe) {
      CHECK(m.moe->routed_experts == zoo->moe->routed_experts);
      CHECK(m.moe->shared_experts == zoo->moe->shared_experts);
      CHECK(m.moe->experts_per_token == zoo->moe->experts_per_token);
      CHECK(m.moe->expert_intermediate_size == zoo->moe->expert_intermediate_size);
      CHECK(m.moe->shared_expert_intermediate_size == zoo->moe->shared_expert_intermediate_size);
      CHECK(m.moe->first_dense_layers == zoo->moe->first_dense_layers);
    } else {
      CHECK(m.mlp.intermediate_size == zoo->mlp.intermediate_size);
    }
    REQUIRE(m.state.has_value() == zoo->state.has_value());
    if (m.state) {
      CHECK(m.state->kind == zoo->state->kind);
      CHECK(m.state->heads == zoo->state->heads);
      CHECK(m.state->head_dim == zoo->state->head_dim);
      CHECK(m.state->key_heads == zoo->state->key_heads);
      CHECK(m.state->key_head_dim == zoo->state->key_head_dim);
      CHECK(m.state->inner == zoo->state->inner);
      CHECK(m.state->groups == zoo->state->groups);
      CHECK(m.state->state_size == zoo->state->state_size);
      CHECK(m.state->conv_kernel == zoo->state->conv_kernel);
      CHECK(m.state->conv_dtype == zoo->state->conv_dtype);
      CHECK(m.state->ssm_dtype == zoo->state->ssm_dtype);
    }
    CHECK(m.ffn_types == zoo->ffn_types);
    CHECK(m.attention_chunk == zoo->attention_chunk);
    CHECK(m.indexer.has_value() == zoo->indexer.has_value());
    if (stem == zoo_name) { // the legacy RefinedWeb spellings name another class
      CHECK(m.architecture == zoo->architecture);
    }
    CHECK(kv_per_token(m) == kv_per_token(*zoo));
    // The terms only the parameter count sees.
    CHECK(m.norm == zoo->norm);
    CHECK(m.norms_per_layer == zoo->norms_per_layer);
    CHECK(m.learned_position_embeddings == zoo->learned_position_embeddings);
    CHECK(m.attention.bias == zoo->attention.bias);
    CHECK(m.attention.qk_norm == zoo->attention.qk_norm);
    CHECK(m.attention.sinks == zoo->attention.sinks);
    CHECK(m.mlp.bias == zoo->mlp.bias);
    // The checkpoint's quantization, read tensor by tensor, stores what the zoo's
    // weight_dtype over its quantized_weights does.
    if (!zoo->params) {
      CHECK(kv::weight_bytes(m, count_params(m), std::nullopt, {}).total ==
            kv::weight_bytes(*zoo, count_params(*zoo), std::nullopt, {}).total);
    }
    if (m.moe) {
      CHECK(m.moe->router_bias == zoo->moe->router_bias);
    }
    if (!zoo->params) {
      CHECK(count_params(m).main == count_params(*zoo).main);
      CHECK(count_params(m).mtp == count_params(*zoo).mtp);
    }
    ++checked;
  }
  CHECK(checked >= 26);
}

TEST_CASE("ambiguous configs say which reading was taken", "[hf]") {
  Diagnostics qwen;
  Model q = import("qwen2.5-7b.json", qwen);
  CHECK(q.sliding_window == 0);
  CHECK(mentions(qwen, "sliding_window 131072 is ignored because use_sliding_window is false"));

  Diagnostics gemma2;
  Model g = import("gemma-2-9b.json", gemma2);
  CHECK(g.layer_types[0] == LayerType::sliding);
  CHECK(g.layer_types[1] == LayerType::full);
  CHECK(mentions(gemma2, "even layers slide"));
  CHECK(mentions(gemma2, "torch_dtype is float32: taking bf16"));

  Diagnostics gemma3;
  Model g3 = import("gemma-3-27b.json", gemma3);
  CHECK(g3.name == "gemma-3-27b");
  CHECK(mentions(gemma3, "text_config"));

  Diagnostics oss;
  (void)import("gpt-oss-120b.json", oss);
  CHECK(mentions(oss, "no torch_dtype"));
}

TEST_CASE("Falcon's legacy and current spellings agree", "[hf]") {
  Diagnostics d;
  CHECK(import("falcon-7b.rw.json", d).attention.kind == AttentionKind::mqa);
  Model f40 = import("falcon-40b.rw.json", d);
  CHECK(f40.attention.kind == AttentionKind::gqa);
  CHECK(f40.attention.kv_heads == 8);
}

TEST_CASE("a Falcon config that names its family by class alone reads as Falcon", "[hf]") {
  // tiiuae's RW configs without model_type: RWForCausalLM is the RefinedWeb code, multi-query
  // (Falcon-7B) unless it gives n_head_kv (Falcon-40B). Read as a generic decoder, Falcon-7B
  // would be 71 KV heads, 71 times its cache.
  Diagnostics d;
  std::string f7 = slurp(k_fixtures / "falcon-7b.rw.json");
  f7.replace(f7.find("\"model_type\": \"RefinedWebModel\","),
             std::string("\"model_type\": \"RefinedWebModel\",").size(), "");
  Model m7 = parse_hf_config(f7, "falcon-7b.json", d);
  CHECK(m7.attention.kind == AttentionKind::mqa);
  // 32 layers × 1 KV head × 64 (4544 / 71) × 2 (K and V) × 2 B.
  CHECK(kv_per_token(m7) == 32 * 1 * 64 * 2 * 2);
  CHECK(mentions(d, "reading it as 'RefinedWebModel' (its architecture, RWForCausalLM)"));

  std::string f40 = slurp(k_fixtures / "falcon-40b.rw.json");
  std::size_t at = f40.find("\"model_type\"");
  REQUIRE(at != std::string::npos);
  f40.erase(at, f40.find('\n', at) - at + 1);
  Model m40 = parse_hf_config(f40, "falcon-40b.json", d);
  CHECK(m40.attention.kind == AttentionKind::gqa);
  // 60 layers × 8 KV heads × 64 (8192 / 128) × 2 × 2 B.
  CHECK(kv_per_token(m40) == 60 * 8 * 64 * 2 * 2);
}

TEST_CASE("keys that set KV heads per layer or by multi-query are read or refused, never dropped",
          "[hf][errors]") {
  Diagnostics d;
  // DeciLM / Nemotron-NAS: each layer's attention in block_configs (no_op layers hold no KV,
  // n_heads_in_group sets the KV heads); read as uniform layers it is 13 times too big.
  CHECK_THROWS_WITH(parse_hf_config(R"({"model_type": "nemotron-nas", "hidden_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": null,
    "intermediate_size": 128, "vocab_size": 100, "torch_dtype": "bfloat16",
    "block_configs": [{"attention": {"n_heads_in_group": 2, "no_op": false}},
                      {"attention": {"n_heads_in_group": null, "no_op": true}}]})",
                                    "c.json", d),
                    Catch::Contains("config key 'block_configs' may change the cache"));
  // Every unread key at once, the first at the error's location: each at its value (line 3:
  // four spaces, "vocab_size": 100, "torch_dtype": "bfloat16", then "swa_layers": with [ in
  // column 65 and, after "mystery_kv_heads": , 2 in column 90; line 4: "x" in column 21).
  CHECK_THROWS_WITH(parse_hf_config(R"({"model_type": "llama", "hidden_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
    "vocab_size": 100, "torch_dtype": "bfloat16", "swa_layers": [1], "mystery_kv_heads": 2,
    "chunk_layout": "x"})",
                                    "c.json", d),
                    Catch::Contains("c.json:3:65: config key 'swa_layers' and "
                                    "'mystery_kv_heads' (c.json:3:90), 'chunk_layout' "
                                    "(c.json:4:21) may change the cache and kvcalc does not read "
                                    "them"));
  // Keys with a cache word that are known not to change the cache pass: transformers'
  // chunk_size_feed_forward default, an MTP switch.
  Model m = parse_hf_config(R"({"model_type": "llama", "hidden_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
    "vocab_size": 100, "torch_dtype": "bfloat16", "chunk_size_feed_forward": 0,
    "use_mtp": false})",
                            "c.json", d);
  // 2 layers × 4 KV heads × 16 (64 / 4) × 2 × 2 B.
  CHECK(kv_per_token(m) == 2 * 4 * 16 * 2 * 2);
  // Where the family's code ignores them, they are read as ignored: Falcon's new decoder
  // takes num_kv_heads whatever multi_query says (transformers' FalconAttention), ChatGLM
  // without multi-query attention every head.
  Model falcon = parse_hf_config(R"({"model_type": "falcon", "hidden_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 8, "vocab_size": 100,
    "torch_dtype": "bfloat16", "new_decoder_architecture": true, "num_kv_heads": 2,
    "multi_query": true})",
                                 "c.json", d);
  CHECK(falcon.attention.kv_heads == 2);
  Model glm = parse_hf_config(R"({"model_type": "chatglm", "hidden_size": 64,
    "num_layers": 2, "num_attention_heads": 4, "ffn_hidden_size": 128, "padded_vocab_size": 100,
    "torch_dtype": "bfloat16", "multi_query_attention": false, "multi_query_group_num": 2})",
                              "c.json", d);
  CHECK(glm.attention.kv_heads == 4);
  // multi_query in a family that does not read it.
  CHECK_THROWS_WITH(parse_hf_config(R"({"model_type": "llama", "hidden_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
    "vocab_size": 100, "torch_dtype": "bfloat16", "multi_query": true})",
                                    "c.json", d),
                    Catch::Contains("config key 'multi_query' may change the cache"));
}

TEST_CASE("DBRX and MPT read their attention and feed-forward maps", "[hf]") {
  Diagnostics d;
  // databricks/dbrx-instruct's config.json, its architecture keys.
  Model dbrx = parse_hf_config(R"({"architectures": ["DbrxForCausalLM"],
    "attn_config": {"clip_qkv": 8, "kv_n_heads": 8, "model_type": "", "rope_theta": 500000},
    "d_model": 6144, "ffn_config": {"ffn_hidden_size": 10752, "model_type": "",
    "moe_jitter_eps": 0.01, "moe_loss_weight": 0.05, "moe_num_experts": 16, "moe_top_k": 4},
    "max_seq_len": 32768, "model_type": "dbrx", "n_heads": 48, "n_layers": 40,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16", "vocab_size": 100352})",
                               "dbrx.json", d);
  // 40 layers × 8 KV heads × 128 (6144 / 48) × 2 × 2 B.
  CHECK(kv_per_token(dbrx) == 40 * 8 * 128 * 2 * 2);
  REQUIRE(dbrx.moe);
  CHECK(dbrx.moe->routed_experts == 16);
  CHECK(dbrx.moe->experts_per_token == 4);
  CHECK(dbrx.moe->expert_intermediate_size == 10752);
  // Parameters: embedding and head 2 × 100,352 × 6,144 = 1,233,125,376; a layer's q/k/v
  // 6,144 × (48 + 2 × 8) × 128 = 50,331,648, output 37,748,736, router 98,304, 16 experts of
  // 3 × 6,144 × 10,752 = 3,170,893,824, two norms 12,288: 3,259,084,800 × 40 = 130,363,392,000;
  // the final norm 6,144. 131,596,523,520 in all, DBRX's published 132B.
  CHECK(count_params(dbrx).main == 131596523520ULL);

  // mosaicml/mpt-7b's config.json: multi-head (attn_config.attn_type), an MLP of
  // expansion_ratio × d_model, tied embeddings, no biases.
  Model mpt = parse_hf_config(R"({"architectures": ["MPTForCausalLM"],
    "attn_config": {"alibi": true, "alibi_bias_max": 8, "attn_impl": "torch", "attn_pdrop": 0,
    "attn_type": "multihead_attention", "attn_uses_sequence_id": false, "clip_qkv": null,
    "prefix_lm": false, "qk_ln": false, "softmax_scale": null}, "d_model": 4096,
    "expansion_ratio": 4, "max_seq_len": 2048, "model_type": "mpt", "n_heads": 32,
    "n_layers": 32, "no_bias": true, "torch_dtype": "bfloat16", "vocab_size": 50432})",
                              "mpt.json", d);
  // 32 layers × 32 heads × 128 × 2 × 2 B.
  CHECK(kv_per_token(mpt) == 32 * 32 * 128 * 2 * 2);
  // Tied embedding 50,432 × 4,096 = 206,569,472; a layer's Wqkv 4,096 × 12,288 = 50,331,648,
  // output 16,777,216, MLP 2 × 4,096 × 16,384 = 134,217,728, two norms 8,192: 201,334,784 × 32
  // = 6,442,713,088; the final norm 4,096: 6,649,286,656.
  CHECK(count_params(mpt).main == 6649286656ULL);
  // Grouped-query MPT reads kv_n_heads; an attn_type MPT does not have is refused by name.
  std::string gqa = R"({"model_type": "mpt", "d_model": 64, "n_heads": 4, "n_layers": 2,
    "expansion_ratio": 4, "vocab_size": 100, "torch_dtype": "bfloat16",
    "attn_config": {"attn_type": "grouped_query_attention", "kv_n_heads": 2}})";
  CHECK(parse_hf_config(gqa, "mpt.json", d).attention.kv_heads == 2);
  std::string odd = gqa;
  odd.replace(odd.find("grouped_query_attention"), 23, "sparse_attention");
  CHECK_THROWS_WITH(parse_hf_config(odd, "mpt.json", d),
                    Catch::Contains("attn_type 'sparse_attention' is not one of MPT's"));
}

TEST_CASE("2025-2026 configs give the bytes their engines allocate", "[hf][2026]") {
  // Real configs of models kvcalc was not written against (tests/data/hf-2026/README.md), each
  // sized by hand from vLLM's modeling code: a bf16 cache, bytes of one sequence at 4,096
  // tokens.
  const auto dir = std::filesystem::path(KVCALC_SOURCE_DIR) / "tests/data/hf-2026";
  auto at_4k = [&](const std::string& file) {
    Diagnostics d;
    Model m = parse_hf_config(slurp(dir / file), file, d);
    FootprintOptions o;
    o.contexts = {4096};
    return compute_footprint(m, o).contexts.front().kv_bytes;
  };
  // Phi-4-mini: 32 layers × 2 × 8 KV heads × 128 (3072 / 24) × 2 B = 131,072 B a token, every
  // layer full (its full_attn_mod 1 read by no engine; its 262,144-token window is beyond its
  // 131,072-token context).
  CHECK(at_4k("phi-4-mini-instruct.json") == 131072ULL * 4096);
  // MiMo-V2-Flash (vLLM's mimo_v2_flash.py): hybrid_layer_pattern puts 9 full layers of 4 KV
  // heads and 39 sliding layers of 8 (swa_num_key_value_heads), K 192 and V 128 wide, window
  // 128. Full: 9 × 4 × (192 + 128) × 2 B = 23,040 B a token; sliding: 39 × 8 × 320 × 2 B =
  // 199,680 B a token over the last 128: 23,040 × 4,096 + 199,680 × 128 = 119,930,880 B.
  CHECK(at_4k("mimo-v2-flash.json") == 23040ULL * 4096 + 199680ULL * 128);
  // Kimi-K2.5: DeepSeek's MLA under text_config: 61 layers × (512 + 64) × 2 B = 70,272 B.
  CHECK(at_4k("kimi-k2.5.json") == 70272ULL * 4096);
  // MiniMax-M2.7: 62 layers × 2 × 8 × 128 × 2 B = 253,952 B (its 3 MTP modules hold none
  // without speculative decoding).
  CHECK(at_4k("minimax-m2.7.json") == 253952ULL * 4096);
  // GLM-5 (glm_moe_dsa): MLA, 78 × 576 × 2 B = 89,856 B, and the DSA indexer's keys on every
  // layer, 78 × (128 fp8 + 4 B of scale) = 10,296 B: 100,152 B.
  CHECK(at_4k("glm-5.json") == 100152ULL * 4096);

  Diagnostics d;
  Model minimax = parse_hf_config(slurp(dir / "minimax-m2.7.json"), "m.json", d);
  CHECK(minimax.mtp_layers == 3); // num_mtp_modules 3 × mtp_transformer_layers 1
  std::string glm = slurp(dir / "glm-5.json");
  glm.replace(glm.find("\"qk_head_dim\": 256"), 18, "\"qk_head_dim\": 192");
  CHECK_THROWS_WITH(parse_hf_config(glm, "glm.json", d),
                    Catch::Contains("qk_head_dim 192 is not qk_nope_head_dim + qk_rope_head_dim "
                                    "(256)"));
  std::string phi = slurp(dir / "phi-4-mini-instruct.json");
  phi.replace(phi.find("\"full_attn_mod\": 1"), 18, "\"full_attn_mod\": 2");
  CHECK_THROWS_WITH(parse_hf_config(phi, "phi.json", d),
                    Catch::Contains("full_attn_mod 2: kvcalc knows only 1"));
}

TEST_CASE("config.json is told from kvcalc YAML by content", "[hf]") {
  Diagnostics d;
  Model m = parse_model_document(R"({"model_type": "llama", "num_hidden_layers": 2,
    "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
    "intermediate_size": 128, "vocab_size": 100, "torch_dtype": "bfloat16"})",
                                 "x/tiny-llama/config.json", d);
  CHECK(m.name == "tiny-llama");
  CHECK(m.attention.kind == AttentionKind::gqa);
  CHECK(m.attention.head_dim == 16);
  CHECK_THROWS_WITH(parse_model_document("{\"foo\": 1}", "f.json", d),
                    Catch::Contains("neither a kvcalc model"));
}

TEST_CASE("config errors are located in the config", "[hf][errors]") {
  Diagnostics d;
  CHECK_THROWS_WITH(parse_hf_config(R"({"model_type": "llama",
  "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 6,
  "num_key_value_heads": 4, "intermediate_size": 128, "vocab_size": 100})",
                                    "c.json", d),
                    Catch::StartsWith("c.json:2:69: config has no head_dim and hidden_size (64) "
                                      "is not a multiple of num_attention_heads (6)"));
  CHECK_THROWS_WITH(parse_hf_config(R"({"model_type": "llama", "hidden_size": 64})", "c.json", d),
                    Catch::Contains("c.json:1:1: config has no 'num_hidden_layers'"));
  CHECK_THROWS_WITH(
      parse_hf_config(R"({"model_type": "llama", "num_hidden_layers": 2.5})", "c.json", d),
      Catch::Contains("c.json:1:46: 'num_hidden_layers' must be a whole number"));
}

TEST_CASE("a checkpoint's quantization_config gives each tensor its stored layout",
          "[hf][quantization]") {
  auto load = [](const std::string& file) {
    Diagnostics d;
    std::string path = std::string(KVCALC_SOURCE_DIR) + "/tests/data/hf-quant/" + file;
    Model m = parse_hf_config(slurp(path), path, d);
    CHECK_FALSE(mentions(d, "quantization"));
    return m;
  };
  auto bytes_of = [](const Model& m, const std::string& key) {
    for (const TensorGroup& t : count_params(m).tensors) {
      if (format_key(t) == key) {
        return kv::tensor_bytes(t, kv::tensor_format(m, t, std::nullopt));
      }
    }
    FAIL("no tensor " << key);
    return u64{0};
  };
  SECTION("AWQ (Qwen/Qwen3-32B-AWQ): int4, an fp16 scale and a 4-bit zero per 128 inputs") {
    Model m = load("qwen3-32b-awq.json");
    CHECK(m.quantization == "awq");
    CHECK(format_spec(m.weight_formats.at("mlp.down_proj")) == "int4 group:128 scale:2 zero:4");
    // Its real tensors: qweight [25600, 640] int32, qzeros [200, 640] int32, scales [200, 5120]
    // fp16 = 65,536,000 + 512,000 + 2,048,000 B per layer, 64 layers.
    CHECK(bytes_of(m, "mlp.down_proj") == 64ULL * (65536000 + 512000 + 2048000));
    CHECK(m.weight_formats.count("lm_head") == 0);
  }
  SECTION("GPTQ: zeros even when symmetric, and an int32 g_idx per input") {
    Model m = load("qwen2.5-7b-gptq-int4.json");
    // down_proj 3,584 × 18,944: codes 33,947,648; 148 groups × 3,584 × (2 + 0.5) B = 1,326,080;
    // g_idx 18,944 × 4 = 75,776.
    CHECK(bytes_of(m, "mlp.down_proj") == 28ULL * (33947648 + 1326080 + 75776));
  }
  SECTION("compressed-tensors W4A16 (Kimi-K2.5's block): routed experts only, groups of 32") {
    Model m = load("kimi-k2-w4a16.json");
    CHECK(format_spec(m.weight_formats.at("moe.experts.down_proj")) ==
          "int4 group:32 scale:2 extra:16");
    for (const char* kept : {"attention.o_proj", "moe.shared_experts.down_proj", "mlp.down_proj",
                             "moe.router", "lm_head"}) {
      INFO(kept);
      CHECK(m.weight_formats.count(kept) == 0);
    }
    // 7,168 × 2,048: codes 7,340,032, scales 7,168 · 64 · 2 = 917,504, weight_shape 16.
    CHECK(bytes_of(m, "moe.experts.down_proj") == 60ULL * 384 * (7340032 + 917504 + 16));
  }
  SECTION("bitsandbytes nf4 with double quant: a uint8 scale per 64, an fp32 one per 256") {
    Model m = load("llama-3.1-8b-bnb-4bit.json");
    // q_proj 4,096 × 4,096: codes 8,388,608; 262,144 scales; 1,024 nested × 4; code books 1,088.
    CHECK(bytes_of(m, "attention.q_proj") == 32ULL * (8388608 + 262144 + 4096 + 1088));
    CHECK(m.weight_formats.count("lm_head") == 0);
  }
  SECTION("compressed-tensors FP8 dynamic under the legacy compression_config: a scale per row") {
    Model m = load("llama-3.1-8b-fp8-dynamic.json");
    CHECK(format_spec(m.weight_formats.at("mlp.up_proj")) == "fp8_e4m3 row scale:2");
  }
  SECTION("ModelOpt FP8 in hf_quant_config.json beside config.json: one scale per tensor") {
    Model m = load("llama-3.1-70b-modelopt-fp8/config.json");
    CHECK(m.quantization == "modelopt");
    CHECK(format_spec(m.weight_formats.at("attention.q_proj")) ==
          "fp8_e4m3 tensor scale:4 extra:4");
    CHECK(m.weight_formats.count("lm_head") == 0);
  }
  SECTION("ModelOpt NVFP4 (nvidia/DeepSeek-V3.1-NVFP4): MLA projections, MTP and head excluded") {
    Model m = load("deepseek-v3.1-nvfp4/config.json");
    CHECK(format_spec(m.weight_formats.at("attention.o_proj")) == "nvfp4 group:16 scale:1 extra:8");
    CHECK(m.weight_formats.count("moe.experts.gate_proj") == 1);
    CHECK(m.weight_formats.count("moe.shared_experts.down_proj") == 1);
    for (const char* kept : {"attention.q_a_proj", "attention.kv_b_proj", "mtp.attention.o_proj",
                             "mtp.moe.experts.down_proj", "lm_head"}) {
      INFO(kept);
      CHECK(m.weight_formats.count(kept) == 0);
    }
  }
}

TEST_CASE("a config.json of more values than kvcalc reads is refused before it is parsed",
          "[hf][limits]") {
  // Llama-3.1-8B's config with an n-element list under a key kvcalc does not read.
  auto with_list = [config = slurp(k_fixtures / "llama-3.1-8b.json")](int n) {
    std::string list = "\"ignored_list\": [0";
    for (int i = 1; i < n; ++i) {
      list += ",0";
    }
    std::string text = config;
    text.insert(text.find('{') + 1, list + "],");
    return text;
  };
  Diagnostics d;
  // yaml-cpp would take about 570 MB for it; the count of separators stops it first.
  CHECK_THROWS_WITH(parse_hf_config(with_list(600000), "big.json", d),
                    Catch::Contains("holds more than 500,000 values"));
  // A list of 100,000 is read (and its key reported as unread).
  std::string fine = with_list(100000);
  CHECK(parse_hf_config(fine, "fine.json", d).layers == 32);
}

namespace {

/// A 4-layer config of width 64 and a vocabulary of 100, with `keys` (its model_type among them).
Model four_layers(const std::string& keys, Diagnostics& d) {
  std::string config = R"({"num_hidden_layers": 4, "hidden_size": 64, "vocab_size": 100, )"
                       R"("torch_dtype": "bfloat16", )";
  return parse_hf_config(config + keys + "}", "layout.json", d);
}

/// `keys` and the attention of the attending layers: 4 heads of 16 over 2 KV heads.
std::string attending(const std::string& keys) {
  return keys + R"(, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16)";
}

} // namespace

// One case per encoding of the layer layout (docs/model-format.md, "Importing a config.json"),
// each expectation read from the encoding's rule, not from the program.
TEST_CASE("each layout encoding of a config.json gives its layers", "[hf][layout]") {
  using L = LayerType;
  using F = FfnType;
  Diagnostics d;
  SECTION("Nemotron-H's hybrid_override_pattern: a mixer or a feed-forward part per character") {
    // M: Mamba-2, *: attention, -: MLP, E: MoE; a block is either a mixer or an FFN.
    Model m = four_layers(attending(R"("model_type": "nemotron_h",
      "hybrid_override_pattern": "M*-E", "intermediate_size": 128, "n_routed_experts": 4,
      "num_experts_per_tok": 2, "moe_intermediate_size": 32, "mamba_num_heads": 4,
      "mamba_head_dim": 16, "n_groups": 1, "ssm_state_size": 16, "conv_kernel": 4)"),
                          d);
    CHECK(m.layer_types == std::vector{L::state, L::full, L::none, L::none});
    CHECK(m.ffn_types == std::vector{F::none, F::none, F::dense, F::moe});
    REQUIRE(m.state);
    CHECK(m.state->kind == StateKind::mamba2);
    CHECK(m.state->inner == 4 * 16); // mamba_num_heads × mamba_head_dim
    CHECK_THROWS_WITH(
        four_layers(R"("model_type": "nemotron_h", "hybrid_override_pattern": "M*-X")", d),
        Catch::Contains("hybrid_override_pattern character 'X' is not one kvcalc reads"));
    CHECK_THROWS_WITH(
        four_layers(R"("model_type": "nemotron_h", "hybrid_override_pattern": "M*-")", d),
        Catch::Contains("hybrid_override_pattern has 3 characters but the model has 4 layers"));
  }
  SECTION("layer_types: one word per layer, the feed-forward parts from the MLP keys") {
    Model m = four_layers(attending(R"("model_type": "gemma3_text", "intermediate_size": 128,
      "sliding_window": 8, "layer_types": ["sliding_attention", "full_attention",
      "sliding_attention", "full_attention"])"),
                          d);
    CHECK(m.layer_types == std::vector{L::sliding, L::full, L::sliding, L::full});
    CHECK(m.ffn_types == std::vector(4, F::dense));
    CHECK(m.sliding_window == 8);
    // Nemotron-H's block words: each block a mixer or a feed-forward part, as in its pattern.
    Model blocks = four_layers(attending(R"("model_type": "nemotron_h",
      "layers_block_type": ["mamba", "attention", "mlp", "moe"], "intermediate_size": 128,
      "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32,
      "mamba_num_heads": 4, "mamba_head_dim": 16, "n_groups": 1, "ssm_state_size": 16,
      "conv_kernel": 4)"),
                               d);
    CHECK(blocks.layer_types == std::vector{L::state, L::full, L::none, L::none});
    CHECK(blocks.ffn_types == std::vector{F::none, F::none, F::dense, F::moe});
    REQUIRE(blocks.state);
    CHECK(blocks.state->kind == StateKind::mamba2); // from mamba_num_heads
    CHECK_THROWS_WITH(four_layers(R"("model_type": "x", "layer_types": ["full_attention"])", d),
                      Catch::Contains("layer_types must list one type per layer (4 layers)"));
  }
  SECTION("MiniMax's attn_type_list: 0 lightning attention, 1 softmax attention") {
    Model m = four_layers(attending(R"("model_type": "minimax", "intermediate_size": 128,
      "attn_type_list": [0, 1, 0, 1])"),
                          d);
    CHECK(m.layer_types == std::vector{L::state, L::full, L::state, L::full});
    REQUIRE(m.state);
    CHECK(m.state->kind == StateKind::lightning);
    CHECK(m.state->heads == 4);     // num_attention_heads
    CHECK(m.state->head_dim == 16); // the attention's head_dim
    CHECK_THROWS_WITH(four_layers(R"("model_type": "minimax", "attn_type_list": [0, 1, 2, 1])", d),
                      Catch::Contains("attn_type_list entries must be 0 (linear) or 1 (softmax)"));
  }
  SECTION("Kimi-Linear's 1-based kda_layers and full_attn_layers") {
    auto kimi = [&](const std::string& lists) {
      return four_layers(attending(R"("model_type": "kimi_linear", "intermediate_size": 128,
        "linear_attn_config": {"num_heads": 4, "head_dim": 16, )" +
                                   lists + "}"),
                         d);
    };
    Model m = kimi(R"("kda_layers": [1, 2, 3], "full_attn_layers": [4])");
    CHECK(m.layer_types == std::vector{L::state, L::state, L::state, L::full});
    REQUIRE(m.state);
    CHECK(m.state->kind == StateKind::kda);
    CHECK(m.state->conv_kernel == 4); // short_conv_kernel_size's default
    CHECK_THROWS_WITH(kimi(R"("kda_layers": [1, 2], "full_attn_layers": [4])"),
                      Catch::Contains("kda_layers and full_attn_layers must name every layer"));
    CHECK_THROWS_WITH(kimi(R"("kda_layers": [0, 1, 2], "full_attn_layers": [4])"),
                      Catch::Contains("kda_layers entries are 1-based layer numbers from 1 to 4, "
                                      "each once; got 0"));
    CHECK_THROWS_WITH(kimi(R"("kda_layers": [1, 2, 3], "full_attn_layers": [3])"),
                      Catch::Contains("full_attn_layers entries are 1-based layer numbers from 1 "
                                      "to 4, each once; got 3"));
  }
  SECTION("Qwen3-Next's full_attention_interval: every interval-th layer attends") {
    Model m = four_layers(attending(R"("model_type": "qwen3_next", "intermediate_size": 128,
      "full_attention_interval": 2, "linear_num_key_heads": 2, "linear_num_value_heads": 4,
      "linear_key_head_dim": 16, "linear_value_head_dim": 16, "linear_conv_kernel_dim": 4)"),
                          d);
    CHECK(m.layer_types == std::vector{L::state, L::full, L::state, L::full});
    REQUIRE(m.state);
    CHECK(m.state->kind == StateKind::gated_deltanet); // from linear_num_value_heads
    CHECK_THROWS_WITH(four_layers(R"("model_type": "x", "full_attention_interval": 0)", d),
                      Catch::Contains("full_attention_interval must be at least 1"));
  }
  SECTION("Jamba's attn_layer_period and attn_layer_offset: attention where i % period == offset") {
    Model m = four_layers(attending(R"("model_type": "jamba", "intermediate_size": 128,
      "attn_layer_period": 4, "attn_layer_offset": 1, "mamba_d_state": 16, "mamba_d_conv": 4,
      "mamba_expand": 2)"),
                          d);
    CHECK(m.layer_types == std::vector{L::state, L::full, L::state, L::state});
    REQUIRE(m.state);
    CHECK(m.state->kind == StateKind::mamba1);
    CHECK(m.state->inner == 2 * 64); // mamba_expand × hidden_size
    CHECK_THROWS_WITH(
        four_layers(R"("model_type": "jamba", "attn_layer_period": 2, "attn_layer_offset": 2)", d),
        Catch::Contains("attn_layer_period must be at least 1 and above attn_layer_offset"));
  }
  SECTION("Bamba's attn_layer_indices: attention on the listed layers, Mamba-2 elsewhere") {
    Model m = four_layers(attending(R"("model_type": "bamba", "intermediate_size": 128,
      "attn_layer_indices": [2], "mamba_n_heads": 4, "mamba_d_head": 32, "mamba_n_groups": 1,
      "mamba_d_state": 16, "mamba_d_conv": 4, "mamba_expand": 2)"),
                          d);
    CHECK(m.layer_types == std::vector{L::state, L::state, L::full, L::state});
    REQUIRE(m.state);
    CHECK(m.state->kind == StateKind::mamba2);
    CHECK(m.state->inner == 2 * 64); // mamba_expand × hidden_size
    CHECK_THROWS_WITH(four_layers(R"("model_type": "bamba", "attn_layer_indices": [4])", d),
                      Catch::Contains("attn_layer_indices entries must be below 4"));
  }
  SECTION("mamba, mamba2 and falcon_mamba: every layer a Mamba mixer and nothing else") {
    Model m = four_layers(
        R"("model_type": "mamba", "state_size": 16, "conv_kernel": 4, "intermediate_size": 128)",
        d);
    CHECK(m.layer_types == std::vector(4, L::state));
    CHECK(m.ffn_types == std::vector(4, F::none));
    REQUIRE(m.state);
    CHECK(m.state->kind == StateKind::mamba1);
    CHECK(m.state->inner == 128); // intermediate_size, the model having no attention
  }
  SECTION("Llama 4's attention_chunk_size: RoPE layers chunked, NoPE layers global") {
    const std::string llama4 = attending(R"("model_type": "llama4_text", "intermediate_size": 128,
      "max_position_embeddings": 1024, "attention_chunk_size": 8)");
    Model listed = four_layers(llama4 + R"(, "no_rope_layers": [1, 0, 1, 1])", d);
    CHECK(listed.layer_types == std::vector{L::chunked, L::full, L::chunked, L::chunked});
    CHECK(listed.attention_chunk == 8);
    Model every_second = four_layers(llama4 + R"(, "no_rope_layer_interval": 2)", d);
    CHECK(every_second.layer_types == std::vector{L::chunked, L::full, L::chunked, L::full});
    CHECK_FALSE(mentions(d, "no no_rope_layers"));
    // Neither: every 4th layer is NoPE (Llama4TextConfig's default), said in a warning.
    Model by_default = four_layers(llama4, d);
    CHECK(by_default.layer_types == std::vector{L::chunked, L::chunked, L::chunked, L::full});
    CHECK(mentions(d, "config has attention_chunk_size but no no_rope_layers: every 4th layer"));
  }
  SECTION("no encoding: every layer is full attention") {
    Model m = four_layers(attending(R"("model_type": "llama", "intermediate_size": 128)"), d);
    CHECK(m.layer_types == std::vector(4, L::full));
  }
  SECTION("a family kvcalc does not model is refused before its layout is read") {
    CHECK_THROWS_WITH(four_layers(R"("model_type": "falcon_h1", "layer_types": ["x"])", d),
                      Catch::Contains("model_type 'falcon_h1' runs attention and a Mamba-2 mixer "
                                      "in parallel in every layer; kvcalc does not model it"));
  }
}

// Which layers of an MoE config are MoE, rule by rule (4 layers, each list worked by hand).
TEST_CASE("the MoE keys of a config.json say which layers are MoE", "[hf][ffn]") {
  using F = FfnType;
  Diagnostics d;
  auto moe = [&](const std::string& keys) {
    return four_layers(attending(R"("model_type": "x", "intermediate_size": 128,
      "n_routed_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32, )" +
                                 keys),
                       d)
        .ffn_types;
  };
  // Every layer, unless a rule says otherwise.
  CHECK(moe(R"("first_k_dense_replace": 0)") == std::vector(4, F::moe));
  // DeepSeek: the first layer dense, then every 2nd layer counted from 0 (layer 2).
  CHECK(moe(R"("first_k_dense_replace": 1, "moe_layer_freq": 2)") ==
        std::vector{F::dense, F::dense, F::moe, F::dense});
  CHECK(moe(R"("moe_layer_freq": [0, 1, 1, 0])") ==
        std::vector{F::dense, F::moe, F::moe, F::dense});
  // Qwen: layer i is MoE when (i + 1) % step == 0, unless mlp_only_layers lists it.
  CHECK(moe(R"("decoder_sparse_step": 2)") == std::vector{F::dense, F::moe, F::dense, F::moe});
  CHECK(moe(R"("decoder_sparse_step": 2, "mlp_only_layers": [3])") ==
        std::vector{F::dense, F::moe, F::dense, F::dense});
  // Llama 4: every step-th layer.
  CHECK(moe(R"("interleave_moe_layer_step": 4)") ==
        std::vector{F::dense, F::dense, F::dense, F::moe});
  // Jamba: MoE where i % period == offset.
  CHECK(moe(R"("expert_layer_period": 2, "expert_layer_offset": 0)") ==
        std::vector{F::moe, F::dense, F::moe, F::dense});
  CHECK(moe(R"("moe_layers": [1, 2])") == std::vector{F::dense, F::moe, F::moe, F::dense});
  CHECK_THROWS_WITH(moe(R"("expert_layer_period": 2, "expert_layer_offset": 2)"),
                    Catch::Contains("expert_layer_period must be at least 1 and above "
                                    "expert_layer_offset"));
  CHECK_THROWS_WITH(moe(R"("mlp_only_layers": [4])"),
                    Catch::Contains("mlp_only_layers entries must be below 4"));
}

TEST_CASE("a config is read by what it has: family, layer count, chunk", "[hf]") {
  Diagnostics d;
  SECTION("no model_type: the family the architecture class names") {
    Model m = parse_hf_config(R"({"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2,
      "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100,
      "torch_dtype": "bfloat16"})",
                              "c.json", d);
    CHECK(m.architecture == "LlamaForCausalLM");
    CHECK(mentions(d, "config has no model_type: reading it as 'LlamaForCausalLM'"));
  }
  SECTION("no layer count: Nemotron-H's pattern has one character per layer") {
    Model m = parse_hf_config(attending(R"({"model_type": "nemotron_h", "hidden_size": 64,
      "vocab_size": 100, "torch_dtype": "bfloat16", "hybrid_override_pattern": "M-*-M-",
      "intermediate_size": 128, "mamba_num_heads": 4, "mamba_head_dim": 16, "n_groups": 1,
      "ssm_state_size": 16, "conv_kernel": 4)") +
                                  "}",
                              "c.json", d);
    CHECK(m.layers == 6);
  }
  SECTION("no layer count: Nemotron-3's list of layer types has one entry per layer") {
    Model m = parse_hf_config(attending(R"({"model_type": "nemotron_h", "hidden_size": 64,
      "vocab_size": 100, "torch_dtype": "bfloat16",
      "layers_block_type": ["mamba", "attention", "mamba", "moe"],
      "intermediate_size": 128, "mamba_num_heads": 4, "mamba_head_dim": 16, "n_groups": 1,
      "ssm_state_size": 16, "conv_kernel": 4, "n_routed_experts": 4, "num_experts_per_tok": 2,
      "moe_intermediate_size": 32)") +
                                  "}",
                              "c.json", d);
    CHECK(m.layers == 4);
  }
  SECTION("a chunk as long as the context never binds: the chunked layers attend over all") {
    Model m = four_layers(attending(R"("model_type": "llama4_text", "intermediate_size": 128,
      "max_position_embeddings": 8, "attention_chunk_size": 8, "no_rope_layers": [1, 1, 1, 0])"),
                          d);
    CHECK(m.layer_types == std::vector(4, LayerType::full));
    CHECK(m.attention_chunk == 0);
    CHECK(mentions(d, "attention_chunk_size 8 is not below max_position_embeddings: it never "
                      "binds"));
  }
}
