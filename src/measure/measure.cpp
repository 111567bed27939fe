#include <kvcalc/measure/measure.hpp>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>
#include <optional>
#include <sstream>

#include <fmt/format.h>

#include <kvcalc/core/error.hpp>
#include <kvcalc/core/spell.hpp>
#include <kvcalc/core/units.hpp>

#include "backends.hpp"

using namespace kvcalc::device;

namespace kvcalc::measure {

namespace {
// DeepSeek MLA dimensions the kernels use.
constexpr double k_dc = 512;
constexpr double k_dr = 64;
constexpr double k_dnope = 128;
constexpr double k_dv = 128;
constexpr double k_page_tokens = 64; // the kernels' cache block
} // namespace

std::vector<KernelStep> mla_kernel_steps(const MlaKernelConfig& c, bool naive, double w) {
  double b = static_cast<double>(c.batch);
  double h = static_cast<double>(c.heads);
  double s = static_cast<double>(c.query);
  double t = static_cast<double>(c.context);
  double rows = b * s * h;
  double latent = b * t * (k_dc + k_dr) * w;
  if (naive) {
    KernelCost k;
    k.flops = 2 * b * t * k_dc * h * (k_dnope + k_dv) + 2 * rows * t * (k_dnope + k_dr) +
              2 * rows * t * k_dv;
    // Per head, the decompressed K and V are written and read back.
    k.bytes = latent + h * k_dc * (k_dnope + k_dv) * w + rows * (k_dnope + k_dr + k_dv) * w +
              2 * b * h * t * (k_dnope + k_dv) * w;
    return {{"decode", k}};
  }
  KernelCost q_absorb;
  q_absorb.flops = 2 * rows * k_dnope * k_dc;
  q_absorb.bytes = h * k_dc * k_dnope * w + rows * (k_dnope + k_dr) * w;
  KernelCost attention;
  attention.score_flops = 2 * rows * t * (k_dc + k_dr);
  attention.value_flops = 2 * rows * t * k_dc;
  attention.flops = attention.score_flops + attention.value_flops;
  attention.bytes = latent;
  KernelCost w_uv;
  w_uv.flops = 2 * rows * k_dc * k_dv;
  w_uv.bytes = h * k_dc * k_dv * w + rows * k_dv * w;
  return {{"q_absorb", q_absorb}, {"attention", attention}, {"w_uv", w_uv}};
}

KernelCost mla_kernel_cost(const MlaKernelConfig& c, bool naive, double w) {
  KernelCost total;
  for (const KernelStep& step : mla_kernel_steps(c, naive, w)) {
    total.flops += step.cost.flops;
    total.bytes += step.cost.bytes;
    total.score_flops += step.cost.score_flops;
    total.value_flops += step.cost.value_flops;
  }
  return total;
}

double mla_inputs_bytes(const MlaKernelConfig& c, double w) {
  double pages = std::ceil(static_cast<double>(c.context) / k_page_tokens);
  double b = static_cast<double>(c.batch);
  double h = static_cast<double>(c.heads);
  double s = static_cast<double>(c.query);
  return b * pages * k_page_tokens * (k_dc + k_dr) * w + h * k_dc * (k_dnope + k_dv) * w +
         b * s * h * (k_dnope + k_dr) * 4;
}

double relative_spread(const Spread& s) {
  return s.median > 0 ? (s.max - s.min) / s.median : 0;
}

bool disagrees(const Spread& s) {
  return relative_spread(s) > k_spread_bound;
}

const MemoryLevel& ProbeResults::level_holding(double bytes) const {
  if (levels.empty()) {
    throw Error("the probes measured no memory level");
  }
  for (const MemoryLevel& level : levels) {
    if (level.shared && level.capacity_bytes > 0 && bytes <= level.capacity_bytes) {
      return level;
    }
  }
  return levels.back();
}

double MeasureBackend::compute_seconds(const MlaKernelConfig& /*config*/, const KernelCost& cost,
                                       bool /*naive*/, const ProbeResults& probes) const {
  PeakFlops peaks = probes.gemm_flops_per_s();
  double gemm = peaks.bf16 ? *peaks.bf16 : peaks.fp32.value_or(0);
  return gemm > 0 ? cost.flops / gemm : 0.0;
}

PeakFlops ProbeResults::gemm_flops_per_s() const {
  PeakFlops p;
  auto median = [](const std::optional<Spread>& s) -> std::optional<double> {
    return s ? std::optional<double>(s->median) : std::nullopt;
  };
  p.fp32 = median(gemm.fp32);
  p.fp16 = median(gemm.fp16);
  p.bf16 = median(gemm.bf16);
  return p;
}

std::optional<Spread> ProbeResults::absorbed_page_at(u64 rows) const {
  for (const RowsRate& r : absorbed_page_flops_per_s) {
    if (r.rows == rows) {
      return r.flops_per_s;
    }
  }
  return std::nullopt;
}

std::vector<std::pair<std::string, Spread>> ProbeResults::figures() const {
  std::vector<std::pair<std::string, Spread>> out;
  // The cache levels; main memory is the read probe below.
  for (std::size_t i = 0; i + 1 < levels.size(); ++i) {
    out.emplace_back("read_" + ascii_lower(levels[i].name) + "_bytes_per_s",
                     levels[i].read_bytes_per_s);
  }
  out.insert(out.end(), {{"read_bytes_per_s", read_bytes_per_s},
                         {"copy_bytes_per_s", copy_bytes_per_s},
                         {"triad_bytes_per_s", triad_bytes_per_s},
                         {"fma_fp32_flops_per_s", fma_flops_per_s}});
  if (fma_bf16_flops_per_s) {
    out.emplace_back("fma_bf16_flops_per_s", *fma_bf16_flops_per_s);
  }
  for (const auto& [key, rate] : {std::pair{"gemm_fp32_flops_per_s", gemm.fp32},
                                  std::pair{"gemm_kernel_fp32_flops_per_s", kernel_gemm_fp32},
                                  std::pair{"gemm_fp16_flops_per_s", gemm.fp16},
                                  std::pair{"gemm_bf16_flops_per_s", gemm.bf16}}) {
    if (rate) {
      out.emplace_back(key, *rate);
    }
  }
  for (const RowsRate& page : absorbed_page_flops_per_s) {
    out.emplace_back(fmt::format("absorbed_page_{}_rows_flops_per_s", page.rows), page.flops_per_s);
  }
  return out;
}

namespace {

/// One figure of two probe passes: the faster pass's median (a ceiling is the fastest the
/// machine ran while the kernels did), and the extremes and runs of both, so a machine whose
/// speed changed between the passes shows a wide spread.
Spread both_passes(const Spread& a, const Spread& b) {
  return {std::max(a.median, b.median), std::min(a.min, b.min), std::max(a.max, b.max),
          a.runs + b.runs};
}

std::optional<Spread> both_passes(const std::optional<Spread>& a, const std::optional<Spread>& b) {
  if (a && b) {
    return both_passes(*a, *b);
  }
  return a ? a : b;
}

ProbeResults both_passes(ProbeResults a, const ProbeResults& b) {
  a.read_bytes_per_s = both_passes(a.read_bytes_per_s, b.read_bytes_per_s);
  a.copy_bytes_per_s = both_passes(a.copy_bytes_per_s, b.copy_bytes_per_s);
  a.triad_bytes_per_s = both_passes(a.triad_bytes_per_s, b.triad_bytes_per_s);
  a.fma_flops_per_s = both_passes(a.fma_flops_per_s, b.fma_flops_per_s);
  a.fma_bf16_flops_per_s = both_passes(a.fma_bf16_flops_per_s, b.fma_bf16_flops_per_s);
  a.gemm.fp32 = both_passes(a.gemm.fp32, b.gemm.fp32);
  a.gemm.fp16 = both_passes(a.gemm.fp16, b.gemm.fp16);
  a.gemm.bf16 = both_passes(a.gemm.bf16, b.gemm.bf16);
  a.kernel_gemm_fp32 = both_passes(a.kernel_gemm_fp32, b.kernel_gemm_fp32);
  for (RowsRate& page : a.absorbed_page_flops_per_s) {
    page.flops_per_s = both_passes(std::optional(page.flops_per_s), b.absorbed_page_at(page.rows))
                           .value_or(page.flops_per_s);
  }
  for (std::size_t i = 0; i < a.levels.size() && i < b.levels.size(); ++i) {
    a.levels[i].read_bytes_per_s =
        both_passes(a.levels[i].read_bytes_per_s, b.levels[i].read_bytes_per_s);
  }
  return a;
}

} // namespace

MeasureResult run_measure(MeasureBackend& backend, const MeasureOptions& options) {
  // Progress as n/N: the probes, each kernel run, the probes again.
  std::size_t total =
      3 + 2 * options.heads.size() * options.batches.size() * options.contexts.size();
  std::size_t done = 0;
  auto say = [&](const std::string& what) {
    ++done;
    if (options.progress) {
      options.progress(fmt::format("[{}/{}] {}", done, total, what));
    }
  };
  MeasureResult r;
  r.backend = backend.name();
  r.device = backend.device();
  r.threads = backend.threads();
  std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char date[16];
  std::strftime(date, sizeof date, "%Y-%m-%d", &utc);
  r.date = r.backend == "fake" ? "1970-01-01" : date;

  std::vector<MlaKernelConfig> configs;
  for (u64 h : options.heads) {
    for (u64 b : options.batches) {
      for (u64 t : options.contexts) {
        configs.push_back({h, b, t, options.query});
      }
    }
  }
  double available = backend.memory_available_bytes();
  for (const MlaKernelConfig& c : configs) {
    double need = backend.memory_needed_bytes(c);
    if (need > available) {
      throw InputError(fmt::format(
          "heads {}, batch {}, context {}: the kernels need {:.1f} GiB (their inputs, the "
          "latent cache in pages of 64 tokens, W_UK and W_UV and the queries, take {:.1f}), "
          "more than the {:.1f} GiB of memory available on {}; lower --batch, --context or "
          "--heads",
          group_digits(c.heads), group_digits(c.batch), group_digits(c.context),
          need / 1073741824.0, mla_inputs_bytes(c, backend.bytes_per_element()) / 1073741824.0,
          available / 1073741824.0, backend.device()));
    }
  }

  // The probes run before and after the kernels, so the ceilings cover the time the kernels
  // ran in (both_passes); the bounds are worked out once both passes are in.
  say("measuring the bandwidth and compute probes");
  ProbeResults before = backend.probe(options.quick, configs);
  for (const MlaKernelConfig& c : configs) {
    for (bool naive : {false, true}) {
      KernelMeasurement& k = r.kernels.emplace_back();
      k.name = naive ? "mla_decode.naive" : "mla_decode.absorbed";
      k.config = c;
      say(fmt::format("timing {}, heads {}, batch {}, context {}", k.name, c.heads, c.batch,
                      c.context));
      KernelRun run = backend.run_mla(c, naive, options.quick);
      k.time_s = run.time_s;
      k.phases = run.phases;
      k.max_abs_error = run.max_abs_error;
      k.cos_diff = run.cos_diff;
      k.cost = mla_kernel_cost(c, naive, backend.bytes_per_element());
      k.achieved_bytes_per_s = k.cost.bytes / run.time_s.median;
      k.achieved_flops_per_s = k.cost.flops / run.time_s.median;
      k.working_set_bytes = mla_inputs_bytes(c, backend.bytes_per_element());
    }
  }
  say("sweeping GEMMs and memory passes for the efficiency curves");
  r.sweeps = backend.sweep(options.quick);
  say("measuring the probes again");
  r.probes = both_passes(std::move(before), backend.probe(options.quick, configs));
  r.probes.bandwidth_bytes_per_s = r.probes.read_bytes_per_s.median;
  if (r.probes.levels.empty()) {
    r.probes.levels.push_back({"main memory", 0, 0, r.probes.read_bytes_per_s});
  }

  for (KernelMeasurement& k : r.kernels) {
    const MemoryLevel& level = backend.flushes_caches()
                                   ? r.probes.levels.back()
                                   : r.probes.level_holding(k.working_set_bytes);
    k.memory_level = level.name;
    // A bound is never slower than a level further out: a cache probe that read below main
    // memory (a noisy run) does not bound the kernel below what main memory gives.
    k.memory_bytes_per_s = 0;
    for (std::size_t i = static_cast<std::size_t>(&level - r.probes.levels.data());
         i < r.probes.levels.size(); ++i) {
      k.memory_bytes_per_s =
          std::max(k.memory_bytes_per_s, r.probes.levels[i].read_bytes_per_s.median);
    }
    bool naive = k.name == "mla_decode.naive";
    double compute_bound_s = 0;
    for (const KernelStep& step : mla_kernel_steps(k.config, naive, backend.bytes_per_element())) {
      double memory = step.cost.bytes / k.memory_bytes_per_s;
      double compute = backend.compute_seconds(k.config, step.cost, naive, r.probes);
      k.memory_time_s += memory;
      k.compute_time_s += compute;
      k.predicted_time_s += std::max(memory, compute);
      compute_bound_s += compute >= memory ? compute : 0;
    }
    k.bound = 2 * compute_bound_s >= k.predicted_time_s ? "compute" : "memory";
    k.roofline_fraction = k.predicted_time_s / k.time_s.median;
  }
  return r;
}

namespace {

/// The efficiency section of `p`, fitted from its measurement against the datasheet of the GPU
/// measured (a CPU's, or the fake device's, own measured ceilings); the classes not measured
/// from the GPU's typical profile where it has one. A GPU the catalog does not know keeps none.
void attach_efficiency(DeviceProfile& p, const MeasureResult& r) {
  Gpu datasheet;
  if (r.backend == "cuda") {
    try {
      datasheet = device_of_profile(p, GpuCatalog());
    } catch (const InputError&) {
      return; // not in the catalog: nothing to take fractions of
    }
  } else {
    datasheet.name = r.backend;
    datasheet.memory_bandwidth_bytes_per_s = p.bandwidth_bytes_per_s;
    datasheet.flops_per_s = p.flops_per_s;
    if (!datasheet.flops_per_s.bf16) {
      datasheet.flops_per_s.bf16 = datasheet.flops_per_s.fp32; // bf16 widened to fp32
    }
  }
  std::optional<TypicalProfile> typical = typical_profile(datasheet);
  p.efficiency = measured_efficiency(
      r, datasheet, typical ? &*typical->profile->efficiency : nullptr,
      typical ? "typical " + typical->profile->device + " profile" : std::string());
}

} // namespace

DeviceProfile to_device_profile(const MeasureResult& r, std::string file) {
  DeviceProfile p;
  p.file = std::move(file);
  p.device = r.device;
  p.backend = r.backend;
  p.date = r.date;
  p.bandwidth_bytes_per_s = r.probes.bandwidth_bytes_per_s;
  p.flops_per_s = r.probes.gemm_flops_per_s();
  std::ostringstream y;
  auto num = [](double v) { return fmt::format("{:.6g}", v); };
  // One figure's runs: median, extremes, count, and whether they disagree beyond the bound.
  auto spread = [&](const Spread& s) {
    return fmt::format("{{median: {}, min: {}, max: {}, runs: {}, spread: {}, disagree: {}}}",
                       num(s.median), num(s.min), num(s.max), s.runs, num(relative_spread(s)),
                       disagrees(s) ? "true" : "false");
  };
  y << "machine:\n  threads: " << r.threads << "\n";
  y << "spread_bound: " << num(k_spread_bound) << "\n";
  y << "memory_levels:\n";
  for (const MemoryLevel& level : r.probes.levels) {
    y << "  - {name: " << level.name << ", capacity_bytes: "
      << (level.capacity_bytes > 0 ? num(level.capacity_bytes) : std::string("null"))
      << ", shared: " << (level.shared ? "true" : "false")
      << ", working_set_bytes: " << num(level.working_set_bytes)
      << ", read_bytes_per_s: " << num(level.read_bytes_per_s.median) << "}\n";
  }
  y << "probes:\n";
  for (const auto& [key, s] : r.probes.figures()) {
    y << "  " << key << ": " << spread(s) << "\n";
  }
  y << "kernels:\n";
  for (const auto& k : r.kernels) {
    y << "  - {name: " << k.name << ", heads: " << k.config.heads << ", batch: " << k.config.batch
      << ", context: " << k.config.context << ", query: " << k.config.query
      << ", memory_level: " << k.memory_level << ", roofline_fraction: " << num(k.roofline_fraction)
      << ", time_s: " << spread(k.time_s) << "}\n";
  }
  p.details_yaml = y.str();
  if (!r.sweeps.empty()) {
    attach_efficiency(p, r);
  }
  return p;
}

} // namespace kvcalc::measure
