// The efficiency curves of a device profile fitted from measure's sweeps (docs/device-profile.md,
// "What `kvcalc measure` writes").

#include <kvcalc/measure/measure.hpp>

#include <algorithm>
#include <map>

#include <fmt/format.h>

using namespace kvcalc::device;

namespace kvcalc::measure {

namespace {

/// The least-squares line y = a + b·x through the points.
struct Line {
  double a = 0;
  double b = 0;
};

std::optional<Line> fit_line(const std::vector<std::pair<double, double>>& points) {
  if (points.size() < 2) {
    return std::nullopt;
  }
  double n = static_cast<double>(points.size());
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (auto [x, y] : points) {
    sx += x;
    sy += y;
    sxx += x * x;
    sxy += x * y;
  }
  double denominator = n * sxx - sx * sx;
  if (!(denominator > 0)) {
    return std::nullopt; // every x the same
  }
  Line l;
  l.b = (n * sxy - sx * sy) / denominator;
  l.a = (sy - l.b * sx) / n;
  if (!(l.b > 0)) {
    return std::nullopt; // time that does not rise with bytes says nothing of bandwidth
  }
  return l;
}

/// A floor within what a profile takes (0 to 1 ms) and an efficiency within (0, 1].
double floor_of(double intercept) {
  return std::clamp(intercept, 0.0, 1e-3);
}
double efficiency_of(double value) {
  return std::clamp(value, 1e-6, 1.0);
}

} // namespace

double TimedGemm::flops() const {
  return calls * 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
}

double TimedGemm::bytes() const {
  double mm = static_cast<double>(m), nn = static_cast<double>(n), kk = static_cast<double>(k);
  return calls * (nn * kk + mm * kk + mm * nn) * element_bytes;
}

std::vector<TimedGemm> sweep_gemms(const std::string& dtype, double element_bytes, double calls,
                                   const std::vector<u64>& sizes, const std::vector<u64>& rows,
                                   const std::function<Spread(const TimedGemm&)>& time) {
  std::vector<TimedGemm> out;
  auto add = [&](u64 m, u64 nk) {
    TimedGemm& g = out.emplace_back();
    g.dtype = dtype;
    g.m = m;
    g.n = nk;
    g.k = nk;
    g.element_bytes = element_bytes;
    g.calls = calls;
    g.time_s = time(g);
  };
  for (u64 nk : sizes) {
    add(1, nk);
  }
  for (u64 m : rows) {
    add(m, sizes.back());
  }
  return out;
}

std::optional<GemmEfficiency> fit_gemm(const std::vector<TimedGemm>& calls, double peak,
                                       double bandwidth) {
  std::vector<std::pair<double, double>> small;
  for (const TimedGemm& g : calls) {
    if (g.m <= 16) {
      small.emplace_back(g.bytes(), g.time_s.median);
    }
  }
  std::optional<Line> line = fit_line(small);
  if (!line || !(peak > 0) || !(bandwidth > 0)) {
    return std::nullopt;
  }
  GemmEfficiency e;
  e.floor_s = floor_of(line->a);
  e.stream = efficiency_of(1.0 / (line->b * bandwidth));
  // A compute point only where the call took clearly longer than streaming its bytes would
  // (a quarter more): a call still bound by its weights says nothing of compute.
  std::map<u64, std::vector<double>> by_rows;
  for (const TimedGemm& g : calls) {
    double beyond = g.time_s.median - e.floor_s;
    double streaming = g.bytes() / (e.stream * bandwidth);
    if (g.m >= 256 && beyond > 1.25 * streaming) {
      by_rows[g.m].push_back(g.flops() / (beyond * peak));
    }
  }
  for (auto& [rows, etas] : by_rows) {
    e.compute.x.push_back(static_cast<double>(rows));
    e.compute.y.push_back(efficiency_of(kernels::median(etas)));
  }
  if (e.compute.x.empty()) {
    return std::nullopt;
  }
  return e;
}

std::optional<EfficiencyProfile::Elementwise> fit_passes(const std::vector<TimedPass>& passes,
                                                         double bandwidth) {
  std::vector<std::pair<double, double>> points;
  for (const TimedPass& p : passes) {
    points.emplace_back(p.bytes, p.time_s.median);
  }
  std::optional<Line> line = fit_line(points);
  if (!line || !(bandwidth > 0)) {
    return std::nullopt;
  }
  return EfficiencyProfile::Elementwise{floor_of(line->a),
                                        efficiency_of(1.0 / (line->b * bandwidth))};
}

std::optional<EfficiencyProfile::MlaDecode>
fit_mla_decode(const std::vector<KernelMeasurement>& kernels, double bandwidth, double peak) {
  std::vector<std::pair<double, double>> points;
  double best_rate = 0;
  for (const KernelMeasurement& k : kernels) {
    if (k.name == "mla_decode.absorbed") {
      // The memory-bound configurations give the line; any gives the best FLOP rate.
      if (k.bound == "memory") {
        points.emplace_back(k.cost.bytes, k.time_s.median);
      }
      best_rate = std::max(best_rate, k.achieved_flops_per_s);
    }
  }
  std::optional<Line> line = fit_line(points);
  if (!line || !(bandwidth > 0) || !(peak > 0)) {
    return std::nullopt;
  }
  return EfficiencyProfile::MlaDecode{floor_of(line->a), efficiency_of(1.0 / (line->b * bandwidth)),
                                      efficiency_of(best_rate / peak)};
}

EfficiencyProfile measured_efficiency(const MeasureResult& r, const Gpu& datasheet,
                                      const EfficiencyProfile* fallback,
                                      const std::string& fallback_name) {
  // What is not measured: the typical profile's, or at the bound.
  EfficiencyProfile e;
  if (fallback) {
    e = *fallback;
  } else {
    for (GemmEfficiency* g : {&e.gemm_bf16, &e.gemm_fp8, &e.gemm_fp8_block}) {
      *g = {0, 1, {{1}, {1}}};
    }
    e.grouped = {0, 1, {{1}, {1}}, {{1}, {1}}};
    e.decode_bf16 = {0, {{1}, {1}}, 1};
    e.decode_fp8 = e.decode_bf16;
    e.mla_decode = {0, 1, 1};
    e.prefill_bf16 = {0, {{1}, {1}}};
    e.prefill_fp8 = e.prefill_bf16;
    e.elementwise = {0, 1};
    e.all_reduce_graph.clear();
    e.all_reduce_eager.clear();
    e.links = {1, 1, 1, 1};
    e.step_overhead_s = 0;
  }
  double bandwidth = datasheet.memory_bandwidth_bytes_per_s;
  auto peak = [&](const std::string& dtype) {
    const PeakFlops& f = datasheet.flops_per_s;
    std::optional<double> v = dtype == "fp32" ? f.fp32 : dtype == "fp16" ? f.fp16 : f.bf16;
    return v.value_or(0);
  };
  std::vector<std::string> measured;
  // Each dtype's GEMM sweep; the bf16 curve takes the 16-bit one (fp32 on a CPU, whose bf16
  // weights are widened to fp32).
  std::map<std::string, std::vector<TimedGemm>> gemms;
  for (const TimedGemm& g : r.sweeps.gemm) {
    gemms[g.dtype].push_back(g);
  }
  for (const char* dtype : {"bf16", "fp32"}) {
    auto calls = gemms.find(dtype);
    if (calls == gemms.end()) {
      continue;
    }
    if (auto fit = fit_gemm(calls->second, peak(dtype), bandwidth)) {
      e.gemm_bf16 = *fit;
      measured.push_back(std::string("GEMM (") + dtype + " sweep)");
      break;
    }
  }
  if (auto fit = fit_passes(r.sweeps.passes, bandwidth)) {
    e.elementwise = *fit;
    measured.push_back("elementwise (memory passes)");
  }
  if (auto fit =
          fit_mla_decode(r.kernels, bandwidth, peak(r.backend == "cuda" ? "bf16" : "fp32"))) {
    e.mla_decode = *fit;
    measured.push_back("MLA decode (the absorbed kernels)");
  }
  std::string joined;
  for (const std::string& m : measured) {
    joined += (joined.empty() ? "" : ", ") + m;
  }
  e.source = fmt::format("kvcalc measure ({}, {}): {} measured; the rest {}", r.backend, r.date,
                         joined.empty() ? "nothing" : joined,
                         fallback ? "from the " + fallback_name
                                  : std::string("at the bound (floor 0, efficiency 1)"));
  return e;
}

} // namespace kvcalc::measure
