#include <kvcalc/roofline/estimate.hpp>

#include <algorithm>
#include <utility>

#include <kvcalc/core/error.hpp>
#include <kvcalc/roofline/roofline.hpp>

using namespace kvcalc::device;

namespace kvcalc::roofline {

namespace {

/// The part of an op that one set of sequences takes: its FLOPs, weights, activations and KV.
struct Share {
  double flops = 0;
  double weights = 0;
  double activations = 0;
  double kv = 0;
};

} // namespace

Estimator::Estimator(EfficiencyProfile profile, const Gpu& gpu, std::string source)
    : m_profile(std::move(profile)), m_bandwidth(gpu.memory_bandwidth_bytes_per_s),
      m_peaks(gpu.flops_per_s), m_source(std::move(source)) {
  m_profile.prepare();
  for (std::size_t t = 0; t < m_peak_of.size(); ++t) {
    auto pick = peak_flops(m_peaks, static_cast<DType>(t));
    if (!pick) {
      pick = m_peaks.bf16 ? m_peaks.bf16 : m_peaks.fp16;
    }
    m_peak_of[t] = pick.value_or(0);
  }
}

double Estimator::attention_s(const Kernels& k, DType math, double flops, double weights,
                              double activations, double kv, CurveMemo* memo) const {
  // The decode sequences (one query token or a few) run the decode kernel, bound by the cache
  // they read; the prefill and extend ones the prefill kernel, bound by compute against their
  // length. Weights (DSA's indexer projections) are GEMMs over the new tokens, shared like
  // the activations and streamed at the bf16 GEMM's fraction.
  const AttentionSums* s = k.sums;
  double prefill_query = s ? s->prefill_query : 0;
  double p = peak(math);
  auto stream_s = [&](const Share& x) {
    return x.weights / (m_profile.gemm_bf16.stream * m_bandwidth);
  };
  // The decode kernel over its share: its floor, and the KV it reads at the curve's efficiency
  // for the bytes of one call.
  auto decode_s = [&](const Share& x) {
    const auto& a = is_fp8(k.kv) ? m_profile.decode_fp8 : m_profile.decode_bf16;
    double per_call = (x.kv > 0 ? x.kv : x.activations) / std::max(k.calls, 1.0);
    double compute = p > 0 ? x.flops / (a.compute * p) : 0;
    double memory =
        (x.kv + x.activations) / (read(a.bandwidth, per_call, memo) * m_bandwidth) + stream_s(x);
    return k.calls * a.floor_s + std::max(compute, memory);
  };
  if (prefill_query == 0) {
    return decode_s({flops, weights, activations, kv}); // decode sequences only
  }
  auto part = [](double whole, double prefill, double total) {
    return total > 0 ? whole * prefill / total : 0;
  };
  Share prefill{part(flops, s->prefill_attended, s->attended),
                part(weights, s->prefill_query, s->query),
                part(activations, s->prefill_query, s->query), part(kv, s->prefill_held, s->held)};
  Share decode{flops - prefill.flops, weights - prefill.weights, activations - prefill.activations,
               kv - prefill.kv};
  double total = s->query > prefill_query ? decode_s(decode) : 0;
  const auto& a = is_fp8(math) ? m_profile.prefill_fp8 : m_profile.prefill_bf16;
  double length = 2 * s->prefill_attended / prefill_query; // t_eff = length / 2 on average
  double compute = p > 0 ? prefill.flops / (read(a.compute, length, memo) * p) : 0;
  double memory =
      (prefill.kv + prefill.activations) / (m_profile.elementwise.bandwidth * m_bandwidth) +
      stream_s(prefill);
  return total + k.calls * a.floor_s + std::max(compute, memory);
}

double Estimator::collective_s(const Collective& c, const Topology& links, bool graph) const {
  if (c.time_s <= 0) {
    return 0;
  }
  const EfficiencyProfile::Links& eta = m_profile.links;
  if (c.kind == CollectiveKind::all_reduce && c.domains == 1) {
    const auto& tables = graph ? m_profile.all_reduce_graph : m_profile.all_reduce_eager;
    if (auto t = all_reduce_time(tables, c.group, c.message_bytes)) {
      return std::max(*t, c.time_s); // a measured time below the link's bound is another link's
    }
  }
  double up_eta = c.kind == CollectiveKind::dispatch  ? eta.dispatch
                  : c.kind == CollectiveKind::combine ? eta.combine
                                                      : eta.scale_up;
  double up = c.up_bytes > 0 ? c.up_bytes / (up_eta * links.up_bytes_per_s) : 0;
  double out = c.out_bytes > 0 ? c.out_bytes / (eta.scale_out * links.out_bytes_per_s) : 0;
  // An exchange moves over both links at once; the other collectives cross them in turn.
  bool concurrent = c.kind == CollectiveKind::dispatch || c.kind == CollectiveKind::combine;
  return c.latency_s + (concurrent ? std::max(up, out) : up + out);
}

EstimateChoice choose_estimator(const Gpu& gpu, const DeviceProfile* measured) {
  EstimateChoice out;
  if (measured && measured->efficiency) {
    out.note = "device profile " + measured->file + " (" + measured->backend + ", " +
               measured->device + ")";
    out.estimator = std::make_shared<const Estimator>(*measured->efficiency, gpu, out.note);
    return out;
  }
  if (auto typical = typical_profile(gpu)) {
    const DeviceProfile& p = *typical->profile;
    out.note = "typical " + p.device + " profile, " + p.file + " (" + typical->how + ")";
    // The all-reduce tables are times over the measured GPU's own link: a GPU whose link
    // differs prices its all-reduces at the links' fractions instead.
    EfficiencyProfile e = *p.efficiency;
    std::optional<Gpu> tables_gpu;
    try {
      tables_gpu = device_of_profile(p, GpuCatalog());
    } catch (const InputError&) {
      tables_gpu.reset();
    }
    if (!tables_gpu || tables_gpu->interconnect_bytes_per_s != gpu.interconnect_bytes_per_s) {
      e.all_reduce_graph.clear();
      e.all_reduce_eager.clear();
      out.note += "; its all-reduce tables were measured over another link, so all-reduces are "
                  "priced at the link's measured fraction";
    }
    out.estimator = std::make_shared<const Estimator>(std::move(e), gpu, out.note);
    return out;
  }
  std::string covered;
  for (const DeviceProfile& p : typical_profiles()) {
    for (const auto& [name, how] : p.applies_to) {
      covered += (covered.empty() ? "" : ", ") + name;
    }
  }
  out.note = "no estimate for " + gpu.name +
             ": no published kernel measurements cover it (typical profiles cover " + covered +
             "); a --device-profile with an efficiency section gives one";
  return out;
}

} // namespace kvcalc::roofline
