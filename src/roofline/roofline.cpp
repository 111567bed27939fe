#include <kvcalc/roofline/roofline.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>

#include <kvcalc/core/spell.hpp>
#include <kvcalc/core/units.hpp>
#include <kvcalc/kv/cache_spec.hpp>
#include <kvcalc/kv/weights.hpp>
#include <kvcalc/model/params.hpp>

using namespace kvcalc::kv;
using namespace kvcalc::device;
using namespace kvcalc::model;

namespace kvcalc::roofline {

std::string_view phase_name(Phase p) {
  return k_phases.name(p);
}

std::string_view overlap_name(Overlap o) {
  return k_overlaps.name(o);
}

Phase parse_phase(std::string_view text) {
  return k_phases.parse(text);
}

std::string_view mla_mode_name(MlaMode m) {
  return k_mla_modes.name(m);
}

MlaMode parse_mla_mode(std::string_view text) {
  return k_mla_modes.parse(text);
}

DeviceRates device_rates(const Gpu& gpu, double bandwidth_efficiency, double flops_efficiency) {
  device::require_figures(gpu, {"memory_bandwidth_bytes_per_s", "flops_per_s"},
                          "a step's time (roofline, simulate)");
  DeviceRates r;
  r.bandwidth_bytes_per_s = gpu.memory_bandwidth_bytes_per_s * bandwidth_efficiency;
  for (const auto& field : k_peak_flops_fields) {
    if (const auto& peak = gpu.flops_per_s.*field.value) {
      r.flops_per_s.*field.value = *peak * flops_efficiency;
    }
  }
  // Vendors state the link as both directions together; a collective streams one way.
  r.links.gpu = gpu.name;
  r.links.domain = gpu.scale_up_domain;
  r.links.up_bytes_per_s = gpu.interconnect_bytes_per_s / 2;
  r.links.up_latency_s = gpu.interconnect_latency_s;
  r.links.out_bytes_per_s = gpu.scale_out.bytes_per_s;
  r.links.out_latency_s = gpu.scale_out.latency_s;
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

double peak_of(const PeakFlops& f, DType dtype) {
  auto pick = peak_flops(f, dtype);
  if (!pick) {
    // Parts without a unit for this dtype (fp8 on Ampere) run it at their 16-bit rate.
    pick = f.bf16 ? f.bf16 : f.fp16;
  }
  return pick.value_or(0);
}

/// Collects the ops of one step with their names, rates and bounds.
class OpSink {
public:
  OpSink(const RooflineRequest& req, std::vector<Op>& out, const char* prefix)
      : m_req(req), m_out(out), m_prefix(prefix) {}

  void add(const char* name, DType dtype, double flops, double weights, double activations,
           double kv, const char* variant = "") {
    Op op;
    op.name = m_prefix + name;
    op.dtype = std::string(dtype_name(dtype));
    op.flops = flops;
    op.weight_bytes = weights;
    op.activation_bytes = activations;
    op.kv_bytes = kv;
    op.bytes = weights + activations + kv;
    op.variant = variant;
    double peak = peak_of(m_req.rates.flops_per_s, dtype);
    op.peak_flops = peak;
    op.intensity = op.bytes > 0 ? op.flops / op.bytes : 0;
    double bw = m_req.rates.bandwidth_bytes_per_s;
    op.attainable = std::min(peak, op.intensity * bw);
    double compute = peak > 0 ? flops / peak : 0;
    double memory = op.bytes / bw;
    op.compute_bound = compute > memory;
    op.time_s = std::max(compute, memory);
    m_out.push_back(std::move(op));
  }

  /// `count` collectives `c` of the step (one per layer, say).
  void collective(const char* name, DType dtype, const Collective& c, double count) {
    if (count <= 0 || c.time_s <= 0) {
      return;
    }
    Op op;
    op.name = m_prefix + name;
    op.dtype = std::string(dtype_name(dtype));
    op.activation_bytes = (c.up_bytes + c.out_bytes) * count;
    op.bytes = op.activation_bytes;
    op.communication = true;
    op.time_s = c.time_s * count;
    op.collective = c;
    op.collectives = count;
    m_out.push_back(std::move(op));
  }

private:
  const RooflineRequest& m_req;
  std::vector<Op>& m_out;
  std::string m_prefix;
};

/// Sums the time of the ops of one step, allocating nothing (the simulator's path).
class TimeSink {
public:
  explicit TimeSink(const DeviceRates& rates) : m_rates(rates) {}

  void add(const char* /*name*/, DType dtype, double flops, double weights, double activations,
           double kv, const char* /*variant*/ = "") {
    double peak = peak_of(m_rates.flops_per_s, dtype);
    double compute = peak > 0 ? flops / peak : 0;
    double memory = (weights + activations + kv) / m_rates.bandwidth_bytes_per_s;
    m_compute += std::max(compute, memory);
  }

  void collective(const char* /*name*/, DType /*dtype*/, const Collective& c, double count) {
    if (count > 0) {
      m_communication += c.time_s * count;
    }
  }

  [[nodiscard]] double compute() const { return m_compute; }
  [[nodiscard]] double communication() const { return m_communication; }

private:
  const DeviceRates& m_rates;
  double m_compute = 0;
  double m_communication = 0;
};

} // namespace

StepLoad StepLoad::scaled_attention(double f) const {
  StepLoad out = *this;
  auto scale = [f](AttentionSums& x) {
    x.query *= f;
    x.attended *= f;
    x.held *= f;
  };
  out.attention_tokens *= f;
  out.sequences *= f;
  for (AttentionLoad* path : {&out.absorbed, &out.naive}) {
    for (AttentionSums& k : path->kinds) {
      scale(k);
    }
  }
  scale(out.indexer);
  return out;
}

StepLoad StepLoad::scaled(double f) const {
  StepLoad out = scaled_attention(f);
  out.tokens *= f;
  out.logits *= f;
  return out;
}

namespace {

/// An op `times` over: FLOPs, bytes and time.
void repeat(Op& o, double times) {
  o.flops *= times;
  o.weight_bytes *= times;
  o.activation_bytes *= times;
  o.kv_bytes *= times;
  o.bytes *= times;
  o.time_s *= times;
  o.exposed_s *= times;
  o.collectives *= times;
}

/// Marks what the step's overlap hides: with two-batch overlap the shorter of compute and
/// communication runs under the longer; without, every op is on the critical path.
void expose(std::vector<Op>& ops, Overlap overlap) {
  double compute = 0;
  double communication = 0;
  for (const Op& o : ops) {
    (o.communication ? communication : compute) += o.time_s;
  }
  bool hide_communication = compute >= communication;
  for (Op& o : ops) {
    bool hidden = overlap == Overlap::two_batch && o.communication == hide_communication;
    o.exposed_s = hidden ? 0 : o.time_s;
  }
}

} // namespace

MlaMode resolve_mla_mode(MlaMode requested, Phase phase, u64 s) {
  if (requested != MlaMode::automatic) {
    return requested;
  }
  return s <= 128 && phase != Phase::prefill ? MlaMode::absorbed : MlaMode::naive;
}

StepCost::StepCost(const RooflineRequest& req, bool draft) : m_req(req), m_draft(draft) {
  const Model& m = req.model;
  if (req.parallel.dcp > 1) {
    throw InputError("the roofline does not model decode context parallel (--dcp); its step "
                     "would be priced as without it");
  }
  Deployment deployment = resolve_deployment(m, req.parallel, req.weight_dtype);
  const Parallelism& par = deployment.parallel;
  u64 attention_tp = deployment.attention_tp;
  if (!(req.expert_imbalance >= 1 && req.expert_imbalance <= 64)) {
    throw InputError("--expert-imbalance is the busiest GPU's token-expert pairs over the mean: "
                     "from 1 (balanced) to 64");
  }
  m_mla = has_attention(m) && m.attention.kind == AttentionKind::mla;
  // Each GPU's own share: an attention group of attention_tp GPUs runs its sequences and the
  // dense parts on their tokens; experts take the tokens of every copy their group serves.
  m_tp = d(par.tp);
  m_attention_tp = d(attention_tp);
  m_attention_share = m_attention_tp / m_tp;
  m_ep = d(par.ep);
  m_expert_tp = d(deployment.expert_tp);
  m_experts_local = d(deployment.experts_per_rank);
  m_expert_copies = par.ep > par.tp ? d(par.ep) / d(par.tp) : 1.0;
  m_all_to_all = deployment.expert_all_to_all;
  m_domain_copy = par.tp * par.pp;
  // Copies are placed whole, one after another: an expert group of one stage takes tp GPUs
  // from each of ep / tp copies, so under pp a domain holds the stage's GPUs of the
  // ⌊D / (tp·pp)⌋ copies in it; a group that fits them stays inside, a larger one spans domains
  // of that many (or, where a copy is larger than a domain, of the stage's GPUs in one).
  u64 domain = req.rates.links.domain;
  if (domain == 0 || par.pp == 1) {
    m_expert_local = group_in_domain(req.rates.links, par.ep);
  } else {
    u64 per_domain =
        m_domain_copy <= domain ? par.tp * (domain / m_domain_copy) : std::gcd(par.tp, domain);
    m_expert_local = par.ep <= per_domain ? par.ep : std::gcd(par.ep, per_domain);
  }

  // This GPU: ⌈layers / pp⌉ layers, its share of heads and states; the cache as it holds it.
  CacheLayout layout;
  layout.cache = req.cache;
  layout.attention_tp = attention_tp;
  layout.pp = par.pp;
  std::vector<CacheGroup> groups = cache_groups(m, layout);
  m_stage = ceil_div(m.layers, par.pp);
  for (u64 i = 0; i < m_stage; ++i) {
    m_mixers += m.layer_types[i] == LayerType::none ? 0 : 1;
    m_dense += m.ffn_types[i] == FfnType::dense ? 1 : 0;
    m_moe += m.ffn_types[i] == FfnType::moe ? 1 : 0;
  }
  for (const auto& g : groups) {
    const CacheSpec& spec = g.spec;
    switch (spec.kind) {
    case CacheKind::full:
    case CacheKind::sliding:
    case CacheKind::chunked: {
      Kind& k = m_kinds[static_cast<std::size_t>(spec.kind)];
      k.layers = d(g.layers + g.shared_layers);
      k.stored = d(g.layers);
      k.window = d(spec.window);
      k.kv_rate = d(spec.bytes_per_token);
      k.sliding_geometry = spec.kind == CacheKind::sliding && m.sliding_attention.has_value();
      break;
    }
    case CacheKind::indexer:
      m_index_layers = d(g.layers);
      m_index_rate = d(spec.bytes_per_token);
      break;
    case CacheKind::state:
      m_state_layers = d(g.layers);
      m_state_bytes = d(spec.state_bytes);
      for (const auto& t : spec.state) {
        m_state_elements += d(t.elements());
      }
      break;
    }
  }
  double topk = 0; // DSA: tokens each query attends
  if (m.indexer) {
    topk = d(m.indexer->topk);
    m_index_heads = d(m.indexer->heads);
    m_index_dim = d(m.indexer->head_dim);
  }
  // A window or chunk caps what a layer holds and attends; DSA's full layers attend only the
  // top-k tokens their indexer picks.
  for (std::size_t k = 0; k < m_kinds.size(); ++k) {
    m_kinds[k].cap = m_kinds[k].window > 0 ? m_kinds[k].window : topk;
    if (m_kinds[k].layers > 0) {
      m_present[m_present_count++] = k;
    }
  }
  m_w = d(dtype_storage_bytes(m.dtype, 1024)) / 1024;
  // How each matrix is stored, by its name in the parameter count (docs/formulas.md §9): the
  // checkpoint's own layout, or --weight-dtype over what it quantizes.
  auto format = [&](std::string_view name) {
    TensorGroup tg{std::string(name),
                   1,
                   1,
                   1,
                   name.starts_with("moe.experts") ? TensorPlace::expert : TensorPlace::layer,
                   true,
                   false};
    return tensor_format(m, tg, req.weight_dtype);
  };
  auto linear_bytes = [&](std::string_view name, u64 rows, u64 cols) {
    return d(format(name).bytes(rows, cols));
  };
  // Matmuls run in the weights' dtype where a low-precision unit exists (fp8 GEMMs);
  // 4-bit and int8 weight-only formats dequantize to the activation dtype.
  m_attn_math = format("attention.o_proj").math_dtype(m.dtype);
  m_expert_math = format("moe.experts.down_proj").math_dtype(m.dtype);
  auto geometry = [&](const Attention& a, double layers) {
    Geometry g;
    g.layers = layers;
    g.heads = d(a.heads) / d(attention_tp);
    g.kv_heads = std::max(1.0, std::floor(d(a.kv_heads) / d(attention_tp)));
    g.head_dim = d(a.head_dim);
    g.v_head_dim = d(a.v_head_dim);
    g.v_width = g.heads * g.v_head_dim;
    if (a.kind != AttentionKind::mla) {
      double q = g.heads * g.head_dim * (a.output_gate ? 2 : 1);
      g.qkv_out = q + g.kv_heads * (g.head_dim + g.v_head_dim);
      g.w_qkv = linear_bytes("attention.q_proj", static_cast<u64>(g.qkv_out), m.hidden_size);
    }
    g.w_o =
        linear_bytes("attention.o_proj", m.hidden_size, static_cast<u64>(std::max(1.0, g.v_width)));
    return g;
  };
  const Kind& sliding = m_kinds[static_cast<std::size_t>(CacheKind::sliding)];
  double main_layers = 0;
  for (const Kind& k : m_kinds) {
    main_layers += k.sliding_geometry ? 0 : k.layers;
  }
  if (has_attention(m)) {
    m_main = geometry(m.attention, main_layers);
    if (sliding.sliding_geometry) {
      m_sliding = geometry(*m.sliding_attention, sliding.layers);
    }
  }
  if (m_mla) {
    const Attention& a = m.attention;
    const MlaDims& md = a.mla;
    double qk = d(md.qk_nope_head_dim + md.qk_rope_head_dim);
    u64 q_out = static_cast<u64>(m_main.heads * qk);
    m_q_out = d(q_out);
    if (md.q_lora_rank > 0) {
      m_w_q_down = linear_bytes("attention.q_a_proj", md.q_lora_rank, m.hidden_size);
      m_w_q_up = linear_bytes("attention.q_b_proj", q_out, md.q_lora_rank);
    } else {
      m_w_q = linear_bytes("attention.q_proj", q_out, m.hidden_size);
    }
    m_w_kv_down = linear_bytes("attention.kv_a_proj_with_mqa",
                               md.kv_lora_rank + md.qk_rope_head_dim, m.hidden_size);
    // W_UK and W_UV are used in the activation dtype whether folded into the query
    // (absorbed) or applied to the latent (naive): engines dequantize them once at load.
    m_absorb_math = m.dtype;
    double absorb_weights = d(static_cast<u64>(m_main.heads)) * d(md.kv_lora_rank) *
                            d(md.qk_nope_head_dim + md.v_head_dim);
    m_w_absorb = absorb_weights * d(dtype_storage_bytes(m.dtype, 1024)) / 1024;
  }
  if (m.indexer) {
    u64 q_in = m.attention.mla.q_lora_rank ? m.attention.mla.q_lora_rank : m.hidden_size;
    m_w_index =
        d(dtype_storage_bytes(m.dtype, m.indexer->heads * m.indexer->head_dim * q_in)) +
        d(dtype_storage_bytes(m.dtype, (m.indexer->head_dim + m.indexer->heads) * m.hidden_size));
  }
  if (m_dense > 0) {
    m_mlp_width = d(m.mlp.intermediate_size) / m_attention_tp;
    m_w_mlp =
        linear_bytes("mlp.down_proj", m.hidden_size, static_cast<u64>(std::max(1.0, m_mlp_width)));
  }
  if (m.moe && m_moe > 0) {
    const Moe& e = *m.moe;
    m_w_expert = linear_bytes("moe.experts.down_proj", e.expert_intermediate_size, m.hidden_size);
    // Dispatch sends fp8 with a scale per 128 values where the experts compute in fp8
    // (DeepEP); combine returns the activation dtype.
    m_dispatch_dtype = req.dispatch_dtype.value_or(m_expert_math);
    bool fp8 = m_dispatch_dtype == DType::fp8_e4m3 || m_dispatch_dtype == DType::fp8_e5m2;
    m_dispatch_bytes = fp8 ? d(m.hidden_size) + 4 * d(ceil_div(m.hidden_size, 128))
                           : d(dtype_storage_bytes(m_dispatch_dtype, m.hidden_size));
    if (e.shared_expert_intermediate_size > 0) {
      m_shared_width = d(e.shared_expert_intermediate_size) / m_attention_tp;
      m_w_shared = linear_bytes("moe.shared_experts.down_proj", m.hidden_size,
                                static_cast<u64>(std::max(1.0, m_shared_width)));
    }
  }
  // The weights the formulas above do not place: recurrent layers' projections (their
  // tensors in the parameter count) and a `params` override's remainder, split over tp and
  // the stage like the blocks' other matrices.
  if (m_state_layers > 0 || m.params) {
    ParamCount params = count_params(m);
    double stage_share = d(m_stage) / d(m.layers);
    for (const TensorGroup& t : params.tensors) {
      if (t.mtp) {
        continue;
      }
      double count = d(t.params());
      double bytes = d(tensor_bytes(t, tensor_format(m, t, req.weight_dtype)));
      double shards = t.rows > 1 ? d(attention_tp) : 1;
      if (t.name.starts_with("state.")) {
        m_state_params += count / d(t.count) / shards;
        m_w_state += bytes / d(t.count) / shards;
      } else if (t.name == "params_override_remainder") {
        m_other_params = count * stage_share / m_attention_tp;
        m_w_other = bytes * stage_share / m_attention_tp;
      }
    }
  }
}

void StepCost::add(StepLoad& load, Phase phase, u64 s, u64 prefix, double copies,
                   double attention_copies) const {
  double t = d(prefix + s);
  double t_eff = phase == Phase::decode ? t : d(prefix) + d(s) / 2.0;
  double query = d(s);
  load.tokens += copies * query;
  load.logits += phase == Phase::decode ? copies * query : copies;
  load.attention_tokens += attention_copies * query;
  load.sequences += attention_copies;
  bool absorbed = !m_mla || resolve_mla_mode(m_req.mla, phase, s) == MlaMode::absorbed;
  AttentionLoad& path = absorbed ? load.absorbed : load.naive;
  for (std::size_t i = 0; i < m_present_count; ++i) {
    std::size_t k = m_present[i];
    double cap = m_kinds[k].cap;
    AttentionSums& sums = path.kinds[k];
    sums.query += attention_copies * query;
    sums.attended += attention_copies * query * (cap > 0 ? std::min(t_eff, cap) : t_eff);
    sums.held += attention_copies * (cap > 0 ? std::min(t, cap) : t);
  }
  if (m_index_layers > 0) {
    load.indexer.query += attention_copies * query;
    load.indexer.attended += attention_copies * query * t_eff;
    load.indexer.held += attention_copies * t;
  }
}

template <class Sink> void StepCost::build(const StepLoad& load, Sink& op) const {
  const Model& m = m_req.model;
  const Attention& a = m.attention;
  double n_attn = load.attention_tokens; // tokens of this GPU's attention group
  double n = n_attn;                     // ...through its norms, dense MLP and shared experts
  double h = d(m.hidden_size);
  double w = m_w;
  double L = d(m_stage);
  double La = m_main.layers + m_sliding.layers; // attention layers

  // Norms and embedding lookups: memory traffic only.
  op.add("norms", m.dtype, 4 * n * h * d(m.norms_per_layer) * L, 0,
         2 * n * h * w * d(m.norms_per_layer) * L, 0);

  // Attention projections, per geometry.
  if (m_mla) {
    const MlaDims& md = a.mla;
    double Lm = m_main.layers;
    double heads = m_main.heads;
    double q_out = m_q_out;
    if (md.q_lora_rank > 0) {
      op.add("attention.q_down", m_attn_math, 2 * n_attn * h * d(md.q_lora_rank) * Lm,
             m_w_q_down * Lm, n_attn * (h + d(md.q_lora_rank)) * w * Lm, 0);
      op.add("attention.q_up", m_attn_math, 2 * n_attn * d(md.q_lora_rank) * q_out * Lm,
             m_w_q_up * Lm, n_attn * (d(md.q_lora_rank) + q_out) * w * Lm, 0);
    } else {
      op.add("attention.q_proj", m_attn_math, 2 * n_attn * h * q_out * Lm, m_w_q * Lm,
             n_attn * (h + q_out) * w * Lm, 0);
    }
    double latent = d(md.kv_lora_rank + md.qk_rope_head_dim);
    op.add("attention.kv_down", m_attn_math, 2 * n_attn * h * latent * Lm, m_w_kv_down * Lm,
           n_attn * (h + latent) * w * Lm, 0);
    op.add("attention.rotary", m.dtype, 3 * n_attn * (heads + 1) * d(md.qk_rope_head_dim) * Lm, 0,
           2 * n_attn * (heads + 1) * d(md.qk_rope_head_dim) * w * Lm, 0);
  } else {
    for (const Geometry* g : {&m_main, &m_sliding}) {
      if (g->layers == 0) {
        continue;
      }
      bool own = g == &m_sliding;
      op.add(own ? "attention.qkv_proj.sliding" : "attention.qkv_proj", m_attn_math,
             2 * n_attn * h * g->qkv_out * g->layers, g->w_qkv * g->layers,
             n_attn * (h + g->qkv_out) * w * g->layers, 0);
      op.add(own ? "attention.rotary.sliding" : "attention.rotary", m.dtype,
             3 * n_attn * (g->heads + g->kv_heads) * g->head_dim * g->layers, 0,
             2 * n_attn * (g->heads + g->kv_heads) * g->head_dim * w * g->layers, 0);
    }
  }
  if (La > 0) {
    double kv_written = 0;
    for (const Kind& k : m_kinds) {
      kv_written += k.kv_rate * k.stored;
    }
    op.add("attention.kv_write", m.dtype, 0, 0, 0,
           n_attn * (kv_written + m_index_rate * m_index_layers));
  }

  // DSA: the indexer scores every cached token with its own keys, then attention reads the
  // top-k tokens only.
  if (m_index_layers > 0) {
    const AttentionSums& x = load.indexer;
    op.add("attention.indexer", DType::fp8_e4m3,
           2 * x.attended * m_index_heads * m_index_dim * m_index_layers +
               2 * x.query * (m_w_index / w) * m_index_layers,
           m_w_index * m_index_layers,
           x.query * (h + m_index_heads * m_index_dim) * w * m_index_layers,
           x.held * m_index_rate * m_index_layers);
  }

  // Attention core, per layer kind (windows, chunks and DSA's top-k cap what is attended).
  static constexpr std::array<const char*, 3> k_core{"attention.core", "attention.core.sliding",
                                                     "attention.core.chunked"};
  static constexpr std::array<const char*, 3> k_decompress{
      "attention.decompress", "attention.decompress.sliding", "attention.decompress.chunked"};
  for (std::size_t kind = 0; kind < m_kinds.size(); ++kind) {
    const Kind& k = m_kinds[kind];
    if (k.layers == 0) {
      continue;
    }
    double count = k.layers;
    double kv_rate = k.kv_rate;
    const AttentionSums& ab = load.absorbed.kinds[kind];
    const AttentionSums& nv = load.naive.kinds[kind];
    const char* core = k_core[kind];
    if (!m_mla) {
      const Geometry& g = k.sliding_geometry ? m_sliding : m_main;
      double dk = g.head_dim + g.v_head_dim;
      op.add(core, m.dtype, 2 * g.heads * ab.attended * dk * count, 0,
             ab.query * g.heads * dk * w * count, ab.held * kv_rate * count);
      continue;
    }
    const MlaDims& md = a.mla;
    double heads = m_main.heads;
    double dc = d(md.kv_lora_rank);
    double dr = d(md.qk_rope_head_dim);
    double dn = d(md.qk_nope_head_dim);
    double dv = d(md.v_head_dim);
    if (ab.query > 0) {
      // W_UK folded into the query, attention over the d_c + d_R latent, W_UV after.
      op.add("attention.absorb_uk", m_absorb_math, 2 * ab.query * heads * dn * dc * count,
             m_w_absorb * dn / (dn + dv) * count, ab.query * heads * (dn + dc) * w * count, 0,
             "absorbed");
      op.add(core, m.dtype, 2 * heads * ab.attended * ((dc + dr) + dc) * count, 0,
             ab.query * heads * ((dc + dr) + dc) * w * count, ab.held * kv_rate * count,
             "absorbed");
      op.add("attention.absorb_uv", m_absorb_math, 2 * ab.query * heads * dc * dv * count,
             m_w_absorb * dv / (dn + dv) * count, ab.query * heads * (dc + dv) * w * count, 0,
             "absorbed");
    }
    if (nv.query > 0) {
      // Decompress every attended latent into per-head K (nope) and V, then attend per head.
      double expanded = nv.held * heads * (dn + dr + dv) * w;
      bool materialized = m_req.naive_kv == NaiveKv::materialized;
      op.add(k_decompress[kind], m_absorb_math, 2 * nv.held * dc * heads * (dn + dv) * count,
             m_w_absorb * count, (materialized ? expanded : 0) * count, nv.held * kv_rate * count,
             "naive");
      op.add(core, m.dtype, 2 * heads * nv.attended * (dn + dr + dv) * count, 0,
             (nv.query * heads * (dn + dr + dv) * w + (materialized ? expanded : 0)) * count, 0,
             "naive");
    }
  }
  if (La > 0) {
    for (const Geometry* g : {&m_main, &m_sliding}) {
      if (g->layers == 0) {
        continue;
      }
      op.add(g == &m_sliding ? "attention.o_proj.sliding" : "attention.o_proj", m_attn_math,
             2 * n_attn * g->v_width * h * g->layers, g->w_o * g->layers,
             n_attn * (g->v_width + h) * w * g->layers, 0);
    }
  }

  // Recurrent layers: their projections, then the scan, which reads and writes each
  // sequence's state once per step (docs/formulas.md §11, "State layers").
  if (m_state_layers > 0) {
    op.add("state.proj", m_attn_math, 2 * n_attn * m_state_params * m_state_layers,
           m_w_state * m_state_layers, 2 * n_attn * h * w * m_state_layers, 0);
    op.add("state.scan", DType::fp32, 4 * n_attn * m_state_elements * m_state_layers, 0, 0,
           2 * load.sequences * m_state_bytes * m_state_layers);
  }
  if (m_other_params > 0) {
    op.add("layers.other", m_attn_math, 2 * n * m_other_params, m_w_other, 0, 0);
  }
  if (m_draft) {
    // The MTP module's own projection of [embedding; hidden] (2h → h) before its layer.
    op.add("eh_proj", m_attn_math, 2 * n * 2 * h * h, 2 * h * h * w / m_attention_tp, n * 3 * h * w,
           0);
  }

  // MLP: dense layers, then MoE layers.
  double gate = m.mlp.kind == MlpKind::gated ? 3 : 2;
  if (m_dense > 0) {
    double width = m_mlp_width;
    op.add("mlp", m_attn_math, 2 * n * h * width * gate * m_dense, gate * m_w_mlp * m_dense,
           n * (2 * h + gate * width) * w * m_dense, 0);
  }
  if (m_moe > 0) {
    const Moe& e = *m.moe;
    double ml = m_moe;
    double k = d(e.experts_per_token);
    double experts = d(e.routed_experts);
    op.add("moe.router", m.dtype, 2 * n * h * experts * ml, h * experts * w * ml,
           n * (h + experts) * w * ml, 0);
    // The expert group serves the tokens of every copy it spans; this GPU takes 1/ep of their
    // token-expert pairs (times the imbalance), each expert's width split over expert_tp.
    double group_tokens = load.tokens * m_expert_copies;
    double pairs = group_tokens * k / m_ep * m_req.expert_imbalance;
    double ie = d(e.expert_intermediate_size) / m_expert_tp;
    // A local expert is read once per step when the group's tokens touch it (uniform routing).
    double touched = m_experts_local *
                     expected_experts(e.routed_experts, e.experts_per_token, group_tokens) /
                     experts;
    op.add("moe.experts", m_expert_math, 2 * pairs * h * ie * gate * ml,
           touched * gate * m_w_expert / m_expert_tp * ml, pairs * (2 * h + gate * ie) * w * ml, 0);
    if (e.shared_expert_intermediate_size > 0) {
      double width = m_shared_width;
      op.add("moe.shared_experts", m_attn_math, 2 * n * h * width * gate * ml,
             gate * m_w_shared * ml, n * (2 * h + gate * width) * w * ml, 0);
    }
    if (m_req.communication && m_all_to_all) {
      // Each GPU sends its slice of the copy's tokens to the k experts of each (dispatch) and
      // takes their outputs back (combine), once per domain they sit in; the busiest GPU
      // receives `imbalance` × the mean.
      double sent = load.tokens / m_tp * m_req.expert_imbalance;
      u64 group = static_cast<u64>(m_ep);
      const Topology& links = m_req.rates.links;
      op.collective("moe.dispatch", m_dispatch_dtype,
                    expert_exchange(links, group, sent, k, m_dispatch_bytes, m_expert_local), ml);
      op.collective("moe.combine", m.dtype,
                    expert_exchange(links, group, sent, k, h * w, m_expert_local), ml);
    }
  }
  if (m_req.communication && m_attention_tp > 1) {
    // All-reduce of the attention group's hidden states after each token mixer and each
    // feed-forward part (experts inside the group included).
    double reduces = m_mixers + m_dense + (m_all_to_all ? 0 : m_moe);
    op.collective("tp.all_reduce", m.dtype,
                  all_reduce(m_req.rates.links, static_cast<u64>(m_attention_tp), n * h * w),
                  reduces);
  }

  // LM head: every new token in decode, the last token of each prompt in prefill/extend.
  double vocab = d(m.vocab_size) / m_attention_tp;
  double logits = load.logits * m_attention_share;
  op.add("lm_head", m.dtype, 2 * logits * h * vocab, vocab * h * w, logits * (h * w + vocab * 4),
         0);
}

double StepCost::time_s(const StepLoad& load) const {
  TimeSink sink(m_req.rates);
  if (m_req.overlap == Overlap::none) {
    build(load, sink);
    return sink.compute() + sink.communication();
  }
  build(load.scaled(0.5), sink);
  return 2 * std::max(sink.compute(), sink.communication());
}

std::vector<Op> StepCost::ops(const StepLoad& load) const {
  std::vector<Op> out;
  OpSink sink(m_req, out, m_draft ? "mtp." : "");
  bool halves = m_req.overlap == Overlap::two_batch;
  build(halves ? load.scaled(0.5) : load, sink);
  for (Op& o : out) {
    repeat(o, halves ? 2 : 1);
  }
  expose(out, m_req.overlap);
  return out;
}

namespace {

/// The model an MTP module is: its layers, with the main model's widths and head.
Model draft_model(const Model& m) {
  Model draft = m;
  draft.name = m.name + " MTP";
  draft.layers = m.mtp_layers;
  draft.layer_types.assign(m.mtp_layers, LayerType::full);
  draft.ffn_types.assign(m.mtp_layers, m.ffn_types.back());
  draft.mtp_layers = 0;
  draft.kv_shared_layers = 0;
  draft.params.reset();
  if (draft.moe) {
    draft.moe->first_dense_layers = 0;
  }
  return draft;
}

/// Tokens a request keeps per step when `drafts` drafted tokens are each kept with chance `a`
/// given the one before was: 1 + a + a² + … + a^drafts.
double kept_per_step(u64 drafts, double a) {
  double kept = 1;
  double p = 1;
  for (u64 i = 0; i < drafts; ++i) {
    p *= a;
    kept += p;
  }
  return kept;
}

} // namespace

Collective StepCost::stage_transfer(const StepLoad& load) const {
  const Topology& links = m_req.rates.links;
  bool crosses = links.domain != 0 && m_domain_copy > links.domain;
  double w = d(dtype_storage_bytes(m_req.model.dtype, 1));
  return send(links, crosses,
              load.attention_tokens * d(m_req.model.hidden_size) * w / m_attention_tp);
}

double StepCost::pipeline_time_s(const StepLoad& load, u64 sequences) const {
  u64 pp = m_req.parallel.pp;
  if (pp <= 1) {
    return time_s(load);
  }
  u64 micro_batches = std::clamp<u64>(sequences, 1, pp);
  StepLoad micro = load.scaled(1.0 / d(micro_batches));
  double transfer = m_req.communication ? stage_transfer(micro).time_s : 0;
  return d(pp) * time_s(micro) + d(pp - 1) * transfer;
}

RooflineResult compute_roofline(const RooflineRequest& req) {
  const Model& m = req.model;
  const Parallelism& par = req.parallel;
  RooflineResult out;
  out.rates_source = req.rates.source;
  if (req.batch == 0 || req.context == 0 || req.query == 0) {
    throw InputError("--batch, --context and the query length must be at least 1");
  }
  if (req.batch > k_max_batch) {
    throw InputError("--batch " + group_digits(req.batch) + " is over " +
                     group_digits(k_max_batch) +
                     " sequences in one step, beyond any engine's batch");
  }
  if (req.context > k_max_context_tokens || req.query > k_max_context_tokens) {
    throw InputError("--context and the query length are at most 2^32 tokens, beyond any "
                     "model's context");
  }
  if (req.batch * (req.context + req.query) > k_max_step_tokens) {
    throw InputError("--batch × (context + query) is " +
                     group_digits(req.batch * (req.context + req.query)) +
                     " tokens in one step, over 2^40: lower --batch or --context");
  }
  if (req.draft_tokens > 0) {
    if (m.mtp_layers == 0) {
      throw InputError("--mtp drafts with the model's multi-token-prediction module; " + m.name +
                       " has none (mtp_layers), and kvcalc does not model a separate draft "
                       "model");
    }
    if (req.phase != Phase::decode || req.query != 1) {
      throw InputError("--mtp applies to decode steps, whose query it sets to 1 + drafts; drop "
                       "--query and --phase");
    }
  }
  if (!(req.acceptance >= 0 && req.acceptance <= 1)) {
    throw InputError("--accept is a probability: from 0 to 1");
  }
  if (req.communication && par.tp * par.pp * std::max<u64>(par.ep, 1) > 1) {
    device::require_figures(req.gpu, {"interconnect"}, "the collectives of a deployment over GPUs");
  }
  StepCost cost(req);

  // Step shape: s new tokens per request attending t tokens, t_eff on average (causal).
  u64 s = 0;
  u64 prefix = 0;
  switch (req.phase) {
  case Phase::decode:
    s = req.query + req.draft_tokens;
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
  out.query = s;
  out.attended = t;
  out.attended_effective = req.phase == Phase::decode ? d(t) : d(prefix) + d(s) / 2.0;
  if (m.attention.kind == AttentionKind::mla) {
    out.mla = resolve_mla_mode(req.mla, req.phase, s);
  }
  out.layers = cost.layers();
  out.heads = cost.heads();
  Deployment deployment = resolve_deployment(m, par, req.weight_dtype);
  u64 groups = par.tp / deployment.attention_tp; // attention groups of a copy
  u64 batch_gpu = ceil_div(req.batch, groups);
  out.batch_per_gpu = batch_gpu;
  out.gpus = par.tp * par.pp;
  out.micro_batches = par.pp;
  StepLoad load;
  cost.add(load, req.phase, s, prefix, d(req.batch), d(batch_gpu));
  out.ops = cost.ops(load);

  // MTP: each drafted token is one pass of the module over the batch, one token each.
  if (req.draft_tokens > 0) {
    RooflineRequest draft = req;
    draft.model = draft_model(m);
    draft.parallel.pp = 1;
    draft.parallel.gpus = deployment.parallel.gpus / par.pp;
    StepCost draft_cost(draft, true);
    StepLoad draft_load;
    draft_cost.add(draft_load, Phase::decode, 1, req.context, d(req.batch), d(batch_gpu));
    for (Op o : draft_cost.ops(draft_load)) {
      repeat(o, d(req.draft_tokens));
      out.ops.push_back(std::move(o));
    }
    expose(out.ops, req.overlap);
  }

  for (const Op& o : out.ops) {
    out.flops += o.flops;
    out.bytes += o.bytes;
    (o.communication ? out.communication_s : out.compute_s) += o.time_s;
    out.stage_s += o.exposed_s;
  }
  auto longest = std::max_element(out.ops.begin(), out.ops.end(),
                                  [](const Op& x, const Op& y) { return x.time_s < y.time_s; });
  out.dominant = longest->name;

  // Pipeline: a micro-batch crosses every stage, handing its hidden states on at each boundary;
  // pp micro-batches are in flight. Decode waits for its own last stage before its next step;
  // prefill streams, one micro-batch per stage time.
  double transfer = 0;
  if (par.pp > 1 && req.communication) {
    out.stage_transfer = cost.stage_transfer(load);
    transfer = out.stage_transfer->time_s;
  }
  double pp = d(par.pp);
  out.time_s = pp * out.stage_s + (pp - 1) * transfer;
  out.tokens_per_step = req.phase == Phase::decode
                            ? kept_per_step(req.draft_tokens, req.acceptance) * d(req.query)
                            : d(s);
  double in_flight = d(req.batch) * out.tokens_per_step;
  out.tokens_per_s = req.phase == Phase::decode ? pp * in_flight / out.time_s
                                                : in_flight / std::max(out.stage_s, transfer);
  out.tokens_per_s_per_gpu = out.tokens_per_s / d(out.gpus);
  out.time_per_token_s = req.phase == Phase::decode ? out.time_s / out.tokens_per_step : out.time_s;
  WeightBytes weights = weight_bytes(m, count_params(m), req.weight_dtype,
                                     weight_sharding(deployment, req.draft_tokens > 0));
  if (weights.per_gpu > req.gpu.memory_bytes) {
    out.weights_fit = false;
    out.notes.push_back(m.name + ": its weights (" + group_digits(weights.per_gpu) +
                        " B per GPU at tp " + std::to_string(par.tp) + ") do not fit in one " +
                        req.gpu.name +
                        "; the step is computed all the same (more --tp or --pp spreads them)");
  }
  return out;
}

double mla_attention_time(const RooflineRequest& req, MlaMode mode, u64 query) {
  RooflineRequest r = req;
  r.phase = Phase::extend;
  r.query = query;
  r.mla = mode;
  double total = 0;
  for (const Op& o : compute_roofline(r).ops) {
    if (!o.variant.empty()) {
      total += o.time_s;
    }
  }
  return total;
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
  if (2 * dc > dnv) {
    c.flop_ratio = dc * dnv / (2 * dc - dnv);
    // s·(P + s/2)/P = ratio  ⇒  s = −P + √(P² + 2·ratio·P).
    double p = d(req.context);
    c.flop_query = -p + std::sqrt(p * p + 2 * *c.flop_ratio * p);
  }
  auto attention_time = [&](MlaMode mode, u64 s) { return mla_attention_time(req, mode, s); };
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

} // namespace kvcalc::roofline
