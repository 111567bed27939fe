#include <catch2/catch.hpp>

#include <kvcalc/model/loader.hpp>
#include <kvcalc/model/registry.hpp>

using namespace kvcalc;
using namespace kvcalc::model;

namespace {

const char* k_llama_like = R"(name: tiny
source: test
layers: 4
hidden_size: 256
vocab_size: 1000
attention:
  kind: gqa
  heads: 8
  kv_heads: 2
mlp:
  intermediate_size: 512
)";

std::string replace(std::string text, const std::string& from, const std::string& to) {
  auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

/// The message parse_model_yaml stops with on `text` (as m.yaml), or "no error".
std::string error_of(const std::string& text) {
  try {
    (void)parse_model_yaml(text, "m.yaml");
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

} // namespace

TEST_CASE("a minimal model takes its defaults", "[model]") {
  Model m = parse_model_yaml(k_llama_like, "tiny.yaml");
  CHECK(m.display_name == "tiny");
  CHECK(m.dtype == DType::bf16);
  CHECK(m.attention.kind == AttentionKind::gqa);
  CHECK(m.attention.head_dim == 32); // hidden 256 / 8 heads
  CHECK(m.attention.v_head_dim == 32);
  CHECK(m.mlp.kind == MlpKind::gated);
  CHECK(m.layer_types == std::vector<LayerType>(4, LayerType::full));
  CHECK(attention_label(m) == "gqa");
}

TEST_CASE("layer patterns expand cyclically", "[model][pattern]") {
  using enum LayerType;
  CHECK(expand_layer_pattern("alternating", 4) ==
        std::vector<LayerType>{sliding, full, sliding, full});
  CHECK(expand_layer_pattern("sliding", 2) == std::vector<LayerType>{sliding, sliding});
  // Gemma 3: 5 local then 1 global, cut at the end (62 layers -> 10 global).
  auto gemma3 = expand_layer_pattern("5:1", 62);
  CHECK(std::count(gemma3.begin(), gemma3.end(), full) == 10);
  CHECK(gemma3[5] == full);
  CHECK(gemma3[61] == sliding);
  CHECK(expand_layer_pattern("state*3, full", 8) ==
        std::vector<LayerType>{state, state, state, full, state, state, state, full});
  CHECK(expand_layer_pattern("chunked*3, full", 4) ==
        std::vector<LayerType>{chunked, chunked, chunked, full});
  CHECK_THROWS_WITH(expand_layer_pattern("linear*3, full", 8),
                    Catch::Contains("layer type 'linear' is now 'state'"));
  CHECK_THROWS_WITH(expand_layer_pattern("sliding, globl", 4),
                    Catch::Contains("unknown type 'globl'; expected a layer type"));
  CHECK_THROWS_AS(expand_layer_pattern("0:1", 4), InputError);
  CHECK_THROWS_AS(expand_layer_pattern("", 4), InputError);
  // Bounded whatever the input: before the bound 10^9 layers took 4 GB, 2^64 − 1 threw
  // std::length_error and a long cycle ran for minutes (docs/reliability.md).
  CHECK(expand_layer_pattern("full", k_max_layers).size() == 100'000);
  CHECK_THROWS_WITH(expand_layer_pattern("full", k_max_layers + 1),
                    Catch::Contains("is more than kvcalc takes (at most 100,000"));
  CHECK_THROWS_WITH(expand_layer_pattern("sliding*99999, full*2", 4),
                    Catch::Contains("the cycle is longer than 100,000 layers"));
}

TEST_CASE("layer patterns describe themselves as the shortest cycle", "[model][pattern]") {
  using enum LayerType;
  CHECK(describe_layer_pattern(std::vector<LayerType>(3, full)) == std::string{});
  CHECK(describe_layer_pattern(expand_layer_pattern("alternating", 42)) == "sliding, full");
  CHECK(describe_layer_pattern(expand_layer_pattern("5:1", 62)) == "sliding*5, full");
  CHECK(describe_layer_pattern(std::vector<LayerType>(5, sliding)) == "sliding");
  CHECK(describe_layer_pattern({sliding, full, full, sliding, full}) == std::nullopt);
}

TEST_CASE("errors carry file:line:col", "[model][errors]") {
  CHECK(error_of(replace(k_llama_like, "  kv_heads: 2", "  kv_head: 2")) ==
        "m.yaml:9:3: unknown key 'kv_head'; did you mean 'kv_heads'?");
  CHECK(error_of(replace(k_llama_like, "  kv_heads: 2", "  kv_heads: 3")) ==
        "m.yaml:9:13: heads (8) must be a multiple of kv_heads (3)");
  CHECK(error_of(replace(k_llama_like, "heads: 8", "heads: 0")) ==
        "m.yaml:8:10: 'attention.heads' must be at least 1 (query heads)");
  CHECK(error_of(replace(k_llama_like, "layers: 4", "layers: -4")) ==
        "m.yaml:3:9: 'layers' must not be negative, got -4");
  CHECK(error_of(replace(k_llama_like, "layers: 4", "layers: four")) ==
        "m.yaml:3:9: 'layers' must be a whole number, got 'four'");
  CHECK(error_of(replace(k_llama_like, "layers: 4\n", "")) ==
        "m.yaml:1:1: missing required key 'layers' (the number of transformer layers)");
  CHECK(error_of(replace(k_llama_like, "layers: 4", "layers: 99999999999999999999")) ==
        "m.yaml:3:9: 'layers' = 99999999999999999999 does not fit in 64 bits");
  CHECK(error_of(replace(k_llama_like, "  kind: gqa", "  kind: mla")) ==
        "m.yaml:9:13: 'kv_heads' does not apply to kind mla: its key width is qk_nope_head_dim + "
        "qk_rope_head_dim and every head reads the shared latent");
  CHECK(error_of(std::string(k_llama_like) + "sliding_window: 0\n") ==
        "m.yaml:12:17: 'sliding_window' must be at least 1 token");
  CHECK(error_of(std::string(k_llama_like) + "layer_pattern: alternating\n") ==
        "m.yaml:12:16: some layers slide but 'sliding_window' (tokens) is not set");
  CHECK(error_of("name: [x\n").starts_with("m.yaml:2:1: syntax error"));
}

TEST_CASE("a model file's names, layers, mixers and tensor formats", "[model][yaml]") {
  // A window with no layer_pattern: every layer slides.
  Model m = parse_model_yaml(std::string(k_llama_like) + "sliding_window: 1024\n", "m.yaml");
  CHECK(m.layer_types == std::vector<LayerType>(4, LayerType::sliding));
  CHECK(m.sliding_window == 1024);
  // Line 12 is the first after k_llama_like; a value's column follows "key: ".
  CHECK(error_of(std::string(k_llama_like) + "aliases: tiny-1\n") ==
        "m.yaml:12:10: 'aliases' must be a list of names");
  CHECK(error_of(std::string(k_llama_like) + "aliases: [[a]]\n") ==
        "m.yaml:12:11: each alias must be a name");
  CHECK(
      error_of(replace(k_llama_like, "attention:\n  kind: gqa\n  heads: 8\n  kv_heads: 2\n", "")) ==
      "m.yaml:1:1: missing required key 'attention' (a map with kind, heads, ...)");
  CHECK(error_of(std::string(k_llama_like) + "linear_state: 4\n")
            .starts_with("m.yaml:12:15: 'linear_state' is now 'state' with a kind"));
  // A misspelt tensor would change nothing: it is an error at its format.
  CHECK(error_of(std::string(k_llama_like) +
                 "weight_formats:\n  mlp.down_prj: int4 group:128 scale:2\n") ==
        "m.yaml:13:17: 'mlp.down_prj' is not a tensor of tiny; did you mean 'mlp.down_proj'? "
        "(docs/model-format.md names the tensors)");
}

TEST_CASE("each rule of a model names the key at fault", "[model][errors]") {
  // Line 12 is the first after k_llama_like; a value's column follows "key: ".
  const std::string tiny = k_llama_like;
  CHECK(error_of(replace(tiny, "name: tiny", "name: Tiny")) ==
        "m.yaml:1:7: 'name' may use only lowercase letters, digits, '-', '.' and '_'; got 'Tiny'");
  // The sliding layers' own geometry is checked under its own path.
  CHECK(error_of(tiny + "sliding_window: 8\nsliding_attention:\n  head_dim: 0\n") ==
        "m.yaml:14:13: 'sliding_attention.head_dim' must be at least 1 (the key width per head)");
  CHECK(error_of(tiny + "layer_pattern: state, full\nstate:\n  kind: mamba2\n  inner: 512\n"
                        "  heads: 8\n  head_dim: 64\n  groups: 3\n  state_size: 16\n"
                        "  conv_kernel: 4\n") ==
        "m.yaml:18:11: state heads (8) must be a multiple of groups (3)");
  CHECK(error_of(tiny + "kv_shared_layers: 4\n") ==
        "m.yaml:12:19: kv_shared_layers (4) must be below the 4 attention layers: shared layers "
        "read an earlier layer's KV");
  CHECK(error_of(tiny + "moe:\n  routed_experts: 4\n  experts_per_token: 8\n"
                        "  expert_intermediate_size: 64\n") ==
        "m.yaml:14:22: experts_per_token (8) exceeds routed_experts (4)");
}

TEST_CASE("sizes that overflow 64 bits are located errors", "[model][errors]") {
  std::string text =
      replace(k_llama_like, "  kv_heads: 2", "  kv_heads: 2\n  head_dim: 9223372036854775807");
  CHECK_THROWS_WITH(parse_model_yaml(text, "m.yaml"),
                    Catch::StartsWith("m.yaml:7:3:") && Catch::Contains("does not fit in 64 bits"));
}

TEST_CASE("every bundled model parses, validates and round-trips through import YAML",
          "[model][zoo]") {
  REQUIRE(builtin_models().size() >= 24);
  for (const Model& m : builtin_models()) {
    INFO(m.name);
    CHECK(!m.source.empty());
    Model back = parse_model_yaml(model_to_yaml(m), "roundtrip.yaml");
    CHECK(back.name == m.name);
    CHECK(back.aliases == m.aliases);
    CHECK(back.layers == m.layers);
    CHECK(back.attention.kind == m.attention.kind);
    CHECK(back.attention.kv_heads == m.attention.kv_heads);
    CHECK(back.attention.head_dim == m.attention.head_dim);
    CHECK(back.attention.v_head_dim == m.attention.v_head_dim);
    CHECK(back.attention.mla.kv_lora_rank == m.attention.mla.kv_lora_rank);
    CHECK(back.attention.mla.q_lora_rank == m.attention.mla.q_lora_rank);
    CHECK(back.layer_types == m.layer_types);
    CHECK(back.sliding_window == m.sliding_window);
    CHECK(back.moe.has_value() == m.moe.has_value());
    CHECK(back.mlp.intermediate_size == m.mlp.intermediate_size);
    CHECK(back.dtype == m.dtype);
    CHECK(back.weight_dtype == m.weight_dtype);
    CHECK(back.tie_word_embeddings == m.tie_word_embeddings);
    CHECK(back.mtp_layers == m.mtp_layers);
  }
}

TEST_CASE("every bundled file is named after its model, which the registry finds by it",
          "[model][zoo][registry]") {
  REQUIRE(builtin_model_files().size() == builtin_models().size());
  for (const EmbeddedFile& file : builtin_model_files()) {
    INFO(file.path);
    Model m = parse_model_yaml(std::string(file.text), std::string(file.path));
    CHECK(file.path == "models/" + m.name + ".yaml");
    const Model* found = find_builtin_model(m.name);
    REQUIRE(found != nullptr);
    CHECK(found->name == m.name);
    CHECK(found->layers == m.layers);
    CHECK(found->source == m.source);
  }
}

TEST_CASE("the registry finds names and aliases in any case and suggests near misses",
          "[model][registry]") {
  Diagnostics d;
  CHECK(load_model("DeepSeek-R1", d).name == "deepseek-v3");
  CHECK(find_builtin_model("LLAMA-3.1-8B") != nullptr);
  CHECK_THROWS_WITH(load_model("deepseek-v4", d),
                    Catch::Contains("unknown model 'deepseek-v4'; did you mean 'deepseek-v2' or "
                                    "'deepseek-v3'?"));
  CHECK_THROWS_WITH(load_model("no/such/file.yaml", d),
                    Catch::Contains("cannot open model file 'no/such/file.yaml'"));
}

TEST_CASE("a model file reads the same with LF, CR LF or CR line ends", "[model][yaml]") {
  Model lf = parse_model_yaml(k_llama_like, "lf.yaml");
  for (const char* end : {"\r\n", "\r"}) {
    std::string text = k_llama_like;
    for (std::size_t at = text.find('\n'); at != std::string::npos;
         at = text.find('\n', at + std::string(end).size())) {
      text.replace(at, 1, end);
    }
    Model m = parse_model_yaml(text, "other.yaml");
    CHECK(m.layers == lf.layers);
    CHECK(m.attention.kv_heads == lf.attention.kv_heads);
    CHECK(m.hidden_size == lf.hidden_size);
    CHECK(m.vocab_size == lf.vocab_size);
  }
}
