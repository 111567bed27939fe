#include <kvcalc/roofline/roofline.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <numeric>
#include <span>

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

/// An op's time on the roofline: its FLOPs at the peak of its dtype and its bytes at the
/// bandwidth, the longer of the two bounding it (docs/formulas.md §11).
struct OpTime {
  double compute_s = 0;
  double memory_s = 0;
  [[nodiscard]] double time_s() const { return std::max(compute_s, memory_s); }
};

OpTime op_time(double flops, double bytes, double peak, double bandwidth) {
  return {peak > 0 ? flops / peak : 0, bytes / bandwidth};
}

/// `prefix` + `name` as text that lives as long as the program: the names of an MTP module's
/// ops ("mtp.attention.core"), made once each. Both must be static text (string literals): the
/// table keeps views of them.
std::string_view prefixed(const char* prefix, const char* name) {
  static std::mutex guard;
  static std::map<std::pair<std::string_view, std::string_view>, std::string> names;
  std::lock_guard lock(guard);
  auto [at, added] = names.try_emplace({prefix, name});
  if (added) {
    at->second = std::string(prefix) + name;
  }
  return at->second;
}

/// Collects the ops of one step with their names, rates and bounds, into `out` from its start;
/// the ops it holds beyond are left for the caller to drop, their buffers reused meanwhile.
class OpSink {
public:
  OpSink(const DeviceRates& rates, const StepLoad& load, std::vector<Op>& out, std::size_t first,
         const char* prefix)
      : m_rates(rates), m_graph(load.prefill_tokens == 0), m_out(out), m_next(first),
        m_prefix(prefix) {}

  void add(const char* name, DType dtype, double flops, double weights, double activations,
           double kv, const Kernels& kernels, const char* variant = "") {
    Op& op = next(name, dtype);
    op.flops = flops;
    op.weight_bytes = weights;
    op.activation_bytes = activations;
    op.kv_bytes = kv;
    op.bytes = weights + activations + kv;
    op.variant = variant;
    double peak = peak_of(m_rates.flops_per_s, dtype);
    op.peak_flops = peak;
    op.intensity = op.bytes > 0 ? op.flops / op.bytes : 0;
    double bw = m_rates.bandwidth_bytes_per_s;
    op.attainable = std::min(peak, op.intensity * bw);
    OpTime t = op_time(flops, op.bytes, peak, bw);
    op.compute_bound = t.compute_s > t.memory_s;
    op.time_s = t.time_s();
    if (m_rates.estimate) {
      op.estimate_s =
          m_rates.estimate->op_s(kernels, dtype, flops, weights, activations, kv, &m_memo);
    }
  }

  /// `count` collectives `c` of the step (one per layer, say).
  void collective(const char* name, DType dtype, const Collective& c, double count) {
    if (count <= 0 || c.time_s <= 0) {
      return;
    }
    Op& op = next(name, dtype);
    op.activation_bytes = (c.up_bytes + c.out_bytes) * count;
    op.bytes = op.activation_bytes;
    op.communication = true;
    op.time_s = c.time_s * count;
    if (m_rates.estimate) {
      op.estimate_s = m_rates.estimate->collective_s(c, m_rates.links, m_graph) * count;
    }
    op.collective = c;
    op.collectives = count;
  }

  /// Where the next op would go: the ops written end before it.
  [[nodiscard]] std::size_t end() const { return m_next; }

private:
  /// The next op, reset to its name and dtype.
  Op& next(const char* name, DType dtype) {
    if (m_next == m_out.size()) {
      m_out.emplace_back();
    }
    Op& op = m_out[m_next++];
    op = Op{};
    op.name = *m_prefix == '\0' ? std::string_view(name) : prefixed(m_prefix, name);
    op.dtype = dtype_name(dtype);
    return op;
  }

  const DeviceRates& m_rates;
  bool m_graph; ///< a decode-only step, replayed in a CUDA graph
  CurveMemo m_memo;
  std::vector<Op>& m_out;
  std::size_t m_next;
  const char* m_prefix;
};

/// Sums the time of the ops of one step, allocating nothing (the simulator's path): the
/// bound's, or the estimate's where asked and the rates carry one.
class TimeSink {
public:
  TimeSink(const DeviceRates& rates, const StepLoad& load, Pricing pricing)
      : m_rates(rates), m_estimate(pricing == Pricing::estimate ? rates.estimate.get() : nullptr),
        m_graph(load.prefill_tokens == 0) {}

  void add(const char* /*name*/, DType dtype, double flops, double weights, double activations,
           double kv, const Kernels& kernels, const char* /*variant*/ = "") {
    m_compute += m_estimate
                     ? m_estimate->op_s(kernels, dtype, flops, weights, activations, kv, &m_memo)
                     : op_time(flops, weights + activations + kv,
                               peak_of(m_rates.flops_per_s, dtype), m_rates.bandwidth_bytes_per_s)
                           .time_s();
  }

  void collective(const char* /*name*/, DType /*dtype*/, const Collective& c, double count) {
    if (count > 0) {
      m_communication +=
          (m_estimate ? m_estimate->collective_s(c, m_rates.links, m_graph) : c.time_s) * count;
    }
  }

  [[nodiscard]] double compute() const { return m_compute; }
  [[nodiscard]] double communication() const { return m_communication; }

private:
  const DeviceRates& m_rates;
  const Estimator* m_estimate;
  bool m_graph;
  CurveMemo m_memo;
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
    x.prefill_query *= f;
    x.prefill_attended *= f;
    x.prefill_held *= f;
  };
  out.attention_tokens *= f;
  out.prefill_tokens *= f;
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
  o.estimate_s *= times;
  o.estimate_exposed_s *= times;
  o.collectives *= times;
}

/// Marks what the step's overlap hides: with two-batch overlap the shorter of compute and
/// communication runs under the longer; without, every op is on the critical path.
void expose(std::span<Op> ops, Overlap overlap) {
  double compute = 0;
  double communication = 0;
  double estimate_compute = 0;
  double estimate_communication = 0;
  for (const Op& o : ops) {
    (o.communication ? communication : compute) += o.time_s;
    (o.communication ? estimate_communication : estimate_compute) += o.estimate_s;
  }
  bool hide_communication = compute >= communication;
  bool estimate_hides_communication = estimate_compute >= estimate_communication;
  for (Op& o : ops) {
    bool two_batch = overlap == Overlap::two_batch;
    o.exposed_s = two_batch && o.communication == hide_communication ? 0 : o.time_s;
    o.estimate_exposed_s =
        two_batch && o.communication == estimate_hides_communication ? 0 : o.estimate_s;
  }
}

} // namespace

MlaMode resolve_mla_mode(MlaMode requested, Phase phase, u64 s) {
  if (requested != MlaMode::automatic) {
    return requested;
  }
  return s <= 128 && phase != Phase::prefill ? MlaMode::absorbed : MlaMode::naive;
}

namespace {

/// Each GPU's own share: an attention group of attention_tp GPUs runs its sequences and the
/// dense parts on their tokens; experts take the tokens of every copy their group serves.
StepShape::Split split_of(const Deployment& deployment, const Topology& links) {
  const Parallelism& par = deployment.parallel;
  StepShape::Split x;
  x.tp = d(par.tp);
  x.attention_tp = d(deployment.attention_tp);
  x.attention_share = x.attention_tp / x.tp;
  x.ep = d(par.ep);
  x.expert_tp = d(deployment.expert_tp);
  x.experts_local = d(deployment.experts_per_rank);
  x.expert_copies = par.ep > par.tp ? d(par.ep) / d(par.tp) : 1.0;
  x.all_to_all = deployment.expert_all_to_all;
  x.domain_copy = par.tp * par.pp;
  // Copies are placed whole, one after another: an expert group of one stage takes tp GPUs
  // from each of ep / tp copies, so under pp a domain holds the stage's GPUs of the
  // ⌊D / (tp·pp)⌋ copies in it; a group that fits them stays inside, a larger one spans domains
  // of that many (or, where a copy is larger than a domain, of the stage's GPUs in one).
  u64 domain = links.domain;
  if (domain == 0 || par.pp == 1) {
    x.expert_local = group_in_domain(links, par.ep);
  } else {
    u64 per_domain =
        x.domain_copy <= domain ? par.tp * (domain / x.domain_copy) : std::gcd(par.tp, domain);
    x.expert_local = par.ep <= per_domain ? par.ep : std::gcd(par.ep, per_domain);
  }
  return x;
}

/// This GPU's stage: ⌈layers / pp⌉ layers, and what mixes tokens and feeds forward in them.
StepShape::Layers layers_of(const Model& m, u64 pp) {
  StepShape::Layers x;
  x.stage = ceil_div(m.layers, pp);
  for (u64 i = 0; i < x.stage; ++i) {
    x.mixers += m.layer_types[i] == LayerType::none ? 0 : 1;
    x.dense += m.ffn_types[i] == FfnType::dense ? 1 : 0;
    x.moe += m.ffn_types[i] == FfnType::moe ? 1 : 0;
  }
  return x;
}

/// The cache as this GPU holds it, by kind: attention kinds, the DSA indexer and the states.
void place_cache(StepShape& shape, const Model& m, const RooflineRequest& req, u64 attention_tp,
                 u64 pp) {
  CacheLayout layout;
  layout.cache = req.cache;
  layout.attention_tp = attention_tp;
  layout.pp = pp;
  for (const auto& g : cache_groups(m, layout)) {
    const CacheSpec& spec = g.spec;
    switch (spec.kind) {
    case CacheKind::full:
    case CacheKind::sliding:
    case CacheKind::chunked: {
      AttentionKindShape& k = shape.kinds[static_cast<std::size_t>(spec.kind)];
      k.layers = d(g.layers + g.shared_layers);
      k.stored = d(g.layers);
      k.window = d(spec.window);
      k.kv_rate = d(spec.bytes_per_token);
      shape.math.kv = spec.format.dtype;
      k.sliding_geometry = spec.kind == CacheKind::sliding && m.sliding_attention.has_value();
      break;
    }
    case CacheKind::indexer:
      shape.indexer.layers = d(g.layers);
      shape.indexer.rate = d(spec.bytes_per_token);
      break;
    case CacheKind::state:
      shape.state.layers = d(g.layers);
      shape.state.bytes = d(spec.state_bytes);
      for (const auto& t : spec.state) {
        shape.state.elements += d(t.elements());
      }
      break;
    }
  }
  double topk = 0; // DSA: tokens each query attends
  if (m.indexer) {
    topk = d(m.indexer->topk);
    shape.indexer.heads = d(m.indexer->heads);
    shape.indexer.head_dim = d(m.indexer->head_dim);
  }
  // A window or chunk caps what a layer holds and attends; DSA's full layers attend only the
  // top-k tokens their indexer picks.
  for (std::size_t k = 0; k < shape.kinds.size(); ++k) {
    shape.kinds[k].cap = shape.kinds[k].window > 0 ? shape.kinds[k].window : topk;
    if (shape.kinds[k].layers > 0) {
      shape.present[shape.present_count++] = k;
    }
  }
}

/// How each matrix is stored, by its name in the parameter count (docs/formulas.md §9): the
/// checkpoint's own layout, or --weight-dtype over what it quantizes.
class MatrixFormats {
public:
  MatrixFormats(const Model& m, std::optional<DType> weight_dtype)
      : m_model(m), m_weight_dtype(weight_dtype) {}

  [[nodiscard]] WeightFormat format(std::string_view name) const {
    TensorGroup tg{std::string(name),
                   1,
                   1,
                   1,
                   name.starts_with("moe.experts") ? TensorPlace::expert : TensorPlace::layer,
                   true,
                   false};
    return tensor_format(m_model, tg, m_weight_dtype);
  }
  /// Bytes of a `rows` × `cols` matrix named `name`, scales included.
  [[nodiscard]] double bytes(std::string_view name, u64 rows, u64 cols) const {
    return d(format(name).bytes(rows, cols));
  }

private:
  const Model& m_model;
  std::optional<DType> m_weight_dtype;
};

AttentionGeometry geometry_of(const Attention& a, double layers, u64 attention_tp, u64 hidden,
                              const MatrixFormats& formats) {
  AttentionGeometry g;
  g.layers = layers;
  g.heads = d(a.heads) / d(attention_tp);
  g.kv_heads = std::max(1.0, std::floor(d(a.kv_heads) / d(attention_tp)));
  g.head_dim = d(a.head_dim);
  g.v_head_dim = d(a.v_head_dim);
  g.v_width = g.heads * g.v_head_dim;
  if (a.kind != AttentionKind::mla) {
    double q = g.heads * g.head_dim * (a.output_gate ? 2 : 1);
    g.qkv_out = q + g.kv_heads * (g.head_dim + g.v_head_dim);
    g.w_qkv = formats.bytes("attention.q_proj", static_cast<u64>(g.qkv_out), hidden);
  }
  g.w_o = formats.bytes("attention.o_proj", hidden, static_cast<u64>(std::max(1.0, g.v_width)));
  return g;
}

/// The attention geometries: the main one, and the sliding layers' own where the model has it.
void place_attention(StepShape& shape, const Model& m, u64 attention_tp,
                     const MatrixFormats& formats) {
  if (!has_attention(m)) {
    return;
  }
  double main_layers = 0;
  for (const AttentionKindShape& k : shape.kinds) {
    main_layers += k.sliding_geometry ? 0 : k.layers;
  }
  shape.main = geometry_of(m.attention, main_layers, attention_tp, m.hidden_size, formats);
  const AttentionKindShape& sliding = shape.kinds[static_cast<std::size_t>(CacheKind::sliding)];
  if (sliding.sliding_geometry) {
    shape.sliding =
        geometry_of(*m.sliding_attention, sliding.layers, attention_tp, m.hidden_size, formats);
  }
}

StepShape::Mla mla_of(const Model& m, double heads, const MatrixFormats& formats) {
  const MlaDims& md = m.attention.mla;
  StepShape::Mla x;
  double qk = d(md.qk_nope_head_dim + md.qk_rope_head_dim);
  u64 q_out = static_cast<u64>(heads * qk);
  x.q_out = d(q_out);
  if (md.q_lora_rank > 0) {
    x.w_q_down = formats.bytes("attention.q_a_proj", md.q_lora_rank, m.hidden_size);
    x.w_q_up = formats.bytes("attention.q_b_proj", q_out, md.q_lora_rank);
  } else {
    x.w_q = formats.bytes("attention.q_proj", q_out, m.hidden_size);
  }
  x.w_kv_down = formats.bytes("attention.kv_a_proj_with_mqa", md.kv_lora_rank + md.qk_rope_head_dim,
                              m.hidden_size);
  double absorb_weights =
      d(static_cast<u64>(heads)) * d(md.kv_lora_rank) * d(md.qk_nope_head_dim + md.v_head_dim);
  x.w_absorb = absorb_weights * d(dtype_storage_bytes(m.dtype, 1024)) / 1024;
  return x;
}

StepShape::FeedForward feed_forward_of(const Model& m, const StepShape& shape,
                                       std::optional<DType> dispatch_dtype, DType& dispatch,
                                       const MatrixFormats& formats) {
  StepShape::FeedForward x;
  double attention_tp = shape.split.attention_tp;
  if (shape.layers.dense > 0) {
    x.mlp_width = d(m.mlp.intermediate_size) / attention_tp;
    x.w_mlp =
        formats.bytes("mlp.down_proj", m.hidden_size, static_cast<u64>(std::max(1.0, x.mlp_width)));
  }
  if (m.moe && shape.layers.moe > 0) {
    const Moe& e = *m.moe;
    x.w_expert = formats.bytes("moe.experts.down_proj", e.expert_intermediate_size, m.hidden_size);
    // Dispatch sends fp8 with a scale per 128 values where the experts compute in fp8
    // (DeepEP); combine returns the activation dtype.
    dispatch = dispatch_dtype.value_or(shape.math.expert);
    bool fp8 = dispatch == DType::fp8_e4m3 || dispatch == DType::fp8_e5m2;
    x.dispatch_bytes = fp8 ? d(m.hidden_size) + 4 * d(ceil_div(m.hidden_size, 128))
                           : d(dtype_storage_bytes(dispatch, m.hidden_size));
    if (e.shared_expert_intermediate_size > 0) {
      x.shared_width = d(e.shared_expert_intermediate_size) / attention_tp;
      x.w_shared = formats.bytes("moe.shared_experts.down_proj", m.hidden_size,
                                 static_cast<u64>(std::max(1.0, x.shared_width)));
    }
  }
  return x;
}

/// The weights the formulas do not place: recurrent layers' projections (their tensors in the
/// parameter count) and a `params` override's remainder, split over tp and the stage like the
/// blocks' other matrices.
void place_other_weights(StepShape& shape, const Model& m, std::optional<DType> weight_dtype,
                         u64 attention_tp) {
  if (shape.state.layers == 0 && !m.params) {
    return;
  }
  ParamCount params = count_params(m);
  double stage_share = d(shape.layers.stage) / d(m.layers);
  for (const TensorGroup& t : params.tensors) {
    if (t.mtp) {
      continue;
    }
    double count = d(t.params());
    double bytes = d(tensor_bytes(t, tensor_format(m, t, weight_dtype)));
    double shards = t.rows > 1 ? d(attention_tp) : 1;
    if (t.name.starts_with("state.")) {
      shape.state.params += count / d(t.count) / shards;
      shape.state.weights += bytes / d(t.count) / shards;
      shape.state.linears += t.linear ? 1 : 0; // each group is one matmul of every state layer
    } else if (t.name == "params_override_remainder") {
      shape.other.params = count * stage_share / shape.split.attention_tp;
      shape.other.weights = bytes * stage_share / shape.split.attention_tp;
    }
  }
}

StepShape shape_of(const RooflineRequest& req, const Deployment& deployment) {
  const Model& m = req.model;
  const Parallelism& par = deployment.parallel;
  u64 attention_tp = deployment.attention_tp;
  StepShape shape;
  shape.mla_model = has_attention(m) && m.attention.kind == AttentionKind::mla;
  shape.split = split_of(deployment, req.rates.links);
  shape.layers = layers_of(m, par.pp);
  place_cache(shape, m, req, attention_tp, par.pp);
  shape.activation_bytes = d(dtype_storage_bytes(m.dtype, 1024)) / 1024;
  MatrixFormats formats(m, req.weight_dtype);
  // Matmuls run in the weights' dtype where a low-precision unit exists (fp8 GEMMs);
  // 4-bit and int8 weight-only formats dequantize to the activation dtype.
  shape.math.attention = formats.format("attention.o_proj").math_dtype(m.dtype);
  shape.math.expert = formats.format("moe.experts.down_proj").math_dtype(m.dtype);
  shape.math.attention_blocks = formats.format("attention.o_proj").layout == ScaleLayout::block;
  shape.math.expert_blocks = formats.format("moe.experts.down_proj").layout == ScaleLayout::block;
  place_attention(shape, m, attention_tp, formats);
  if (shape.mla_model) {
    // W_UK and W_UV are used in the activation dtype whether folded into the query
    // (absorbed) or applied to the latent (naive): engines dequantize them once at load.
    shape.math.absorb = m.dtype;
    shape.mla = mla_of(m, shape.main.heads, formats);
  }
  if (m.indexer) {
    u64 q_in = m.attention.mla.q_lora_rank ? m.attention.mla.q_lora_rank : m.hidden_size;
    shape.indexer.weights =
        d(dtype_storage_bytes(m.dtype, m.indexer->heads * m.indexer->head_dim * q_in)) +
        d(dtype_storage_bytes(m.dtype, (m.indexer->head_dim + m.indexer->heads) * m.hidden_size));
  }
  shape.ffn = feed_forward_of(m, shape, req.dispatch_dtype, shape.math.dispatch, formats);
  place_other_weights(shape, m, req.weight_dtype, attention_tp);
  return shape;
}

/// The checks of a request that hold for every step of it.
Deployment checked_deployment(const RooflineRequest& req) {
  if (req.parallel.dcp > 1) {
    throw InputError("the roofline does not model decode context parallel (--dcp); its step "
                     "would be priced as without it");
  }
  Deployment deployment = resolve_deployment(req.model, req.parallel, req.weight_dtype);
  if (!(req.expert_imbalance >= 1 && req.expert_imbalance <= 64)) {
    throw InputError("--expert-imbalance is the busiest GPU's token-expert pairs over the mean: "
                     "from 1 (balanced) to 64");
  }
  return deployment;
}

} // namespace

StepShape step_shape(const RooflineRequest& request) {
  return shape_of(request, checked_deployment(request));
}

StepCost::StepCost(const RooflineRequest& req, bool draft)
    : m_req(req), m_draft(draft), m_shape(step_shape(req)) {
}

StepCost::StepCost(const RooflineRequest& req, const Deployment& deployment)
    : m_req(req), m_shape(shape_of(req, deployment)) {
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
  bool prefill = phase != Phase::decode;
  if (prefill) {
    load.prefill_tokens += attention_copies * query;
  }
  auto tally = [&](AttentionSums& sums, double attended, double held) {
    sums.query += attention_copies * query;
    sums.attended += attention_copies * query * attended;
    sums.held += attention_copies * held;
    if (prefill) {
      sums.prefill_query += attention_copies * query;
      sums.prefill_attended += attention_copies * query * attended;
      sums.prefill_held += attention_copies * held;
    }
  };
  bool absorbed = !m_shape.mla_model || resolve_mla_mode(m_req.mla, phase, s) == MlaMode::absorbed;
  AttentionLoad& path = absorbed ? load.absorbed : load.naive;
  for (std::size_t i = 0; i < m_shape.present_count; ++i) {
    std::size_t k = m_shape.present[i];
    double cap = m_shape.kinds[k].cap;
    tally(path.kinds[k], cap > 0 ? std::min(t_eff, cap) : t_eff, cap > 0 ? std::min(t, cap) : t);
  }
  if (m_shape.indexer.layers > 0) {
    tally(load.indexer, t_eff, t);
  }
}

template <class Sink> void StepCost::build(const StepLoad& load, Sink& op) const {
  const Model& m = m_req.model;
  const StepShape& x = m_shape;
  double n = load.attention_tokens; // tokens of this GPU's attention group
  double h = d(m.hidden_size);
  double w = x.activation_bytes;
  double L = d(x.layers.stage);

  // Norms and embedding lookups: memory traffic only.
  op.add("norms", m.dtype, 4 * n * h * d(m.norms_per_layer) * L, 0,
         2 * n * h * w * d(m.norms_per_layer) * L, 0,
         {KernelClass::elementwise, d(m.norms_per_layer) * L});
  projections(load, op);
  indexer(load, op);
  attention_core(load, op);
  for (const AttentionGeometry* g : {&x.main, &x.sliding}) {
    if (g->layers == 0) {
      continue;
    }
    op.add(g == &x.sliding ? "attention.o_proj.sliding" : "attention.o_proj", x.math.attention,
           2 * n * g->v_width * h * g->layers, g->w_o * g->layers,
           n * (g->v_width + h) * w * g->layers, 0, gemm(g->layers, n));
  }
  state_layers(load, op);
  if (x.other.params > 0) {
    op.add("layers.other", x.math.attention, 2 * n * x.other.params, x.other.weights, 0, 0,
           gemm(L, n));
  }
  if (m_draft) {
    // The MTP module's own projection of [embedding; hidden] (2h → h) before its layer.
    op.add("eh_proj", x.math.attention, 2 * n * 2 * h * h, 2 * h * h * w / x.split.attention_tp,
           n * 3 * h * w, 0, gemm(1, n));
  }
  feed_forward(load, op);
  if (m_req.communication && x.split.attention_tp > 1) {
    // All-reduce of the attention group's hidden states after each token mixer and each
    // feed-forward part (experts inside the group included).
    double reduces = x.layers.mixers + x.layers.dense + (x.split.all_to_all ? 0 : x.layers.moe);
    op.collective("tp.all_reduce", m.dtype,
                  all_reduce(m_req.rates.links, static_cast<u64>(x.split.attention_tp), n * h * w),
                  reduces);
  }
  // LM head: every new token in decode, the last token of each prompt in prefill/extend.
  double vocab = d(m.vocab_size) / x.split.attention_tp;
  double logits = load.logits * x.split.attention_share;
  op.add("lm_head", m.dtype, 2 * logits * h * vocab, vocab * h * w, logits * (h * w + vocab * 4), 0,
         {KernelClass::gemm, 1, logits});
}

/// The attention projections into queries, keys and values (MLA: the low-rank ones and the
/// latent), their rotary embedding, and the KV written to the cache.
template <class Sink> void StepCost::projections(const StepLoad& load, Sink& op) const {
  const Model& m = m_req.model;
  const StepShape& x = m_shape;
  double n = load.attention_tokens;
  double h = d(m.hidden_size);
  double w = x.activation_bytes;
  if (x.mla_model) {
    const MlaDims& md = m.attention.mla;
    double Lm = x.main.layers;
    double heads = x.main.heads;
    double q_out = x.mla.q_out;
    if (md.q_lora_rank > 0) {
      op.add("attention.q_down", x.math.attention, 2 * n * h * d(md.q_lora_rank) * Lm,
             x.mla.w_q_down * Lm, n * (h + d(md.q_lora_rank)) * w * Lm, 0, gemm(Lm, n));
      op.add("attention.q_up", x.math.attention, 2 * n * d(md.q_lora_rank) * q_out * Lm,
             x.mla.w_q_up * Lm, n * (d(md.q_lora_rank) + q_out) * w * Lm, 0, gemm(Lm, n));
    } else {
      op.add("attention.q_proj", x.math.attention, 2 * n * h * q_out * Lm, x.mla.w_q * Lm,
             n * (h + q_out) * w * Lm, 0, gemm(Lm, n));
    }
    double latent = d(md.kv_lora_rank + md.qk_rope_head_dim);
    // With a low-rank query the engines fuse q_down and kv_down into one GEMM (vLLM's and
    // SGLang's fused_qkv_a_proj): one launch a layer between them.
    op.add("attention.kv_down", x.math.attention, 2 * n * h * latent * Lm, x.mla.w_kv_down * Lm,
           n * (h + latent) * w * Lm, 0, gemm(md.q_lora_rank > 0 ? 0 : Lm, n));
    op.add("attention.rotary", m.dtype, 3 * n * (heads + 1) * d(md.qk_rope_head_dim) * Lm, 0,
           2 * n * (heads + 1) * d(md.qk_rope_head_dim) * w * Lm, 0,
           {KernelClass::elementwise, Lm});
  } else {
    for (const AttentionGeometry* g : {&x.main, &x.sliding}) {
      if (g->layers == 0) {
        continue;
      }
      bool own = g == &x.sliding;
      op.add(own ? "attention.qkv_proj.sliding" : "attention.qkv_proj", x.math.attention,
             2 * n * h * g->qkv_out * g->layers, g->w_qkv * g->layers,
             n * (h + g->qkv_out) * w * g->layers, 0, gemm(g->layers, n));
      op.add(own ? "attention.rotary.sliding" : "attention.rotary", m.dtype,
             3 * n * (g->heads + g->kv_heads) * g->head_dim * g->layers, 0,
             2 * n * (g->heads + g->kv_heads) * g->head_dim * w * g->layers, 0,
             {KernelClass::elementwise, g->layers});
    }
  }
  if (x.main.layers + x.sliding.layers > 0) {
    double kv_written = 0;
    double storing = 0;
    for (const AttentionKindShape& k : x.kinds) {
      kv_written += k.kv_rate * k.stored;
      storing += k.stored;
    }
    op.add("attention.kv_write", m.dtype, 0, 0, 0,
           n * (kv_written + x.indexer.rate * x.indexer.layers),
           {KernelClass::elementwise, storing + x.indexer.layers});
  }
}

/// DSA: the indexer scores every cached token with its own keys, then attention reads the
/// top-k tokens only.
template <class Sink> void StepCost::indexer(const StepLoad& load, Sink& op) const {
  const StepShape::Indexer& ix = m_shape.indexer;
  if (ix.layers == 0) {
    return;
  }
  double h = d(m_req.model.hidden_size);
  double w = m_shape.activation_bytes;
  const AttentionSums& x = load.indexer;
  op.add("attention.indexer", DType::fp8_e4m3,
         2 * x.attended * ix.heads * ix.head_dim * ix.layers +
             2 * x.query * (ix.weights / w) * ix.layers,
         ix.weights * ix.layers, x.query * (h + ix.heads * ix.head_dim) * w * ix.layers,
         x.held * ix.rate * ix.layers,
         {.kind = KernelClass::attention, .calls = ix.layers, .sums = &x, .kv = DType::fp8_e4m3});
}

/// The attention core, per layer kind (windows, chunks and DSA's top-k cap what is attended);
/// MLA absorbed and naive each with their own ops.
template <class Sink> void StepCost::attention_core(const StepLoad& load, Sink& op) const {
  static constexpr std::array<const char*, 3> k_core{"attention.core", "attention.core.sliding",
                                                     "attention.core.chunked"};
  static constexpr std::array<const char*, 3> k_decompress{
      "attention.decompress", "attention.decompress.sliding", "attention.decompress.chunked"};
  const Model& m = m_req.model;
  const StepShape& x = m_shape;
  double w = x.activation_bytes;
  for (std::size_t kind = 0; kind < x.kinds.size(); ++kind) {
    const AttentionKindShape& k = x.kinds[kind];
    if (k.layers == 0) {
      continue;
    }
    double count = k.layers;
    double kv_rate = k.kv_rate;
    const AttentionSums& ab = load.absorbed.kinds[kind];
    const AttentionSums& nv = load.naive.kinds[kind];
    const char* core = k_core[kind];
    if (!x.mla_model) {
      const AttentionGeometry& g = k.sliding_geometry ? x.sliding : x.main;
      double dk = g.head_dim + g.v_head_dim;
      op.add(core, m.dtype, 2 * g.heads * ab.attended * dk * count, 0,
             ab.query * g.heads * dk * w * count, ab.held * kv_rate * count,
             {.kind = KernelClass::attention, .calls = count, .sums = &ab, .kv = x.math.kv});
      continue;
    }
    const MlaDims& md = m.attention.mla;
    double heads = x.main.heads;
    double dc = d(md.kv_lora_rank);
    double dr = d(md.qk_rope_head_dim);
    double dn = d(md.qk_nope_head_dim);
    double dv = d(md.v_head_dim);
    double w_absorb = x.mla.w_absorb;
    if (ab.query > 0) {
      // W_UK folded into the query, attention over the d_c + d_R latent, W_UV after.
      op.add("attention.absorb_uk", x.math.absorb, 2 * ab.query * heads * dn * dc * count,
             w_absorb * dn / (dn + dv) * count, ab.query * heads * (dn + dc) * w * count, 0,
             gemm(count, ab.query), "absorbed");
      op.add(core, m.dtype, 2 * heads * ab.attended * ((dc + dr) + dc) * count, 0,
             ab.query * heads * ((dc + dr) + dc) * w * count, ab.held * kv_rate * count,
             {KernelClass::mla_attention, count}, "absorbed");
      op.add("attention.absorb_uv", x.math.absorb, 2 * ab.query * heads * dc * dv * count,
             w_absorb * dv / (dn + dv) * count, ab.query * heads * (dc + dv) * w * count, 0,
             gemm(count, ab.query), "absorbed");
    }
    if (nv.query > 0) {
      // Decompress every attended latent into per-head K (nope) and V, then attend per head.
      double expanded = nv.held * heads * (dn + dr + dv) * w;
      bool materialized = m_req.naive_kv == NaiveKv::materialized;
      op.add(k_decompress[kind], x.math.absorb, 2 * nv.held * dc * heads * (dn + dv) * count,
             w_absorb * count, (materialized ? expanded : 0) * count, nv.held * kv_rate * count,
             gemm(count, nv.held), "naive");
      op.add(core, m.dtype, 2 * heads * nv.attended * (dn + dr + dv) * count, 0,
             (nv.query * heads * (dn + dr + dv) * w + (materialized ? expanded : 0)) * count, 0,
             {.kind = KernelClass::attention, .calls = count, .sums = &nv, .kv = m.dtype}, "naive");
    }
  }
}

/// Recurrent layers: their projections, then the scan, which reads and writes each sequence's
/// state once per step (docs/formulas.md §11, the state.proj and state.scan rows).
template <class Sink> void StepCost::state_layers(const StepLoad& load, Sink& op) const {
  const StepShape::State& st = m_shape.state;
  if (st.layers == 0) {
    return;
  }
  double n = load.attention_tokens;
  double h = d(m_req.model.hidden_size);
  double w = m_shape.activation_bytes;
  op.add("state.proj", m_shape.math.attention, 2 * n * st.params * st.layers,
         st.weights * st.layers, 2 * n * h * w * st.layers, 0,
         gemm(std::max(st.linears, 1.0) * st.layers, n));
  // The scan's kernels: the causal convolution and the recurrence itself.
  op.add("state.scan", DType::fp32, 4 * n * st.elements * st.layers, 0, 0,
         2 * load.sequences * st.bytes * st.layers, {KernelClass::elementwise, 2 * st.layers});
}

/// The MLP: dense layers, then MoE layers.
template <class Sink> void StepCost::feed_forward(const StepLoad& load, Sink& op) const {
  const Model& m = m_req.model;
  const StepShape& x = m_shape;
  if (x.layers.dense > 0) {
    double n = load.attention_tokens;
    double h = d(m.hidden_size);
    double w = x.activation_bytes;
    double gate = m.mlp.kind == MlpKind::gated ? 3 : 2;
    double width = x.ffn.mlp_width;
    double dense = x.layers.dense;
    // Two GEMMs a layer (gate and up fused, then down) and the activation between them.
    Kernels kernels = gemm(2 * dense, n);
    kernels.elementwise_calls = dense;
    op.add("mlp", x.math.attention, 2 * n * h * width * gate * dense, gate * x.ffn.w_mlp * dense,
           n * (2 * h + gate * width) * w * dense, 0, kernels);
  }
  if (x.layers.moe > 0) {
    experts(load, op);
  }
}

/// MoE layers: the router, the routed experts with the tokens of every copy their group serves,
/// the shared experts, and the all-to-all that carries tokens to their experts and back.
template <class Sink> void StepCost::experts(const StepLoad& load, Sink& op) const {
  const Model& m = m_req.model;
  const StepShape& x = m_shape;
  const Moe& e = *m.moe;
  double n = load.attention_tokens;
  double h = d(m.hidden_size);
  double w = x.activation_bytes;
  double gate = m.mlp.kind == MlpKind::gated ? 3 : 2;
  double ml = x.layers.moe;
  double k = d(e.experts_per_token);
  double experts = d(e.routed_experts);
  op.add("moe.router", m.dtype, 2 * n * h * experts * ml, h * experts * w * ml,
         n * (h + experts) * w * ml, 0, {KernelClass::gemm, ml, n});
  // The expert group serves the tokens of every copy it spans; this GPU takes 1/ep of their
  // token-expert pairs (times the imbalance), each expert's width split over expert_tp.
  double group_tokens = load.tokens * x.split.expert_copies;
  double pairs = group_tokens * k / x.split.ep * m_req.expert_imbalance;
  double ie = d(e.expert_intermediate_size) / x.split.expert_tp;
  // A local expert is read once per step when the group's tokens touch it (uniform routing).
  double touched = x.split.experts_local *
                   expected_experts(e.routed_experts, e.experts_per_token, group_tokens) / experts;
  op.add("moe.experts", x.math.expert, 2 * pairs * h * ie * gate * ml,
         touched * gate * x.ffn.w_expert / x.split.expert_tp * ml,
         pairs * (2 * h + gate * ie) * w * ml, 0, {KernelClass::grouped_gemm, ml, ie});
  if (e.shared_expert_intermediate_size > 0) {
    double width = x.ffn.shared_width;
    Kernels kernels = gemm(2 * ml, n);
    kernels.elementwise_calls = ml;
    op.add("moe.shared_experts", x.math.attention, 2 * n * h * width * gate * ml,
           gate * x.ffn.w_shared * ml, n * (2 * h + gate * width) * w * ml, 0, kernels);
  }
  if (m_req.communication && x.split.all_to_all) {
    // Each GPU sends its slice of the copy's tokens to the k experts of each (dispatch) and
    // takes their outputs back (combine), once per domain they sit in; the busiest GPU
    // receives `imbalance` × the mean.
    double sent = load.tokens / x.split.tp * m_req.expert_imbalance;
    u64 group = static_cast<u64>(x.split.ep);
    const Topology& links = m_req.rates.links;
    op.collective(
        "moe.dispatch", x.math.dispatch,
        expert_exchange(links, group, sent, k, x.ffn.dispatch_bytes, x.split.expert_local), ml);
    Collective combine = expert_exchange(links, group, sent, k, h * w, x.split.expert_local);
    combine.kind = CollectiveKind::combine;
    op.collective("moe.combine", m.dtype, combine, ml);
  }
}

double StepCost::time_s(const StepLoad& load, Pricing pricing) const {
  TimeSink sink(m_req.rates, load, pricing);
  if (m_req.overlap == Overlap::none) {
    build(load, sink);
    return sink.compute() + sink.communication();
  }
  build(load.scaled(0.5), sink);
  return 2 * std::max(sink.compute(), sink.communication());
}

std::vector<Op> StepCost::ops(const StepLoad& load) const {
  std::vector<Op> out;
  ops(load, out, 0);
  return out;
}

void StepCost::ops(const StepLoad& load, std::vector<Op>& out, std::size_t first) const {
  OpSink sink(m_req.rates, load, out, first, m_draft ? "mtp." : "");
  bool halves = m_req.overlap == Overlap::two_batch;
  build(halves ? load.scaled(0.5) : load, sink);
  out.resize(sink.end());
  std::span<Op> mine(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
  for (Op& o : mine) {
    repeat(o, halves ? 2 : 1);
  }
  expose(mine, m_req.overlap);
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
  bool crosses = links.domain != 0 && m_shape.split.domain_copy > links.domain;
  double w = d(dtype_storage_bytes(m_req.model.dtype, 1));
  return send(links, crosses,
              load.attention_tokens * d(m_req.model.hidden_size) * w / m_shape.split.attention_tp);
}

double StepCost::pipeline_time_s(const StepLoad& load, u64 sequences, Pricing pricing) const {
  u64 pp = m_req.parallel.pp;
  if (pp <= 1) {
    return time_s(load, pricing);
  }
  u64 micro_batches = std::clamp<u64>(sequences, 1, pp);
  StepLoad micro = load.scaled(1.0 / d(micro_batches));
  double transfer = m_req.communication ? transfer_s(stage_transfer(micro), pricing) : 0;
  return d(pp) * time_s(micro, pricing) + d(pp - 1) * transfer;
}

double StepCost::transfer_s(const Collective& c, Pricing pricing) const {
  const DeviceRates& r = m_req.rates;
  return pricing == Pricing::estimate && r.estimate ? r.estimate->collective_s(c, r.links, false)
                                                    : c.time_s;
}

namespace {

/// The sizes of one step: each at least 1, and within what 64-bit byte counts hold.
void check_sizes(const RooflineRequest& req) {
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
}

void check_mtp_module(const RooflineRequest& req) {
  if (req.draft_tokens > 0 && req.model.mtp_layers == 0) {
    throw InputError("--mtp drafts with the model's multi-token-prediction module; " +
                     req.model.name +
                     " has none (mtp_layers), and kvcalc does not model a separate draft model");
  }
}

void check_mtp_step(const RooflineRequest& req) {
  if (req.draft_tokens > 0 && (req.phase != Phase::decode || req.query != 1)) {
    throw InputError("--mtp applies to decode steps, whose query it sets to 1 + drafts; drop "
                     "--query and --phase");
  }
}

void check_acceptance_and_links(const RooflineRequest& req) {
  if (!(req.acceptance >= 0 && req.acceptance <= 1)) {
    throw InputError("--accept is a probability: from 0 to 1");
  }
  const Parallelism& par = req.parallel;
  if (req.communication && par.tp * par.pp * std::max<u64>(par.ep, 1) > 1) {
    device::require_figures(req.gpu, {"interconnect"}, "the collectives of a deployment over GPUs");
  }
}

/// The checks of a deployment that hold for every step, before anything is priced.
void check_deployment(const RooflineRequest& req) {
  check_mtp_module(req);
  check_acceptance_and_links(req);
}

/// The request of the MTP module of `req`'s model: its layers on one stage's GPUs.
RooflineRequest draft_request(const RooflineRequest& req, const Deployment& deployment) {
  RooflineRequest draft = req;
  draft.model = draft_model(req.model);
  draft.parallel.pp = 1;
  draft.parallel.gpus = deployment.parallel.gpus / req.parallel.pp;
  return draft;
}

} // namespace

Roofline::Roofline(const RooflineRequest& deployment)
    : m_req(deployment),
      m_deployment((check_deployment(deployment), checked_deployment(deployment))),
      m_cost(deployment, m_deployment) {
  const Model& m = m_req.model;
  if (m_req.draft_tokens > 0) {
    m_draft.emplace(draft_request(m_req, m_deployment), true);
  }
  WeightBytes weights = weight_bytes(m, count_params(m), m_req.weight_dtype,
                                     weight_sharding(m_deployment, m_req.draft_tokens > 0));
  if (weights.per_gpu > m_req.gpu.memory_bytes) {
    m_weights_fit = false;
    m_weights_note = m.name + ": its weights (" + group_digits(weights.per_gpu) +
                     " B per GPU at tp " + std::to_string(m_req.parallel.tp) +
                     ") do not fit in one " + m_req.gpu.name +
                     "; the step is computed all the same (more --tp or --pp spreads them)";
  }
}

RooflineResult Roofline::step(const RooflineRequest& req) const {
  RooflineResult out;
  step(req, out);
  return out;
}

void Roofline::step(const RooflineRequest& req, RooflineResult& out) const {
  check_step(req);
  price(req, out);
}

void Roofline::price(const RooflineRequest& req, RooflineResult& out) const {
  const Parallelism& par = m_req.parallel;
  std::vector<Op> ops = std::move(out.ops);
  std::vector<std::string> notes = std::move(out.notes);
  std::string source = std::move(out.rates_source);
  std::string estimate_note = std::move(out.estimate_note);
  out = RooflineResult{};
  out.rates_source = std::move(source);
  out.estimate_note = std::move(estimate_note);
  out.rates_source.assign(m_req.rates.source);

  // Step shape: s new tokens per request attending t tokens, t_eff on average (causal).
  u64 s = new_tokens(req);
  u64 prefix = req.phase == Phase::decode   ? (req.context >= s ? req.context - s : 0)
               : req.phase == Phase::extend ? req.context
                                            : 0;
  u64 t = prefix + s;
  out.query = s;
  out.attended = t;
  out.attended_effective = req.phase == Phase::decode ? d(t) : d(prefix) + d(s) / 2.0;
  if (m_req.model.attention.kind == AttentionKind::mla) {
    out.mla = resolve_mla_mode(m_req.mla, req.phase, s);
  }
  out.layers = m_cost.layers();
  out.heads = m_cost.heads();
  u64 groups = par.tp / m_deployment.attention_tp; // attention groups of a copy
  u64 batch_gpu = ceil_div(req.batch, groups);
  out.batch_per_gpu = batch_gpu;
  out.gpus = par.tp * par.pp;
  out.micro_batches = par.pp;
  StepLoad load;
  m_cost.add(load, req.phase, s, prefix, d(req.batch), d(batch_gpu));
  m_cost.ops(load, ops, 0);

  // MTP: each drafted token is one pass of the module over the batch, one token each.
  if (m_draft) {
    std::size_t first = ops.size();
    StepLoad draft_load;
    m_draft->add(draft_load, Phase::decode, 1, req.context, d(req.batch), d(batch_gpu));
    m_draft->ops(draft_load, ops, first);
    for (std::size_t i = first; i < ops.size(); ++i) {
      repeat(ops[i], d(m_req.draft_tokens));
    }
    expose(ops, m_req.overlap);
  }
  out.ops = std::move(ops);

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
  if (par.pp > 1 && m_req.communication) {
    out.stage_transfer = m_cost.stage_transfer(load);
    transfer = out.stage_transfer->time_s;
  }
  double pp = d(par.pp);
  out.time_s = pp * out.stage_s + (pp - 1) * transfer;
  out.tokens_per_step = req.phase == Phase::decode
                            ? kept_per_step(m_req.draft_tokens, m_req.acceptance) * d(req.query)
                            : d(s);
  double in_flight = d(req.batch) * out.tokens_per_step;
  out.tokens_per_s = req.phase == Phase::decode ? pp * in_flight / out.time_s
                                                : in_flight / std::max(out.stage_s, transfer);
  out.tokens_per_s_per_gpu = out.tokens_per_s / d(out.gpus);
  out.time_per_token_s = req.phase == Phase::decode ? out.time_s / out.tokens_per_step : out.time_s;
  out.estimate_note.assign(m_req.rates.estimate_note);
  if (m_req.rates.estimate) {
    out.estimate = estimate_totals(out, req, in_flight, pp);
  }
  out.weights_fit = m_weights_fit;
  out.notes = std::move(notes);
  out.notes.clear();
  if (!m_weights_fit) {
    out.notes.push_back(m_weights_note);
  }
}

StepEstimate Roofline::estimate_totals(const RooflineResult& bound, const RooflineRequest& req,
                                       double in_flight, double pp) const {
  StepEstimate e;
  const Op* longest = nullptr;
  for (const Op& o : bound.ops) {
    (o.communication ? e.communication_s : e.compute_s) += o.estimate_s;
    e.stage_s += o.estimate_exposed_s;
    if (!longest || o.estimate_s > longest->estimate_s) {
      longest = &o;
    }
  }
  e.dominant = longest ? longest->name : std::string_view();
  double transfer =
      bound.stage_transfer ? m_cost.transfer_s(*bound.stage_transfer, Pricing::estimate) : 0;
  // The engine's own time runs once a step, whatever the stages.
  double overhead = m_req.rates.estimate->step_overhead_s();
  e.time_s = pp * e.stage_s + (pp - 1) * transfer + overhead;
  bool decode = req.phase == Phase::decode;
  e.tokens_per_s =
      decode ? pp * in_flight / e.time_s : in_flight / std::max(e.stage_s + overhead, transfer);
  e.tokens_per_s_per_gpu = e.tokens_per_s / d(bound.gpus);
  e.time_per_token_s = decode ? e.time_s / bound.tokens_per_step : e.time_s;
  return e;
}

void check_step(const RooflineRequest& request) {
  check_sizes(request);
  check_mtp_step(request);
}

u64 new_tokens(const RooflineRequest& request) {
  switch (request.phase) {
  case Phase::decode:
    return request.query + request.draft_tokens;
  case Phase::prefill:
    return request.context;
  case Phase::extend:
    return request.query;
  }
  return request.query;
}

RooflineResult compute_roofline(const RooflineRequest& request) {
  check_step(request);
  Roofline roofline(request);
  RooflineResult out;
  roofline.price(request, out);
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
