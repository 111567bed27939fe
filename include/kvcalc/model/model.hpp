#pragma once
/// The architecture description every analysis reads. Plain data; the loaders fill it and
/// validate it (docs/model-format.md documents each field).

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <kvcalc/core/checked.hpp>
#include <kvcalc/core/dtype.hpp>
#include <kvcalc/core/error.hpp>
#include <kvcalc/core/names.hpp>
#include <kvcalc/model/weight_format.hpp>

namespace kvcalc::model {

enum class AttentionKind { mha, mqa, gqa, mla };

/// The token mixer of one layer: what it keeps per sequence.
enum class LayerType {
  full,    ///< softmax attention over the whole context
  sliding, ///< softmax attention over the last `sliding_window` tokens
  chunked, ///< chunked local attention: the tokens of the current `attention_chunk`-token chunk
  state,   ///< a recurrent mixer (Mamba, linear attention): a constant state per sequence
  none,    ///< no mixer: an MLP-only block (Nemotron-H's '-' and 'E' layers)
};

/// The feed-forward part of one layer.
enum class FfnType {
  dense, ///< the dense MLP (`mlp`)
  moe,   ///< the mixture of experts (`moe`)
  none,  ///< no feed-forward part (Mamba blocks, Nemotron-H's 'M' and '*' layers)
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
  bool qk_norm = false;     ///< per-head RMSNorm of q and k, head_dim wide (Qwen3, Gemma 3)
  bool sinks = false;       ///< one learned attention-sink logit per head (gpt-oss)
  bool output_gate = false; ///< a gate on the attention output, projected beside q (Qwen3-Next)
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
  bool shared_gate =
      false; ///< a sigmoid gate on the shared experts' output (Qwen2-MoE, Qwen3-Next)
};

/// The recurrent mixers whose state kvcalc sizes, each by its own shape formula
/// (docs/formulas.md, "Per-sequence state").
enum class StateKind {
  mamba1, ///< Mamba: conv (d_conv − 1) × d_inner, SSM d_inner × d_state
  mamba2, ///< Mamba-2 / SSD: conv over d_inner + 2·groups·d_state, SSM heads × head_dim × d_state
  gated_deltanet, ///< Gated DeltaNet (Qwen3-Next): conv over 2·H_k·d_k + H_v·d_v, state H_v × d_k ×
                  ///< d_v
  kda,       ///< Kimi Delta Attention (Kimi-Linear): three convs and an fp32 heads × d × d state
  lightning, ///< lightning / linear attention (MiniMax): heads × d × d
  custom,    ///< a given number of elements per layer
};

/// The state of one recurrent layer, as the model's config gives it. Sizes that a kind does not
/// use stay 0 (docs/model-format.md, `state`).
struct StateSpec {
  StateKind kind = StateKind::custom;
  u64 heads = 0;        ///< mamba2: SSM heads; gated_deltanet: value heads; kda, lightning: heads
  u64 head_dim = 0;     ///< mamba2: head dim; gated_deltanet: value head dim; kda, lightning
  u64 key_heads = 0;    ///< gated_deltanet: key heads
  u64 key_head_dim = 0; ///< gated_deltanet: key head dim
  u64 inner = 0;        ///< mamba1, mamba2: d_inner (expand × hidden_size)
  u64 groups = 0;       ///< mamba2: n_groups of B and C
  u64 state_size = 0;   ///< mamba1, mamba2: d_state
  u64 conv_kernel = 0;  ///< mamba1, mamba2, gated_deltanet, kda: causal conv width
  u64 elements = 0;     ///< custom: elements per layer per sequence
  // Weights only (the parameter count), not the state:
  u64 dt_rank = 0;          ///< mamba1: rank of the Δ projection (time_step_rank)
  bool conv_bias = true;    ///< mamba1, mamba2: the causal conv has a bias (use_conv_bias)
  bool inner_norms = false; ///< mamba1: RMSNorms on Δ, B and C (Jamba)
  /// Element type of the convolution tail; unset: the engine's rule (the model dtype).
  std::optional<DType> conv_dtype;
  /// Element type of the recurrent (SSM) state; unset: the engine's rule.
  std::optional<DType> ssm_dtype;
};

/// The lightning indexer of DeepSeek sparse attention (DSA): per token per layer it caches one
/// key of `head_dim` fp8 values with an fp32 scale per 128, beside the MLA latent.
struct Indexer {
  u64 heads = 0;    ///< indexer query heads (index_n_heads)
  u64 head_dim = 0; ///< index_head_dim
  u64 topk = 0;     ///< tokens each query attends to (index_topk)
};

struct Model {
  std::string name;         ///< registry key, lowercase
  std::string display_name; ///< as the model's authors spell it
  std::vector<std::string> aliases;
  std::string source;       ///< where the numbers come from
  std::string architecture; ///< the HF architecture class ("GptOssForCausalLM"); "" when unknown

  DType dtype = DType::bf16;         ///< activation dtype; default KV cache dtype
  std::optional<DType> weight_dtype; ///< when the published checkpoint is quantized
  QuantizedWeights quantized_weights = QuantizedWeights::linear; ///< what weight_dtype covers
  /// A checkpoint's own layout, tensor by tensor (keys as the parameter count names them, MTP
  /// tensors prefixed "mtp."; docs/model-format.md): when given, it replaces weight_dtype and
  /// quantized_weights, and a tensor it leaves out is stored in `dtype`.
  std::map<std::string, WeightFormat> weight_formats;
  std::string quantization; ///< the method that wrote weight_formats ("awq", "gptq", ...)
  u64 layers = 0;
  u64 hidden_size = 0;
  u64 vocab_size = 0;  ///< 0 when unknown: footprints need no vocabulary, weights do
  u64 max_context = 0; ///< tokens; 0 when unknown
  bool tie_word_embeddings = false;
  bool lm_head_bias = false;                ///< a bias on the LM head (GPT-J)
  bool learned_position_embeddings = false; ///< a max_context × hidden table (StarCoder)
  NormKind norm = NormKind::rms;
  u64 norms_per_layer = 2; ///< 1: Falcon-7B's parallel block; 4: Gemma 2/3
  Attention attention;     ///< of full and chunked layers, and of sliding ones unless overridden;
                           ///< heads 0 when no layer attends (a pure Mamba model)
  Mlp mlp;
  std::optional<Moe> moe;
  /// Sliding layers' attention, where its heads or widths differ from `attention`.
  std::optional<Attention> sliding_attention;
  std::optional<Indexer> indexer;     ///< DSA: an indexer key cache on every attention layer
  std::optional<StateSpec> state;     ///< the mixer of the `state` layers
  u64 sliding_window = 0;             ///< tokens; 0 when no layer slides
  u64 attention_chunk = 0;            ///< tokens; 0 when no layer is chunked
  std::vector<LayerType> layer_types; ///< one per layer
  std::vector<FfnType> ffn_types;     ///< one per layer
  /// The last `kv_shared_layers` attention layers read the KV of an earlier layer of their type
  /// and store none (Gemma 3n's num_kv_shared_layers).
  u64 kv_shared_layers = 0;
  u64 mtp_layers = 0;        ///< multi-token-prediction layers beyond `layers`
  std::optional<u64> params; ///< parameter count override, when the formula misses the model
};

inline constexpr NameTable<AttentionKind, 4> k_attention_kinds{"attention kind",
                                                               {{{AttentionKind::mha, "mha"},
                                                                 {AttentionKind::mqa, "mqa"},
                                                                 {AttentionKind::gqa, "gqa"},
                                                                 {AttentionKind::mla, "mla"}}}};
inline constexpr NameTable<LayerType, 5> k_layer_types{"layer type",
                                                       {{{LayerType::full, "full"},
                                                         {LayerType::sliding, "sliding"},
                                                         {LayerType::chunked, "chunked"},
                                                         {LayerType::state, "state"},
                                                         {LayerType::none, "none"}}}};
inline constexpr NameTable<FfnType, 3> k_ffn_types{
    "feed-forward type",
    {{{FfnType::dense, "dense"}, {FfnType::moe, "moe"}, {FfnType::none, "none"}}}};
inline constexpr NameTable<StateKind, 6> k_state_kinds{
    "state kind",
    {{{StateKind::mamba1, "mamba1"},
      {StateKind::mamba2, "mamba2"},
      {StateKind::gated_deltanet, "gated_deltanet"},
      {StateKind::kda, "kda"},
      {StateKind::lightning, "lightning"},
      {StateKind::custom, "custom"}}}};

[[nodiscard]] constexpr std::string_view attention_kind_name(AttentionKind k) {
  return k_attention_kinds.name(k);
}
[[nodiscard]] constexpr std::string_view layer_type_name(LayerType t) {
  return k_layer_types.name(t);
}

/// Full, sliding and chunked layers attend over cached tokens; state and none layers do not.
[[nodiscard]] constexpr bool is_attention(LayerType t) {
  return t == LayerType::full || t == LayerType::sliding || t == LayerType::chunked;
}

/// Some layer of `m` attends (a pure Mamba model has none).
[[nodiscard]] bool has_attention(const Model& m);

/// The attention of layers of type `t`: `sliding_attention` for sliding layers when set, else
/// `attention`.
[[nodiscard]] const Attention& attention_of(const Model& m, LayerType t);

/// Layers of `m` of type `t`.
[[nodiscard]] u64 count_layers(const Model& m, LayerType t);

/// "mha", "mqa", "gqa", "mla", "ssm" (no attention), or "hybrid" when layers differ in what
/// they keep.
[[nodiscard]] std::string attention_label(const Model& m);

/// The most layers kvcalc takes. Real models have at most a few hundred; the bound keeps the
/// per-layer list of a description (and the time to build it) small for any input.
inline constexpr u64 k_max_layers = 100'000;

/// Throws InputError when `layers` is above k_max_layers.
void check_layer_count(u64 layers);

/// Expands a layer pattern (docs/model-format.md): one layer type for every layer,
/// "alternating" (sliding, full, ...), "N:M" (N sliding then M full), or a cycle
/// "sliding*5, full" repeated over `layers` and cut at the end. Throws InputError for a bad
/// pattern, a cycle longer than k_max_layers, or `layers` above k_max_layers.
[[nodiscard]] std::vector<LayerType> expand_layer_pattern(std::string_view pattern, u64 layers);

/// Expands a feed-forward pattern: one type for every layer, or a cycle "dense, moe".
[[nodiscard]] std::vector<FfnType> expand_ffn_pattern(std::string_view pattern, u64 layers);

/// The shortest cycle that reproduces `types` as expand_layer_pattern reads it ("sliding, full"),
/// "" when every layer is full; empty optional when only an explicit list describes it.
[[nodiscard]] std::optional<std::string>
describe_layer_pattern(const std::vector<LayerType>& types);

/// The shortest cycle that reproduces feed-forward `types` ("dense, moe"); empty optional when
/// only an explicit list describes it.
[[nodiscard]] std::optional<std::string> describe_ffn_pattern(const std::vector<FfnType>& types);

/// The feed-forward types of `pattern` (nullopt: "moe" with `moe`, else "dense") with the
/// first `moe->first_dense_layers` layers dense.
[[nodiscard]] std::vector<FfnType> ffn_types_of(std::optional<std::string_view> pattern, u64 layers,
                                                const std::optional<Moe>& moe);

/// Checks the semantic rules of docs/model-format.md (positive sizes, heads divisible by KV
/// heads, MLA ranks present, windows, state sizes, sizes that overflow 64 bits). Throws
/// InputError located by `where`.
void validate_model(const Model& m, const Locator& where);

} // namespace kvcalc::model
