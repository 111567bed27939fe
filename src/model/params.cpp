#include <kvcalc/model/params.hpp>

#include <algorithm>

namespace kvcalc::model {

u64 TensorGroup::params() const {
  return checked_mul(checked_mul(rows, cols, "parameters"), count, "parameters");
}

namespace {

/// Appends tensors of one transformer block, `layers` times.
class Builder {
public:
  Builder(const Model& m, std::vector<TensorGroup>& out) : m_model(m), m_out(out) {}

  void add(std::string name, u64 rows, u64 cols, u64 count, TensorPlace place, bool linear) {
    if (rows == 0 || cols == 0 || count == 0) {
      return;
    }
    m_out.push_back({std::move(name), rows, cols, count, place, linear, m_mtp});
  }
  void linear(std::string name, u64 rows, u64 cols, u64 count) {
    add(std::move(name), rows, cols, count, TensorPlace::layer, true);
  }
  /// Per-channel weights that split with the channels (convolutions, SSM decays): not matmuls.
  void channels(std::string name, u64 rows, u64 cols, u64 count) {
    add(std::move(name), rows, cols, count, TensorPlace::layer, false);
  }
  void vector(std::string name, u64 size, u64 count) {
    add(std::move(name), 1, size, count, TensorPlace::layer, false);
  }
  void norm(std::string name, u64 size, u64 count) {
    vector(name, size, count);
    if (m_model.norm == NormKind::layer) {
      vector(name + ".bias", size, count);
    }
  }

  /// Attention of `n` layers with geometry `a`.
  void attention(u64 n, const Attention& a) {
    u64 h = m_model.hidden_size;
    if (a.kind == AttentionKind::mla) {
      const MlaDims& d = a.mla;
      u64 q_width = checked_mul(a.heads, d.qk_nope_head_dim + d.qk_rope_head_dim);
      if (d.q_lora_rank > 0) {
        linear("attention.q_a_proj", d.q_lora_rank, h, n);
        vector("attention.q_a_layernorm", d.q_lora_rank, n);
        linear("attention.q_b_proj", q_width, d.q_lora_rank, n);
      } else {
        linear("attention.q_proj", q_width, h, n);
      }
      linear("attention.kv_a_proj_with_mqa", d.kv_lora_rank + d.qk_rope_head_dim, h, n);
      vector("attention.kv_a_layernorm", d.kv_lora_rank, n);
      linear("attention.kv_b_proj", checked_mul(a.heads, d.qk_nope_head_dim + d.v_head_dim),
             d.kv_lora_rank, n);
      linear("attention.o_proj", h, checked_mul(a.heads, d.v_head_dim), n);
      return;
    }
    u64 q = checked_mul(checked_mul(a.heads, a.head_dim), a.output_gate ? 2 : 1);
    u64 k = checked_mul(a.kv_heads, a.head_dim);
    u64 v = checked_mul(a.kv_heads, a.v_head_dim);
    u64 o_in = checked_mul(a.heads, a.v_head_dim);
    linear("attention.q_proj", q, h, n);
    linear("attention.k_proj", k, h, n);
    linear("attention.v_proj", v, h, n);
    linear("attention.o_proj", h, o_in, n);
    if (a.bias != AttentionBias::none) {
      vector("attention.qkv_bias", q + k + v, n);
    }
    if (a.bias == AttentionBias::all) {
      vector("attention.o_proj.bias", h, n);
    }
    if (a.qk_norm) {
      vector("attention.q_norm", a.head_dim, n);
      vector("attention.k_norm", a.head_dim, n);
    }
    if (a.sinks) {
      vector("attention.sinks", a.heads, n);
    }
  }

  /// An MLP of width `width`, `count` times, at `place`.
  void mlp(const std::string& name, u64 width, u64 count, TensorPlace place) {
    u64 h = m_model.hidden_size;
    bool gated = m_model.mlp.kind == MlpKind::gated;
    if (gated) {
      add(name + ".gate_proj", width, h, count, place, true);
    }
    add(name + ".up_proj", width, h, count, place, true);
    add(name + ".down_proj", h, width, count, place, true);
    if (m_model.mlp.bias) {
      add(name + ".bias", 1, (gated ? 2 * width : width) + h, count, place, false);
    }
  }

  /// MoE of `n` layers: router, routed and shared experts.
  void moe(u64 n) {
    const Moe& e = *m_model.moe;
    u64 h = m_model.hidden_size;
    linear("moe.router", e.routed_experts, h, n);
    m_out.back().linear = false; // routers stay in the activation dtype
    if (e.router_bias) {
      vector("moe.router.bias", e.routed_experts, n);
    }
    mlp("moe.experts", e.expert_intermediate_size, checked_mul(n, e.routed_experts),
        TensorPlace::expert);
    if (e.shared_expert_intermediate_size > 0) {
      mlp("moe.shared_experts", e.shared_expert_intermediate_size, n, TensorPlace::layer);
      if (e.shared_gate) {
        linear("moe.shared_expert_gate", 1, h, n);
        m_out.back().linear = false;
      }
    }
  }

  /// The mixer of `n` recurrent layers: its projections, convolution and per-channel vectors
  /// (docs/formulas.md §8, the recurrent mixer's row; the shapes of transformers' and vLLM's
  /// modeling code).
  void state(u64 n) {
    const StateSpec& s = *m_model.state;
    u64 h = m_model.hidden_size;
    u64 k = s.conv_kernel;
    switch (s.kind) {
    case StateKind::mamba1: {
      u64 inner = s.inner;
      linear("state.in_proj", 2 * inner, h, n);
      channels("state.conv1d", inner, k + (s.conv_bias ? 1 : 0), n);
      linear("state.x_proj", s.dt_rank + 2 * s.state_size, inner, n);
      linear("state.dt_proj", inner, s.dt_rank, n);
      channels("state.dt_proj.bias_D", inner, 2, n);
      channels("state.A_log", inner, s.state_size, n);
      linear("state.out_proj", h, inner, n);
      if (s.inner_norms) {
        vector("state.dt_b_c_norms", s.dt_rank + 2 * s.state_size, n);
      }
      break;
    }
    case StateKind::mamba2: {
      u64 conv = checked_add(s.inner, checked_mul(2 * s.groups, s.state_size));
      linear("state.in_proj", checked_add(s.inner, conv) + s.heads, h, n);
      channels("state.conv1d", conv, k + (s.conv_bias ? 1 : 0), n);
      channels("state.dt_bias_A_log_D", s.heads, 3, n);
      vector("state.norm", s.inner, n);
      linear("state.out_proj", h, s.inner, n);
      break;
    }
    case StateKind::gated_deltanet: {
      u64 key = checked_mul(s.key_heads, s.key_head_dim);
      u64 value = checked_mul(s.heads, s.head_dim);
      linear("state.in_proj_qkvz", 2 * key + 2 * value, h, n);
      linear("state.in_proj_ba", 2 * s.heads, h, n);
      channels("state.conv1d", 2 * key + value, k, n);
      channels("state.dt_bias_A_log", s.heads, 2, n);
      vector("state.norm", s.head_dim, n);
      linear("state.out_proj", h, value, n);
      break;
    }
    case StateKind::kda: {
      u64 width = checked_mul(s.heads, s.head_dim);
      linear("state.qkv_proj", 3 * width, h, n);
      channels("state.conv1d", 3 * width, k, n);
      linear("state.f_a_proj", s.head_dim, h, n);
      linear("state.f_b_proj", width, s.head_dim, n);
      linear("state.b_proj", s.heads, h, n);
      linear("state.g_a_proj", s.head_dim, h, n);
      linear("state.g_b_proj", width, s.head_dim, n);
      channels("state.A_log", s.heads, 1, n);
      channels("state.dt_bias", width, 1, n);
      vector("state.o_norm", s.head_dim, n);
      linear("state.o_proj", h, width, n);
      break;
    }
    case StateKind::lightning: {
      u64 width = checked_mul(s.heads, s.head_dim);
      linear("state.qkv_proj", 3 * width, h, n);
      linear("state.output_gate", width, h, n);
      vector("state.norm", width, n);
      linear("state.out_proj", h, width, n);
      break;
    }
    case StateKind::custom:
      break;
    }
  }

  /// DeepSeek sparse attention's lightning indexer on `n` layers: a query up-projection from
  /// the query latent, a key projection with its LayerNorm, and per-head weights.
  void indexer(u64 n) {
    const Indexer& x = *m_model.indexer;
    u64 h = m_model.hidden_size;
    u64 q_in = m_model.attention.mla.q_lora_rank ? m_model.attention.mla.q_lora_rank : h;
    linear("indexer.wq_b", checked_mul(x.heads, x.head_dim), q_in, n);
    linear("indexer.wk", x.head_dim, h, n);
    vector("indexer.k_norm", 2 * x.head_dim, n);
    linear("indexer.weights_proj", x.heads, h, n);
  }

  /// Blocks: `main` attention layers of the model's attention, `sliding` of the sliding
  /// layers', `norms` blocks' norms, `dense` dense MLPs, `sparse` MoE layers.
  void blocks(u64 main, u64 sliding, u64 norms, u64 dense, u64 sparse) {
    attention(main, m_model.attention);
    if (sliding > 0) {
      attention(sliding, attention_of(m_model, LayerType::sliding));
    }
    if (m_model.indexer) {
      indexer(main + sliding);
    }
    norm("norms", m_model.hidden_size, checked_mul(norms, m_model.norms_per_layer));
    if (dense > 0) {
      mlp("mlp", m_model.mlp.intermediate_size, dense, TensorPlace::layer);
    }
    if (sparse > 0) {
      moe(sparse);
    }
  }

  void set_mtp(bool mtp) { m_mtp = mtp; }

private:
  const Model& m_model;
  std::vector<TensorGroup>& m_out;
  bool m_mtp = false;
};

} // namespace

std::string format_key(const TensorGroup& t) {
  return t.mtp && !t.name.starts_with("mtp.") ? "mtp." + t.name : t.name;
}

ParamCount count_params(const Model& m) {
  ParamCount out;
  if (count_layers(m, LayerType::state) > 0 && m.state->kind == StateKind::custom && !m.params) {
    throw InputError(m.name + ": the weights of a custom state layer are not in kvcalc's "
                              "parameter formula; set 'params' in the model file "
                              "(docs/model-format.md)");
  }
  if (m.vocab_size == 0) {
    throw InputError(m.name + ": the model file gives no vocab_size, which its weights need; "
                              "set vocab_size (docs/model-format.md)");
  }
  u64 h = m.hidden_size;
  Builder b(m, out.tensors);
  b.add("embed_tokens", m.vocab_size, h, 1, TensorPlace::embedding, false);
  if (m.learned_position_embeddings) {
    if (m.max_context == 0) {
      throw InputError(m.name + ": learned_position_embeddings needs max_context (the table's "
                                "length)");
    }
    b.add("embed_positions", m.max_context, h, 1, TensorPlace::embedding, false);
  }
  auto ffn = [&](FfnType t) {
    return static_cast<u64>(std::count(m.ffn_types.begin(), m.ffn_types.end(), t));
  };
  b.blocks(count_layers(m, LayerType::full) + count_layers(m, LayerType::chunked),
           count_layers(m, LayerType::sliding), m.layers, ffn(FfnType::dense), ffn(FfnType::moe));
  if (u64 n = count_layers(m, LayerType::state); n > 0) {
    b.state(n);
  }
  b.add("final_norm", 1, h, 1, TensorPlace::lm_head, false);
  if (m.norm == NormKind::layer) {
    b.add("final_norm.bias", 1, h, 1, TensorPlace::lm_head, false);
  }
  if (!m.tie_word_embeddings) {
    b.add("lm_head", m.vocab_size, h, 1, TensorPlace::lm_head, false);
  }
  if (m.lm_head_bias) {
    b.add("lm_head.bias", 1, m.vocab_size, 1, TensorPlace::lm_head, false);
  }
  if (m.mtp_layers > 0) {
    // DeepSeek-V3 MTP: enorm, hnorm, eh_proj (2h → h), one full block (MoE when the model has
    // experts), and the shared head's norm; embedding and head are the main model's.
    b.set_mtp(true);
    b.vector("mtp.enorm_hnorm", 2 * h, m.mtp_layers);
    b.add("mtp.eh_proj", h, 2 * h, m.mtp_layers, TensorPlace::layer, false);
    if (m.moe) {
      b.blocks(m.mtp_layers, 0, m.mtp_layers, 0, m.mtp_layers);
    } else {
      b.blocks(m.mtp_layers, 0, m.mtp_layers, m.mtp_layers, 0);
    }
    b.vector("mtp.shared_head.norm", h, m.mtp_layers);
  }

  for (const auto& t : out.tensors) {
    u64 p = t.params();
    if (t.mtp) {
      out.mtp = checked_add(out.mtp, p, "parameters");
      continue;
    }
    out.main = checked_add(out.main, p, "parameters");
    if (t.place == TensorPlace::embedding) {
      out.embedding += p;
    }
    if (t.place == TensorPlace::expert) {
      out.experts += p;
    }
  }
  if (m.params) {
    // The formula misses some tensors of this model (docs/model-format.md, `params`): the
    // remainder is placed in the blocks as linear weights, so weight bytes and sharding see it.
    if (*m.params < out.main) {
      throw InputError(m.name + ": params (" + std::to_string(*m.params) + ") is below the " +
                       std::to_string(out.main) +
                       " parameters of the tensors kvcalc models for it; check the override");
    }
    b.add("params_override_remainder", 1, *m.params - out.main, 1, TensorPlace::layer, true);
    out.main = *m.params;
    out.overridden = true;
  }
  out.active_per_token = out.main;
  if (m.moe && out.experts > 0) {
    // Routed experts count at experts_per_token / routed_experts.
    u64 active = checked_mul(out.experts / m.moe->routed_experts, m.moe->experts_per_token);
    out.active_per_token = out.main - out.experts + active;
  }
  return out;
}

} // namespace kvcalc::model
