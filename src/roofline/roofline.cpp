#include <kvcalc/roofline/roofline.hpp>

#include <algorithm>
#include <cmath>

#include <kvcalc/core/spell.hpp>
#include <kvcalc/core/units.hpp>
#include <kvcalc/kv/footprint.hpp>
#include <kvcalc/kv/weights.hpp>
#include <kvcalc/model/params.hpp>

namespace kvcalc {

std::string_view phase_name(Phase p) {
  switch (p) {
  case Phase::decode:
    return "decode";
  case Phase::prefill:
    return "prefill";
  case Phase::extend:
    return "extend";
  }
  return "?";
}

Phase parse_phase(std::string_view text) {
  for (Phase p : {Phase::decode, Phase::prefill, Phase::extend}) {
    if (text == phase_name(p)) {
      return p;
    }
  }
  static const std::vector<std::string> names{"decode", "prefill", "extend"};
  throw InputError("unknown phase '" + std::string(text) + "'" + did_you_mean(text, names) +
                   " (one of: decode, prefill, extend)");
}

std::string_view mla_mode_name(MlaMode m) {
  switch (m) {
  case MlaMode::absorbed:
    return "absorbed";
  case MlaMode::naive:
    return "naive";
  case MlaMode::automatic:
    return "auto";
  }
  return "?";
}

MlaMode parse_mla_mode(std::string_view text) {
  for (MlaMode m : {MlaMode::absorbed, MlaMode::naive, MlaMode::automatic}) {
    if (text == mla_mode_name(m)) {
      return m;
    }
  }
  static const std::vector<std::string> names{"absorbed", "naive", "auto"};
  throw InputError("unknown MLA mode '" + std::string(text) + "'" + did_you_mean(text, names) +
                   " (one of: absorbed, naive, auto)");
}

DeviceRates device_rates(const Gpu& gpu, double bandwidth_efficiency, double flops_efficiency) {
  DeviceRates r;
  r.bandwidth_bytes_per_s = gpu.memory_bandwidth_bytes_per_s * bandwidth_efficiency;
  for (const auto& field : k_peak_flops_fields) {
    if (const auto& peak = gpu.flops_per_s.*field.value) {
      r.flops_per_s.*field.value = *peak * flops_efficiency;
    }
  }
  // Vendors state the link as both directions together; a collective streams one way.
  r.link_bytes_per_s = gpu.interconnect_bytes_per_s / 2;
  if (bandwidth_efficiency == 1.0 && flops_efficiency == 1.0) {
    r.source = "datasheet";
  } else {
    r.source = "datasheet × efficiency (bandwidth " + std::to_string(bandwidth_efficiency) +
               ", FLOP/s " + std::to_string(flops_efficiency) + ")";
  }
  return r;
}

double expected_experts(u64 experts, u64 per_token, double tokens) {
  double e = static_cast<double>(experts);
  double miss = 1.0 - static_cast<double>(per_token) / e;
  return e * (1.0 - std::pow(miss, tokens));
}

namespace {

double d(u64 v) {
  return static_cast<double>(v);
}

/// Builds the op list of one step on one GPU.
class StepBuilder {
public:
  StepBuilder(const RooflineRequest& req, RooflineResult& out) : m_req(req), m_out(out) {}

  void add(std::string name, DType dtype, double flops, double weights, double activations,
           double kv, std::string variant = {}) {
    Op op;
    op.name = std::move(name);
    op.dtype = std::string(dtype_name(dtype));
    op.flops = flops;
    op.weight_bytes = weights;
    op.activation_bytes = activations;
    op.kv_bytes = kv;
    op.bytes = weights + activations + kv;
    op.variant = std::move(variant);
    auto peak = peak_flops_of(dtype);
    op.peak_flops = peak;
    op.intensity = op.bytes > 0 ? op.flops / op.bytes : 0;
    double bw = m_req.rates.bandwidth_bytes_per_s;
    op.attainable = std::min(peak, op.intensity * bw);
    double compute = peak > 0 ? flops / peak : 0;
    double memory = op.bytes / bw;
    op.compute_bound = compute > memory;
    op.time_s = std::max(compute, memory);
    m_out.ops.push_back(std::move(op));
  }

  void collective(std::string name, double bytes) {
    if (bytes <= 0) {
      return;
    }
    Op op;
    op.name = std::move(name);
    op.dtype = std::string(dtype_name(m_req.model.dtype));
    op.activation_bytes = bytes;
    op.bytes = bytes;
    op.communication = true;
    op.time_s = bytes / m_req.rates.link_bytes_per_s;
    m_out.ops.push_back(std::move(op));
  }

private:
  double peak_flops_of(DType dtype) const {
    const PeakFlops& f = m_req.rates.flops_per_s;
    auto pick = peak_flops(f, dtype);
    if (!pick) {
      // Parts without a unit for this dtype (fp8 on Ampere) run it at their 16-bit rate.
      pick = f.bf16 ? f.bf16 : f.fp16;
    }
    return pick.value_or(0);
  }

  const RooflineRequest& m_req;
  RooflineResult& m_out;
};

} // namespace

RooflineResult compute_roofline(const RooflineRequest& req) {
  const Model& m = req.model;
  const Attention& a = m.attention;
  const Parallelism& par = req.parallel;
  RooflineResult out;
  out.rates_source = req.rates.source;
  if (req.batch == 0 || req.context == 0 || req.query == 0) {
    throw InputError("--batch, --context and the query length must be at least 1");
  }
  if (std::find(m.layer_types.begin(), m.layer_types.end(), LayerType::linear) !=
      m.layer_types.end()) {
    throw InputError(m.name + ": the roofline does not model linear-attention layers (their "
                              "projections are not in kvcalc's formulas)");
  }
  if (par.tp == 0 || par.pp == 0) {
    throw InputError("--tp and --pp must be at least 1");
  }
  u64 ep = par.ep == 0 ? par.tp : par.ep;
  u64 attention_tp = par.dp_attention ? 1 : par.tp;
  bool mla = a.kind == AttentionKind::mla;

  // Step shape: s new tokens per request attending t tokens, t_eff on average (causal).
  u64 s = 0;
  u64 prefix = 0;
  switch (req.phase) {
  case Phase::decode:
    s = req.query;
    prefix = req.context >= s ? req.context - s : 0;
    break;
  case Phase::prefill:
    s = req.context;
    prefix = 0;
    break;
  case Phase::extend:
    s = req.query;
    prefix = req.context;
    break;
  }
  u64 t = prefix + s;
  double t_eff = req.phase == Phase::decode ? d(t) : d(prefix) + d(s) / 2.0;
  out.query = s;
  out.attended = t;
  out.attended_effective = t_eff;
  if (mla) {
    out.mla = req.mla != MlaMode::automatic
                  ? req.mla
                  : (s <= 128 && req.phase != Phase::prefill ? MlaMode::absorbed : MlaMode::naive);
  }

  // This GPU: ⌈layers / pp⌉ layers, its share of heads and of the batch.
  CacheFormat format = resolve_cache_format(req.cache, m);
  u64 stage = ceil_div(m.layers, par.pp);
  out.layers = stage;
  u64 full = 0;
  u64 sliding = 0;
  for (u64 i = 0; i < stage; ++i) {
    (m.layer_types[i] == LayerType::full ? full : sliding)++;
  }
  u64 dense_layers = m.moe ? std::min(m.moe->first_dense_layers, stage) : stage;
  u64 moe_layers = stage - dense_layers;
  double heads = d(a.heads) / d(attention_tp);
  double kv_heads = std::max(1.0, std::floor(d(a.kv_heads) / d(attention_tp)));
  out.heads = heads;
  u64 batch_gpu = par.dp_attention ? ceil_div(req.batch, par.tp) : req.batch;
  out.batch_per_gpu = batch_gpu;
  double b = d(batch_gpu);
  double n_attn = b * d(s);       // tokens through attention on this GPU
  double n = d(req.batch) * d(s); // tokens through the MLP and head of one copy
  double h = d(m.hidden_size);
  double w = d(dtype_storage_bytes(m.dtype, 1024)) / 1024; // activation bytes per element
  DType wdt = req.weight_dtype.value_or(m.weight_dtype.value_or(m.dtype));
  // Bytes per weight element in storage, scales included (docs/formulas.md §9).
  auto weight_per_element = [&](DType dt, u64 rows, u64 cols) {
    TensorGroup tg{"", rows, cols, 1, TensorPlace::layer, true, false};
    return d(tensor_bytes(tg, dt)) / (d(rows) * d(cols));
  };
  bool quant_linear = m.quantized_weights == QuantizedWeights::linear;
  DType attn_dt = quant_linear ? wdt : m.dtype;
  auto linear_bytes = [&](DType dt, u64 rows, u64 cols) {
    return d(rows) * d(cols) * weight_per_element(dt, rows, cols);
  };
  // Matmuls run in the weights' dtype where a low-precision unit exists (fp8 GEMMs);
  // 4-bit and int8 weight-only formats dequantize to the activation dtype.
  auto math_dtype = [&](DType dt) {
    return dt == DType::fp8_e4m3 || dt == DType::fp8_e5m2 ? dt : m.dtype;
  };
  StepBuilder op(req, out);
  double L = d(stage);

  // Norms and embedding lookups: memory traffic only.
  op.add("norms", m.dtype, 4 * n * h * d(m.norms_per_layer) * L, 0,
         2 * n * h * w * d(m.norms_per_layer) * L, 0);

  // Attention projections.
  double kv_rate = d(kv_bytes_per_token_per_layer(
      [&] {
        Model rank = m;
        rank.attention.kv_heads = static_cast<u64>(kv_heads);
        rank.attention.heads = std::max<u64>(1, a.heads / attention_tp);
        return rank;
      }(),
      format));
  if (mla) {
    const MlaDims& md = a.mla;
    double qk = d(md.qk_nope_head_dim + md.qk_rope_head_dim);
    u64 q_out = static_cast<u64>(heads * qk);
    if (md.q_lora_rank > 0) {
      op.add("attention.q_down", math_dtype(attn_dt), 2 * n_attn * h * d(md.q_lora_rank) * L,
             linear_bytes(attn_dt, md.q_lora_rank, m.hidden_size) * L,
             n_attn * (h + d(md.q_lora_rank)) * w * L, 0);
      op.add("attention.q_up", math_dtype(attn_dt), 2 * n_attn * d(md.q_lora_rank) * d(q_out) * L,
             linear_bytes(attn_dt, q_out, md.q_lora_rank) * L,
             n_attn * (d(md.q_lora_rank) + d(q_out)) * w * L, 0);
    } else {
      op.add("attention.q_proj", math_dtype(attn_dt), 2 * n_attn * h * d(q_out) * L,
             linear_bytes(attn_dt, q_out, m.hidden_size) * L, n_attn * (h + d(q_out)) * w * L, 0);
    }
    u64 latent = md.kv_lora_rank + md.qk_rope_head_dim;
    op.add("attention.kv_down", math_dtype(attn_dt), 2 * n_attn * h * d(latent) * L,
           linear_bytes(attn_dt, latent, m.hidden_size) * L, n_attn * (h + d(latent)) * w * L, 0);
    op.add("attention.rotary", m.dtype, 3 * n_attn * (heads + 1) * d(md.qk_rope_head_dim) * L, 0,
           2 * n_attn * (heads + 1) * d(md.qk_rope_head_dim) * w * L, 0);
  } else {
    double q = heads * d(a.head_dim);
    double kv = kv_heads * d(a.head_dim + a.v_head_dim);
    u64 out_rows = static_cast<u64>(q + kv);
    op.add("attention.qkv_proj", math_dtype(attn_dt), 2 * n_attn * h * (q + kv) * L,
           linear_bytes(attn_dt, out_rows, m.hidden_size) * L, n_attn * (h + q + kv) * w * L, 0);
    op.add("attention.rotary", m.dtype, 3 * n_attn * (heads + kv_heads) * d(a.head_dim) * L, 0,
           2 * n_attn * (heads + kv_heads) * d(a.head_dim) * w * L, 0);
  }
  op.add("attention.kv_write", m.dtype, 0, 0, 0, n_attn * kv_rate * L);

  // Attention core, per layer kind (sliding layers attend at most their window).
  auto attended = [&](bool is_sliding) {
    u64 held = is_sliding ? std::min<u64>(t, m.sliding_window) : t;
    double eff = is_sliding ? std::min(t_eff, d(m.sliding_window)) : t_eff;
    return std::pair<double, double>{d(held), eff};
  };
  for (bool is_sliding : {false, true}) {
    double count = d(is_sliding ? sliding : full);
    if (count == 0) {
      continue;
    }
    auto [held, eff] = attended(is_sliding);
    std::string kind = is_sliding ? ".sliding" : "";
    if (!mla) {
      double dk = d(a.head_dim + a.v_head_dim);
      op.add("attention.core" + kind, m.dtype, 2 * b * heads * d(s) * eff * dk * count, 0,
             b * d(s) * heads * dk * w * count, b * held * kv_rate * count);
      continue;
    }
    const MlaDims& md = a.mla;
    double dc = d(md.kv_lora_rank);
    double dr = d(md.qk_rope_head_dim);
    double dn = d(md.qk_nope_head_dim);
    double dv = d(md.v_head_dim);
    // W_UK and W_UV are used in the activation dtype whether folded into the query
    // (absorbed) or applied to the latent (naive): engines dequantize them once at load.
    DType absorb_dt = m.dtype;
    double absorb_weights = d(static_cast<u64>(heads)) * dc * (dn + dv);
    double absorb_w_bytes =
        absorb_weights * weight_per_element(absorb_dt, md.kv_lora_rank, md.qk_nope_head_dim);
    if (out.mla == MlaMode::absorbed) {
      // W_UK folded into the query, attention over the d_c + d_R latent, W_UV after.
      op.add("attention.absorb_uk", math_dtype(absorb_dt), 2 * n_attn * heads * dn * dc * count,
             absorb_w_bytes * dn / (dn + dv) * count, n_attn * heads * (dn + dc) * w * count, 0,
             "absorbed");
      op.add("attention.core" + kind, m.dtype,
             2 * b * heads * d(s) * eff * ((dc + dr) + dc) * count, 0,
             b * d(s) * heads * ((dc + dr) + dc) * w * count, b * held * kv_rate * count,
             "absorbed");
      op.add("attention.absorb_uv", math_dtype(absorb_dt), 2 * n_attn * heads * dc * dv * count,
             absorb_w_bytes * dv / (dn + dv) * count, n_attn * heads * (dc + dv) * w * count, 0,
             "absorbed");
    } else {
      // Decompress every attended latent into per-head K (nope) and V, then attend per head.
      double expanded = b * held * heads * (dn + dr + dv) * w;
      bool materialized = req.naive_kv == NaiveKv::materialized;
      op.add("attention.decompress" + kind, math_dtype(absorb_dt),
             2 * b * held * dc * heads * (dn + dv) * count, absorb_w_bytes * count,
             (materialized ? expanded : 0) * count, b * held * kv_rate * count, "naive");
      op.add("attention.core" + kind, m.dtype, 2 * b * heads * d(s) * eff * (dn + dr + dv) * count,
             0, (b * d(s) * heads * (dn + dr + dv) * w + (materialized ? expanded : 0)) * count, 0,
             "naive");
    }
  }
  double v_width = heads * d(a.v_head_dim);
  op.add("attention.o_proj", math_dtype(attn_dt), 2 * n_attn * v_width * h * L,
         linear_bytes(attn_dt, m.hidden_size, static_cast<u64>(v_width)) * L,
         n_attn * (v_width + h) * w * L, 0);

  // MLP: dense layers, then MoE layers.
  double gate = m.mlp.kind == MlpKind::gated ? 3 : 2;
  if (dense_layers > 0) {
    double width = d(m.mlp.intermediate_size) / d(par.tp);
    u64 cols = static_cast<u64>(std::max(1.0, width));
    op.add("mlp", math_dtype(attn_dt), 2 * n * h * width * gate * d(dense_layers),
           gate * linear_bytes(attn_dt, m.hidden_size, cols) * d(dense_layers),
           n * (2 * h + gate * width) * w * d(dense_layers), 0);
  }
  if (moe_layers > 0) {
    const Moe& e = *m.moe;
    double ml = d(moe_layers);
    op.add("moe.router", m.dtype, 2 * n * h * d(e.routed_experts) * ml,
           h * d(e.routed_experts) * w * ml, n * (h + d(e.routed_experts)) * w * ml, 0);
    // Each routed expert the batch touches is read once per step (uniform routing).
    double touched = expected_experts(e.routed_experts, e.experts_per_token, n) / d(ep);
    double ie = d(e.expert_intermediate_size);
    DType expert_dt = wdt;
    op.add("moe.experts", math_dtype(expert_dt),
           2 * n * d(e.experts_per_token) * h * ie * gate / d(ep) * ml,
           touched * gate * linear_bytes(expert_dt, e.expert_intermediate_size, m.hidden_size) * ml,
           n * d(e.experts_per_token) / d(ep) * (2 * h + gate * ie) * w * ml, 0);
    if (e.shared_expert_intermediate_size > 0) {
      double width = d(e.shared_expert_intermediate_size) / d(par.tp);
      u64 cols = static_cast<u64>(std::max(1.0, width));
      op.add("moe.shared_experts", math_dtype(attn_dt), 2 * n * h * width * gate * ml,
             gate * linear_bytes(attn_dt, m.hidden_size, cols) * ml,
             n * (2 * h + gate * width) * w * ml, 0);
    }
    if (req.communication && ep > 1) {
      // Dispatch and combine: each token's hidden state to k experts, most on other GPUs.
      op.collective("moe.all_to_all",
                    2 * n * d(e.experts_per_token) * h * w * (d(ep) - 1) / d(ep) / d(ep) * ml);
    }
  }
  if (req.communication && par.tp > 1) {
    // Ring all-reduce of the hidden states after attention and after the MLP.
    op.collective("tp.all_reduce", 2 * 2 * (d(par.tp) - 1) / d(par.tp) * n * h * w * L);
  }

  // LM head: every new token in decode, the last token of each prompt in prefill/extend.
  double logits_tokens = req.phase == Phase::decode ? n : d(req.batch);
  double vocab = d(m.vocab_size) / d(par.tp);
  op.add("lm_head", m.dtype, 2 * logits_tokens * h * vocab, vocab * h * w,
         logits_tokens * (h * w + vocab * 4), 0);

  for (const Op& o : out.ops) {
    out.flops += o.flops;
    out.bytes += o.bytes;
    out.time_s += o.time_s;
  }
  auto longest = std::max_element(out.ops.begin(), out.ops.end(),
                                  [](const Op& x, const Op& y) { return x.time_s < y.time_s; });
  out.dominant = longest->name;
  double tokens = d(req.batch) * d(s);
  out.tokens_per_s = tokens / out.time_s;
  out.time_per_token_s = req.phase == Phase::decode ? out.time_s / d(s) : out.time_s;
  WeightBytes weights =
      weight_bytes(m, count_params(m), wdt, {par.tp, attention_tp, par.pp, ep, false});
  if (weights.per_gpu > req.gpu.memory_bytes) {
    out.notes.push_back(m.name + ": its weights (" + group_digits(weights.per_gpu) +
                        " B per GPU at tp " + std::to_string(par.tp) + ") do not fit in one " +
                        req.gpu.name + "; the step is computed all the same");
  }
  if (par.pp > 1) {
    out.notes.push_back("pipeline parallel: one stage of " + std::to_string(stage) +
                        " layers is modelled; a token crosses all " + std::to_string(par.pp) +
                        " stages");
  }
  return out;
}

MlaCrossover mla_crossover(const RooflineRequest& req) {
  const Model& m = req.model;
  if (m.attention.kind != AttentionKind::mla) {
    throw InputError("--mla-crossover needs an MLA model; " + m.name + " is " +
                     std::string(attention_kind_name(m.attention.kind)));
  }
  const MlaDims& md = m.attention.mla;
  double dc = d(md.kv_lora_rank);
  double dnv = d(md.qk_nope_head_dim + md.v_head_dim);
  MlaCrossover c;
  c.prefix = req.context;
  c.flop_ratio = dc * dnv / (2 * dc - dnv);
  // s·(P + s/2)/P = ratio  ⇒  s = −P + √(P² + 2·ratio·P).
  double p = d(req.context);
  c.flop_query = -p + std::sqrt(p * p + 2 * c.flop_ratio * p);
  auto attention_time = [&](MlaMode mode, u64 s) {
    RooflineRequest r = req;
    r.phase = Phase::extend;
    r.query = s;
    r.mla = mode;
    double total = 0;
    for (const Op& o : compute_roofline(r).ops) {
      if (!o.variant.empty()) {
        total += o.time_s;
      }
    }
    return total;
  };
  auto naive_wins = [&](u64 s) {
    return attention_time(MlaMode::naive, s) < attention_time(MlaMode::absorbed, s);
  };
  u64 limit = std::max<u64>(req.context, 1) * 4;
  u64 hi = 1;
  while (hi <= limit && !naive_wins(hi)) {
    hi *= 2;
  }
  if (hi > limit) {
    c.time_query = 0;
    return c;
  }
  u64 lo = hi / 2;
  while (hi - lo > 1) {
    u64 mid = lo + (hi - lo) / 2;
    (naive_wins(mid) ? hi : lo) = mid;
  }
  c.time_query = naive_wins(lo) && lo > 0 ? lo : hi;
  return c;
}

} // namespace kvcalc
