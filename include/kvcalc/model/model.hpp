#pragma once
/// The architecture description every analysis reads. Plain data; the loaders fill it and
/// validate it (docs/model-format.md documents each field).

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <kvcalc/core/checked.hpp>
#include <kvcalc/core/dtype.hpp>
#include <kvcalc/core/error.hpp>

namespace kvcalc {

enum class AttentionKind { mha, mqa, gqa, mla };

/// What a layer keeps per sequence.
enum class LayerType {
  full,    ///< attention over the whole context
  sliding, ///< attention over the last `sliding_window` tokens
  linear,  ///< linear attention / SSM: a constant state per sequence
};

/// Which projections of an attention block carry a bias.
enum class AttentionBias {
  none, ///< Llama, Mistral, DeepSeek
  qkv,  ///< q, k and v (Qwen2/2.5)
  all,  ///< q, k, v and o (StarCoder, gpt-oss)
};

enum class NormKind {
  rms,   ///< RMSNorm: a weight per channel
  layer, ///< LayerNorm: a weight and a bias per channel
};

/// Which linear weights `weight_dtype` applies to.
enum class QuantizedWeights {
  linear,  ///< every linear layer of the blocks (fp8/int4 checkpoints)
  experts, ///< routed experts only (gpt-oss mxfp4)
};

enum class MlpKind {
  gated, ///< SwiGLU/GeGLU: gate, up and down matrices
  plain, ///< up and down matrices (GELU MLP of Falcon, StarCoder)
};

/// DeepSeek multi-head latent attention dimensions.
struct MlaDims {
  u64 q_lora_rank = 0;      ///< query compression rank d_c'; 0 when queries are not compressed
  u64 kv_lora_rank = 0;     ///< latent width d_c
  u64 qk_nope_head_dim = 0; ///< per-head query/key width without RoPE, d_nope
  u64 qk_rope_head_dim = 0; ///< decoupled RoPE key width d_R, shared by all heads
  u64 v_head_dim = 0;       ///< per-head value width d_v
};

struct Attention {
  AttentionKind kind = AttentionKind::mha;
  u64 heads = 0;      ///< query heads
  u64 kv_heads = 0;   ///< key/value heads; for MLA the heads of the expanded K and V (= heads)
  u64 head_dim = 0;   ///< key width per head; for MLA d_nope + d_R
  u64 v_head_dim = 0; ///< value width per head
  MlaDims mla;        ///< set when kind is mla
  AttentionBias bias = AttentionBias::none;
  bool qk_norm = false; ///< per-head RMSNorm of q and k, head_dim wide (Qwen3, Gemma 3)
  bool sinks = false;   ///< one learned attention-sink logit per head (gpt-oss)
};

struct Mlp {
  MlpKind kind = MlpKind::gated;
  u64 intermediate_size = 0; ///< width of the dense MLP (0 when every layer is MoE)
  bool bias = false;         ///< biases on the MLP (and expert) projections
};

struct Moe {
  u64 routed_experts = 0;
  u64 shared_experts = 0;
  u64 experts_per_token = 0;
  u64 expert_intermediate_size = 0;
  u64 shared_expert_intermediate_size = 0; ///< all shared experts together
  u64 first_dense_layers = 0;              ///< leading layers with a dense MLP instead of MoE
  bool router_bias = false; ///< a bias per expert on the router (DeepSeek-V3 correction, gpt-oss)
};

/// Per-sequence state of one linear-attention or SSM layer.
struct LinearState {
  u64 elements = 0;
  DType dtype = DType::fp32;
};

struct Model {
  std::string name;         ///< registry key, lowercase
  std::string display_name; ///< as the model's authors spell it
  std::vector<std::string> aliases;
  std::string source;                ///< where the numbers come from
  DType dtype = DType::bf16;         ///< activation dtype; default KV cache dtype
  std::optional<DType> weight_dtype; ///< when the published checkpoint is quantized
  QuantizedWeights quantized_weights = QuantizedWeights::linear; ///< what weight_dtype covers
  u64 layers = 0;
  u64 hidden_size = 0;
  u64 vocab_size = 0;
  u64 max_context = 0; ///< tokens; 0 when unknown
  bool tie_word_embeddings = false;
  bool learned_position_embeddings = false; ///< a max_context × hidden table (StarCoder)
  NormKind norm = NormKind::rms;
  u64 norms_per_layer = 2; ///< 1: Falcon-7B's parallel block; 4: Gemma 2/3
  Attention attention;
  Mlp mlp;
  std::optional<Moe> moe;
  u64 sliding_window = 0;             ///< tokens; 0 when no layer slides
  std::vector<LayerType> layer_types; ///< one per layer
  std::optional<LinearState> linear_state;
  u64 mtp_layers = 0;        ///< multi-token-prediction layers beyond `layers`
  std::optional<u64> params; ///< parameter count override, when the formula misses the model
};

[[nodiscard]] std::string_view attention_kind_name(AttentionKind k);
[[nodiscard]] std::string_view layer_type_name(LayerType t);

/// "mha", "mqa", "gqa", "mla", or "hybrid" when layers differ in what they keep.
[[nodiscard]] std::string attention_label(const Model& m);

/// The most layers kvcalc takes. Real models have at most a few hundred; the bound keeps the
/// per-layer list of a description (and the time to build it) small for any input.
inline constexpr u64 k_max_layers = 100'000;

/// Throws InputError when `layers` is above k_max_layers.
void check_layer_count(u64 layers);

/// Expands a layer pattern (docs/model-format.md): "full", "sliding", "linear" (every layer),
/// "alternating" (sliding, full, ...), "N:M" (N sliding then M full), or a cycle
/// "sliding*5, full" repeated over `layers` and cut at the end. Throws InputError for a bad
/// pattern, a cycle longer than k_max_layers, or `layers` above k_max_layers.
[[nodiscard]] std::vector<LayerType> expand_layer_pattern(std::string_view pattern, u64 layers);

/// The shortest cycle that reproduces `types` as expand_layer_pattern reads it ("sliding, full"),
/// "" when every layer is full; empty optional when only an explicit list describes it.
[[nodiscard]] std::optional<std::string>
describe_layer_pattern(const std::vector<LayerType>& types);

/// Checks the semantic rules of docs/model-format.md (positive sizes, heads divisible by KV
/// heads, MLA ranks present, windows, state sizes, sizes that overflow 64 bits). Throws
/// InputError located by `where`.
void validate_model(const Model& m, const Locator& where);

} // namespace kvcalc
