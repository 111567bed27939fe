// estimate_accuracy: how far the roofline's estimate (src/roofline/estimate.cpp) lands from the
// kernel- and link-level measurements the typical profiles (src/device/profiles/) were derived
// from. Not a test: built with the tests, run by hand, never by CTest; docs/accuracy.md copies
// its output.
//
//   ninja -C build/rel kvcalc_estimate_accuracy && build/rel/tests/kvcalc_estimate_accuracy
//
// For each curve and table of each typical profile it prints the leave-one-out error (every
// interior point dropped, the curve rebuilt from the others and evaluated there), and the whole
// model, through Estimator::op_s, against published example rows that no curve point is.
// Every measured figure below is quoted from its primary source, named beside it; the curves
// themselves come from the compiled-in profiles.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include <kvcalc/device/efficiency.hpp>
#include <kvcalc/device/gpu.hpp>
#include <kvcalc/device/profile.hpp>
#include <kvcalc/roofline/estimate.hpp>
#include <kvcalc/roofline/roofline.hpp>

using namespace kvcalc;
using namespace kvcalc::device;
using namespace kvcalc::roofline;

namespace {

// The aiconfigurator silicon database: NVIDIA's measured per-kernel latencies, at
// ai-dynamo/aiconfigurator@095f58a51c4ca8e61b66ec108d86f223f8d559ce, under
// aic-core/src/aiconfigurator_core/systems/data/<gpu>_sxm/<op>/trtllm/1.3.0rc20/ (TRT-LLM
// 1.3.0rc20 kernels, replayed in a CUDA graph) and .../<gpu>_sxm/comm/nccl/2.29.2/.

/// |errors| of one class, for the summary.
std::map<std::string, std::vector<double>> g_summary;

double median(std::vector<double> v) {
  if (v.empty()) {
    return 0;
  }
  std::sort(v.begin(), v.end());
  std::size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double max_of(const std::vector<double>& v) {
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

std::string time_text(double s) {
  char buf[32];
  if (s >= 1e-3) {
    std::snprintf(buf, sizeof buf, "%.3f ms", s * 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.1f µs", s * 1e6);
  }
  return buf;
}

/// Bytes in powers of 1000 (the decode-attention sources' 8 MB … 4 GB).
std::string si_bytes(double b) {
  char buf[32];
  if (b >= 1e9) {
    std::snprintf(buf, sizeof buf, "%.4g GB", b / 1e9);
  } else {
    std::snprintf(buf, sizeof buf, "%.4g MB", b / 1e6);
  }
  return buf;
}

/// Bytes in powers of 1024 (the all-reduce tables: KB = 1024 bytes).
std::string iec_bytes(double b) {
  char buf[32];
  if (b >= 1 << 20) {
    std::snprintf(buf, sizeof buf, "%g MiB", b / (1 << 20));
  } else {
    std::snprintf(buf, sizeof buf, "%g KiB", b / (1 << 10));
  }
  return buf;
}

std::string percent(double e) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%+.1f%%", e * 100);
  return buf;
}

/// Prints a curve's median and largest |error| and files them under `cls` for the summary.
void summarize(const std::string& cls, const std::vector<double>& errors) {
  std::vector<double> a;
  for (double e : errors) {
    a.push_back(std::fabs(e));
  }
  std::printf("    median |error| %.1f%%, max %.1f%% (%zu points)\n", median(a) * 100,
              max_of(a) * 100, a.size());
  auto& all = g_summary[cls];
  all.insert(all.end(), a.begin(), a.end());
}

Curve without(const Curve& c, std::size_t i) {
  Curve out = c;
  out.x.erase(out.x.begin() + static_cast<std::ptrdiff_t>(i));
  out.y.erase(out.y.begin() + static_cast<std::ptrdiff_t>(i));
  return out;
}

LatencyTable without(const LatencyTable& t, std::size_t i) {
  LatencyTable out = t;
  out.bytes.erase(out.bytes.begin() + static_cast<std::ptrdiff_t>(i));
  out.time_s.erase(out.time_s.begin() + static_cast<std::ptrdiff_t>(i));
  return out;
}

/// A typical profile and its GPU's datasheet, as the roofline pairs them.
struct Device {
  const char* name; ///< catalog name
  Gpu gpu;
  const DeviceProfile* profile = nullptr;
  [[nodiscard]] const EfficiencyProfile& eff() const { return *profile->efficiency; }
  [[nodiscard]] Estimator estimator(const EfficiencyProfile& e) const {
    return Estimator(e, gpu, profile->file);
  }
  [[nodiscard]] double bandwidth() const { return gpu.memory_bandwidth_bytes_per_s; }
};

Device typical_device(const GpuCatalog& catalog, const char* name) {
  Device d{name, catalog.find(name)};
  d.profile = typical_profile(d.gpu)->profile;
  return d;
}

// ---------------------------------------------------------------------------------------------
// Decode attention: the whole-call HBM fraction the source gives against KV bytes per call.

struct DecodeSource {
  const char* gpu;
  DType kv;
  double source_bandwidth; ///< what the source's fractions are of
  std::vector<double> bytes;
  std::vector<double> eta; ///< whole call: B / (t · source_bandwidth)
};

// Median HBM fraction of TRT-LLM generation attention (GQA, head dim 128, group ≤ 8) against
// the KV bytes one call reads, derived from
// aiconfigurator@095f58a .../<gpu>_sxm/attention/trtllm/1.3.0rc20/generation_attention_perf.parquet
// (h100_sxm, h200_sxm, b200_sxm). The B200's fractions are of 8.0 TB/s.
const std::vector<DecodeSource> k_decode_sources = {
    {"h100-sxm",
     DType::bf16,
     3.35e12,
     {8e6, 32e6, 128e6, 512e6, 2e9, 4e9},
     {0.17, 0.36, 0.58, 0.83, 0.90, 0.91}},
    {"h100-sxm",
     DType::fp8_e4m3,
     3.35e12,
     {8e6, 32e6, 128e6, 512e6, 2e9, 4e9},
     {0.19, 0.43, 0.64, 0.84, 0.76, 0.76}},
    {"h200",
     DType::bf16,
     4.8e12,
     {8e6, 32e6, 128e6, 512e6, 2e9, 4e9},
     {0.12, 0.25, 0.44, 0.75, 0.89, 0.90}},
    {"b200",
     DType::bf16,
     8.0e12,
     {8e6, 32e6, 128e6, 512e6, 2e9, 4e9},
     {0.08, 0.27, 0.51, 0.77, 0.88, 0.91}},
    {"b200",
     DType::fp8_e4m3,
     8.0e12,
     {8e6, 32e6, 128e6, 512e6, 2e9},
     {0.08, 0.25, 0.50, 0.76, 0.88}},
};

EfficiencyProfile::DecodeAttention& decode_curve(EfficiencyProfile& e, DType kv) {
  return kv == DType::bf16 ? e.decode_bf16 : e.decode_fp8;
}

/// One decode-attention call over `kv` bytes of cache, priced by `est` (no FLOPs: the call is
/// bound by the cache it reads).
double decode_call_s(const Estimator& est, DType kv_dtype, double kv) {
  Kernels k{.kind = KernelClass::attention, .calls = 1, .kv = kv_dtype};
  return est.op_s(k, DType::bf16, 0, 0, 0, kv);
}

void decode_leave_one_out(const std::vector<Device>& devices) {
  std::printf("\n== Decode attention: the bandwidth curve, leave one out ==\n");
  std::printf("Measured call time B / (eta * BW_source) against the estimate t0 + B / (eta' * "
              "BW_catalog),\neta' the profile's curve rebuilt without the point (interior "
              "points; the ends are not held out).\n'stored' is the full curve at the point: "
              "how well the profile reproduces its source.\n");
  for (const DecodeSource& s : k_decode_sources) {
    const Device& d = *std::find_if(devices.begin(), devices.end(),
                                    [&](const Device& x) { return std::string(x.name) == s.gpu; });
    EfficiencyProfile e = d.eff();
    const Curve full = decode_curve(e, s.kv).bandwidth;
    std::printf("\n  %s, %s KV (floor %s, source fractions of %.2f TB/s, catalog %.2f TB/s)\n",
                s.gpu, s.kv == DType::bf16 ? "bf16" : "fp8",
                time_text(decode_curve(e, s.kv).floor_s).c_str(), s.source_bandwidth / 1e12,
                d.bandwidth() / 1e12);
    std::printf("    %-8s %6s %10s %10s %8s %10s %8s\n", "KV/call", "eta", "measured", "stored",
                "error", "held out", "error");
    std::vector<double> errors;
    for (std::size_t i = 0; i < s.bytes.size(); ++i) {
      double b = s.bytes[i];
      double measured = b / (s.eta[i] * s.source_bandwidth);
      double stored = decode_call_s(d.estimator(d.eff()), s.kv, b);
      std::string held = "-";
      std::string held_error = "-";
      if (i > 0 && i + 1 < s.bytes.size()) {
        decode_curve(e, s.kv).bandwidth = without(full, i);
        double t = decode_call_s(d.estimator(e), s.kv, b);
        decode_curve(e, s.kv).bandwidth = full;
        held = time_text(t);
        held_error = percent(t / measured - 1);
        errors.push_back(t / measured - 1);
      }
      std::printf("    %-8s %6.2f %10s %10s %8s %10s %8s\n", si_bytes(b).c_str(), s.eta[i],
                  time_text(measured).c_str(), time_text(stored).c_str(),
                  percent(stored / measured - 1).c_str(), held.c_str(), held_error.c_str());
    }
    summarize("decode attention (leave one out)", errors);
  }
  std::printf(
      "\n  h200, fp8 KV: the profile takes the H100's FP8-KV curve scaled by the H200/H100 bf16 "
      "ratio (no H200 FP8-KV\n  rows), not the H200's bf16 curve: on the H100, where both "
      "exist, the bf16 curve would price the FP8-KV calls at:");
  // The borrowing's error where both curves were measured: H100 FP8-KV calls priced with the
  // H100's bf16 curve and the FP8 floor.
  const Device& h100 = devices[0];
  EfficiencyProfile e = h100.eff();
  e.decode_fp8.bandwidth = e.decode_bf16.bandwidth;
  const DecodeSource& fp8 = k_decode_sources[1];
  for (std::size_t i = 0; i < fp8.bytes.size(); ++i) {
    double measured = fp8.bytes[i] / (fp8.eta[i] * fp8.source_bandwidth);
    double t = decode_call_s(h100.estimator(e), DType::fp8_e4m3, fp8.bytes[i]);
    std::printf(" %s %s", si_bytes(fp8.bytes[i]).c_str(), percent(t / measured - 1).c_str());
  }
  std::printf("\n");
}

// ---------------------------------------------------------------------------------------------
// Prefill attention: compute efficiency against the sequence length.

struct PrefillSource {
  const char* gpu;
  bool fp8;
  std::vector<double> tokens;
  std::vector<double> eta; ///< of the dtype's dense peak, whole call
};

// Median compute fraction of TRT-LLM causal context FMHA (head dim 128, heads ≥ 8, batch
// 1–256, FLOPs = 2·b·h·d·s²) against s, derived from
// aiconfigurator@095f58a .../<gpu>_sxm/attention/trtllm/1.3.0rc20/context_attention_perf.parquet
// (h100_sxm, h200_sxm, b200_sxm). The H200 profile takes the H100's FP8 row.
const std::vector<PrefillSource> k_prefill_sources = {
    {"h100-sxm", false, {512, 1024, 2048, 4096, 8192, 16384}, {0.14, 0.24, 0.35, 0.43, 0.49, 0.53}},
    {"h100-sxm", true, {512, 1024, 2048, 4096, 8192, 16384}, {0.08, 0.14, 0.21, 0.28, 0.33, 0.37}},
    {"h200", false, {512, 1024, 2048, 4096, 8192, 16384}, {0.15, 0.25, 0.36, 0.44, 0.50, 0.53}},
    {"b200", false, {512, 1024, 2048, 4096, 8192, 16384}, {0.09, 0.16, 0.26, 0.36, 0.44, 0.50}},
    {"b200", true, {512, 1024, 2048, 4096, 8192, 16384}, {0.05, 0.10, 0.15, 0.21, 0.27, 0.32}},
};

void prefill_leave_one_out(const std::vector<Device>& devices) {
  std::printf("\n== Prefill attention: the compute curve, leave one out ==\n");
  std::printf("Time error of the compute term, eta_measured / eta_predicted - 1 (the floor "
              "aside: the source gives\nonly the median fraction, not the call times).\n");
  for (const PrefillSource& s : k_prefill_sources) {
    const Device& d = *std::find_if(devices.begin(), devices.end(),
                                    [&](const Device& x) { return std::string(x.name) == s.gpu; });
    const Curve& c = s.fp8 ? d.eff().prefill_fp8.compute : d.eff().prefill_bf16.compute;
    std::printf("\n  %s, %s\n", s.gpu, s.fp8 ? "fp8" : "bf16");
    std::printf("    %-7s %6s %7s %8s %9s %8s\n", "tokens", "eta", "stored", "error", "held out",
                "error");
    std::vector<double> errors;
    for (std::size_t i = 0; i < s.tokens.size(); ++i) {
      double stored = c.at(s.tokens[i]);
      char held[16] = "-";
      std::string held_error = "-";
      if (i > 0 && i + 1 < s.tokens.size()) {
        double p = without(c, i).at(s.tokens[i]);
        std::snprintf(held, sizeof held, "%.3f", p);
        held_error = percent(s.eta[i] / p - 1);
        errors.push_back(s.eta[i] / p - 1);
      }
      std::printf("    %-7.0f %6.2f %7.3f %8s %9s %8s\n", s.tokens[i], s.eta[i], stored,
                  percent(s.eta[i] / stored - 1).c_str(), held, held_error.c_str());
    }
    summarize("prefill attention (leave one out)", errors);
  }
}

// ---------------------------------------------------------------------------------------------
// All-reduce: the measured tables themselves.

// The profiles' tables are copied from aiconfigurator@095f58a:
//   graph: .../<gpu>_sxm/comm/trtllm/1.3.0rc20/custom_allreduce_perf.parquet (TRT-LLM custom
//          all-reduce, AllReduceStrategy.AUTO, bf16, in a CUDA graph);
//   eager: .../<gpu>_sxm/comm/nccl/2.29.2/nccl_perf.parquet (nccl-tests, fp16, 8 GPUs).
// Sizes in bytes, KB = 1024 bytes.

void table_leave_one_out(const LatencyTable& t) {
  std::vector<double> errors;
  std::printf("     ");
  for (std::size_t i = 1; i + 1 < t.bytes.size(); ++i) {
    double p = without(t, i).at(t.bytes[i]);
    double e = p / t.time_s[i] - 1;
    errors.push_back(e);
    std::printf(" %s %s", iec_bytes(t.bytes[i]).c_str(), percent(e).c_str());
  }
  std::printf("\n");
  summarize("all-reduce (leave one out)", errors);
}

/// Whether `t` is a table `from` holds too: a profile's rows borrowed from another GPU's.
bool borrowed(const Device& from, bool graph, const AllReduceTable& t) {
  const auto& theirs = graph ? from.eff().all_reduce_graph : from.eff().all_reduce_eager;
  return std::any_of(theirs.begin(), theirs.end(), [&](const AllReduceTable& o) {
    return o.gpus == t.gpus && o.table.bytes == t.table.bytes && o.table.time_s == t.table.time_s;
  });
}

void all_reduce_leave_one_out(const std::vector<Device>& devices) {
  std::printf("\n== All-reduce tables: leave one out (time error at each interior size) ==\n");
  for (const Device& d : devices) {
    for (bool graph : {true, false}) {
      const auto& tables = graph ? d.eff().all_reduce_graph : d.eff().all_reduce_eager;
      for (const AllReduceTable& t : tables) {
        std::printf("\n  %s, %s, %llu GPUs", d.name,
                    graph ? "CUDA graph (TRT-LLM custom)" : "eager (NCCL)",
                    static_cast<unsigned long long>(t.gpus));
        if (&d != &devices[0] && borrowed(devices[0], graph, t)) {
          std::printf(": the h100-sxm's table (no row of its own), above\n");
          continue;
        }
        std::printf("\n");
        table_leave_one_out(t.table);
      }
    }
  }
  // A group size between two measured ones (the B200's TP 4) is interpolated log-log in the
  // group size: held out on the H100, the one GPU with TP 2, 4 and 8 measured.
  const Device& h100 = devices[0];
  std::vector<AllReduceTable> ends;
  const AllReduceTable* four = nullptr;
  for (const AllReduceTable& t : h100.eff().all_reduce_graph) {
    if (t.gpus == 4) {
      four = &t;
    } else {
      ends.push_back(t);
    }
  }
  std::printf("\n  h100-sxm TP 4 held out, from TP 2 and TP 8 (the rule for a group size between "
              "two measured):\n     ");
  std::vector<double> errors;
  for (std::size_t i = 0; four && i < four->table.bytes.size(); ++i) {
    double b = four->table.bytes[i];
    double p = *all_reduce_time(ends, 4, b);
    errors.push_back(p / four->table.time_s[i] - 1);
    std::printf(" %s %s", iec_bytes(b).c_str(), percent(errors.back()).c_str());
  }
  std::printf("\n");
  summarize("all-reduce (group size held out)", errors);
  // The H200 profile borrows the H100's TP 2 and TP 4 rows; where both GPUs were measured
  // (TP 8), the H100's row against the H200's measurement.
  const Device& h200 = devices[1];
  for (bool graph : {true, false}) {
    const auto& a = graph ? h100.eff().all_reduce_graph : h100.eff().all_reduce_eager;
    const auto& b = graph ? h200.eff().all_reduce_graph : h200.eff().all_reduce_eager;
    std::printf("\n  h100-sxm's %s TP 8 row against the h200's measured one (the borrowing's "
                "error):\n     ",
                graph ? "graph" : "eager");
    errors.clear();
    const LatencyTable& mine = b.back().table;
    for (std::size_t i = 0; i < mine.bytes.size(); ++i) {
      double p = *all_reduce_time(a, 8, mine.bytes[i]);
      errors.push_back(p / mine.time_s[i] - 1);
      std::printf(" %s %s", iec_bytes(mine.bytes[i]).c_str(), percent(errors.back()).c_str());
    }
    std::printf("\n");
    summarize("all-reduce (H100 rows for the H200)", errors);
  }
}

// ---------------------------------------------------------------------------------------------
// Dense GEMM: the published example rows.

struct GemmRow {
  const char* gpu;
  const char* scheme; ///< bf16 | fp8 | fp8 block
  double n, k;
  std::vector<double> m;
  std::vector<double> time_s;
};

// TRT-LLM Linear (torch flow) latency under CUDA graph with L2-defeating weight copies, from
// aiconfigurator@095f58a .../<gpu>_sxm/gemm/trtllm/1.3.0rc20/gemm_perf.parquet (h100_sxm,
// b200_sxm): the rows at N×K below, M = 1 … 16384.
const std::vector<GemmRow> k_gemm_rows = {
    {"h100-sxm",
     "bf16",
     4096,
     4096,
     {1, 64, 256, 1024, 4096, 16384},
     {16.6e-6, 15.7e-6, 18.7e-6, 45.3e-6, 174.3e-6, 697.5e-6}},
    {"h100-sxm",
     "bf16",
     16384,
     8192,
     {1, 64, 256, 1024, 4096, 16384},
     {95.3e-6, 100.3e-6, 109.0e-6, 351.0e-6, 1617.7e-6, 6043.5e-6}},
    {"h100-sxm",
     "fp8",
     8192,
     8192,
     {1, 64, 256, 1024, 4096, 16384},
     {37.4e-6, 39.4e-6, 46.9e-6, 117.6e-6, 446.6e-6, 1803.3e-6}},
    {"b200",
     "bf16",
     8192,
     8192,
     {1, 64, 256, 1024, 4096, 16384},
     {27.4e-6, 26.9e-6, 33.9e-6, 91.0e-6, 388.5e-6, 1589.7e-6}},
    {"b200",
     "fp8 block",
     16384,
     8192,
     {1, 64, 256, 1024, 4096, 16384},
     {27.5e-6, 31.0e-6, 35.4e-6, 101.2e-6, 387.7e-6, 1574.8e-6}},
};

/// The datasheet bound of an op: its FLOPs at the peak or its bytes at the bandwidth.
double bound_s(const Device& d, DType math, double flops, double bytes) {
  return std::max(flops / peak_flops(d.gpu, math).value_or(1), bytes / d.bandwidth());
}

void gemm_rows(const std::vector<Device>& devices) {
  std::printf("\n== Dense GEMM ==\n");
  std::printf("Leave one out is not defined: each compute curve holds two points (M = 768, the "
              "'M 512-1024' median,\nand M = 4096, the 'M >= 4096' median), and the floor and "
              "stream are one least-squares fit each.\nInstead the whole model, through "
              "Estimator::op_s, against the published example rows\n(FLOPs 2MNK; bytes M*K*2 + "
              "N*K*w + M*N*2, w the weight's bytes an element):\n");
  for (const GemmRow& r : k_gemm_rows) {
    const Device& d = *std::find_if(devices.begin(), devices.end(),
                                    [&](const Device& x) { return std::string(x.name) == r.gpu; });
    bool fp8 = std::string(r.scheme) != "bf16";
    DType math = fp8 ? DType::fp8_e4m3 : DType::bf16;
    double w = fp8 ? 1 : 2;
    std::printf("\n  %s %s, N %.0f x K %.0f\n", r.gpu, r.scheme, r.n, r.k);
    std::printf("    %6s %10s %10s %8s %10s\n", "M", "measured", "estimate", "error", "bound");
    std::vector<double> errors;
    Estimator est = d.estimator(d.eff());
    for (std::size_t i = 0; i < r.m.size(); ++i) {
      double m = r.m[i];
      double flops = 2 * m * r.n * r.k;
      double weights = r.n * r.k * w;
      double activations = m * r.k * 2 + m * r.n * 2;
      Kernels k{.kind = KernelClass::gemm,
                .calls = 1,
                .rows = m,
                .block_scales = std::string(r.scheme) == "fp8 block"};
      double t = est.op_s(k, math, flops, weights, activations, 0);
      double e = t / r.time_s[i] - 1;
      errors.push_back(e);
      std::printf("    %6.0f %10s %10s %8s %10s\n", m, time_text(r.time_s[i]).c_str(),
                  time_text(t).c_str(), percent(e).c_str(),
                  time_text(bound_s(d, math, flops, weights + activations)).c_str());
    }
    summarize("dense GEMM (example rows)", errors);
  }
}

// ---------------------------------------------------------------------------------------------
// Decode attention: the published example rows.

struct DecodeRow {
  double batch, context, time_s;
};

// TRT-LLM generation attention on the H100, bf16 KV, 32 query / 8 KV heads, head dim 128:
// example rows of aiconfigurator@095f58a
// .../h100_sxm/attention/trtllm/1.3.0rc20/generation_attention_perf.parquet.
const std::vector<DecodeRow> k_decode_rows = {
    {1, 4096, 15.2e-6},
    {32, 4096, 190e-6},
    {32, 16384, 712e-6},
    {256, 1024, 369e-6},
};

void decode_rows(const std::vector<Device>& devices) {
  std::printf("\n== Decode attention: example rows (h100-sxm, bf16 KV, 32 q / 8 kv heads, head "
              "dim 128) ==\n");
  std::printf("The whole model through Estimator::op_s: KV read b*s*2*8*128*2 bytes, query and "
              "output b*32*128*2 each,\nFLOPs 4*b*s*32*128.\n");
  const Device& d = devices[0];
  Estimator est = d.estimator(d.eff());
  std::printf("    %5s %7s %9s %10s %10s %8s %10s\n", "batch", "context", "KV", "measured",
              "estimate", "error", "bound");
  std::vector<double> errors;
  for (const DecodeRow& r : k_decode_rows) {
    double kv = r.batch * r.context * 2 * 8 * 128 * 2;
    double activations = 2 * r.batch * 32 * 128 * 2;
    double flops = 4 * r.batch * r.context * 32 * 128;
    Kernels k{.kind = KernelClass::attention, .calls = 1, .kv = DType::bf16};
    double t = est.op_s(k, DType::bf16, flops, 0, activations, kv);
    errors.push_back(t / r.time_s - 1);
    std::printf("    %5.0f %7.0f %9s %10s %10s %8s %10s\n", r.batch, r.context,
                si_bytes(kv).c_str(), time_text(r.time_s).c_str(), time_text(t).c_str(),
                percent(errors.back()).c_str(),
                time_text(bound_s(d, DType::bf16, flops, kv + activations)).c_str());
  }
  summarize("decode attention (example rows)", errors);
}

// ---------------------------------------------------------------------------------------------
// MoE module: the published rows.

struct MoeRow {
  const char* gpu;
  const char* shape;
  double hidden, width, top_k, experts, ep, tokens;
  bool fp8;
  double lo_s, hi_s; ///< measured time, or the range the source gives
  bool fitted;       ///< a parameter of the profile was set from this row
};

/// Seconds from a compute fraction the source gives instead of a time.
double from_fraction(double flops, double fraction, double peak) {
  return flops / (fraction * peak);
}

// The whole TRT-LLM MoE module (routing, quantization, permute, both GEMMs, activation,
// finalize; balanced routing; T tokens in per GPU, T·top_k / EP token-expert pairs on each),
// from aiconfigurator@095f58a .../<gpu>_sxm/moe/trtllm/1.3.0rc20/moe_perf.parquet (h100_sxm,
// b200_sxm). Shapes: DeepSeek-V3 (hidden 7168, width 2048, top 8 of 256, fp8 block scales),
// Mixtral (4096, 14336, top 2 of 8), Qwen3-30B-like (2048, 768, top 8 of 128). Rows the source
// gives as a fraction of the peak are converted to time at that fraction; ranges stay ranges.
std::vector<MoeRow> moe_rows() {
  auto flops = [](double h, double w, double k, double ep, double t) {
    return 2 * 3 * h * w * t * k / ep;
  };
  const double h100_bf16 = 989.4e12, h100_fp8 = 1978.9e12;
  return {
      {"h100-sxm", "DeepSeek-V3 EP 8", 7168, 2048, 8, 256, 8, 1, true, 46e-6, 46e-6, true},
      {"h100-sxm", "DeepSeek-V3 EP 8", 7168, 2048, 8, 256, 8, 128, true, 495e-6, 495e-6, true},
      {"h100-sxm", "DeepSeek-V3 EP 8", 7168, 2048, 8, 256, 8, 2048, true, 685e-6, 685e-6, false},
      {"h100-sxm", "DeepSeek-V3 EP 8", 7168, 2048, 8, 256, 8, 16384, true, 2805e-6, 2805e-6, true},
      {"h100-sxm", "DeepSeek-V3 EP 256", 7168, 2048, 8, 256, 256, 1, true, 41e-6, 45e-6, false},
      {"h100-sxm", "DeepSeek-V3 EP 256", 7168, 2048, 8, 256, 256, 128, true, 41e-6, 45e-6, false},
      {"h100-sxm", "Mixtral bf16 EP 1", 4096, 14336, 2, 8, 1, 32, false, 965e-6, 965e-6, false},
      {"h100-sxm", "Mixtral bf16 EP 1", 4096, 14336, 2, 8, 1, 2048, false,
       from_fraction(flops(4096, 14336, 2, 1, 2048), 0.82, h100_bf16),
       from_fraction(flops(4096, 14336, 2, 1, 2048), 0.77, h100_bf16), true},
      {"h100-sxm", "Mixtral bf16 EP 1", 4096, 14336, 2, 8, 1, 16384, false,
       from_fraction(flops(4096, 14336, 2, 1, 16384), 0.82, h100_bf16),
       from_fraction(flops(4096, 14336, 2, 1, 16384), 0.77, h100_bf16), true},
      {"h100-sxm", "Mixtral fp8 EP 1", 4096, 14336, 2, 8, 1, 16384, true,
       from_fraction(flops(4096, 14336, 2, 1, 16384), 0.74, h100_fp8),
       from_fraction(flops(4096, 14336, 2, 1, 16384), 0.68, h100_fp8), true},
      {"h100-sxm", "Qwen3-30B-like bf16 EP 1", 2048, 768, 8, 128, 1, 128, false, 434e-6, 434e-6,
       false},
      {"h100-sxm", "Qwen3-30B-like bf16 EP 1", 2048, 768, 8, 128, 1, 16384, false,
       from_fraction(flops(2048, 768, 8, 1, 16384), 0.46, h100_bf16),
       from_fraction(flops(2048, 768, 8, 1, 16384), 0.46, h100_bf16), true},
      {"b200", "DeepSeek-V3 EP 8", 7168, 2048, 8, 256, 8, 128, true, 269e-6, 269e-6, true},
      {"b200", "DeepSeek-V3 EP 8", 7168, 2048, 8, 256, 8, 16384, true, 855e-6, 855e-6, true},
      {"b200", "DeepSeek-V3 EP 256", 7168, 2048, 8, 256, 256, 1, true, 35e-6, 37e-6, true},
  };
}

void moe_module_rows(const std::vector<Device>& devices) {
  std::printf("\n== MoE module: published rows ==\n");
  std::printf("The whole model through Estimator::op_s as the roofline calls it: weights of the "
              "local experts the\nstep's tokens touch (uniform routing), activations pairs*(2h + "
              "3w)*2 bytes, FLOPs 6*pairs*h*w.\n'fit' rows set a profile parameter (floor, "
              "stream or a compute point); 'check' rows did not.\n");
  std::printf("    %-8s %-26s %6s %6s %21s %10s %9s %10s\n", "gpu", "module", "T", "row",
              "measured", "estimate", "error", "bound");
  std::vector<double> fit, check;
  for (const MoeRow& r : moe_rows()) {
    const Device& d = *std::find_if(devices.begin(), devices.end(),
                                    [&](const Device& x) { return std::string(x.name) == r.gpu; });
    double pairs = r.tokens * r.top_k / r.ep;
    double local = r.experts / r.ep;
    double touched =
        local * expected_experts(static_cast<u64>(r.experts), static_cast<u64>(r.top_k), r.tokens) /
        r.experts;
    double w = r.fp8 ? 1 : 2;
    double flops = 2 * 3 * pairs * r.hidden * r.width;
    double weights = touched * 3 * r.hidden * r.width * w;
    double activations = pairs * (2 * r.hidden + 3 * r.width) * 2;
    DType math = r.fp8 ? DType::fp8_e4m3 : DType::bf16;
    Kernels k{.kind = KernelClass::grouped_gemm, .calls = 1, .rows = r.width};
    double t = d.estimator(d.eff()).op_s(k, math, flops, weights, activations, 0);
    double e = t < r.lo_s ? t / r.lo_s - 1 : t > r.hi_s ? t / r.hi_s - 1 : 0;
    (r.fitted ? fit : check).push_back(e);
    std::string measured =
        r.lo_s == r.hi_s ? time_text(r.lo_s) : time_text(r.lo_s) + "-" + time_text(r.hi_s);
    std::printf("    %-8s %-26s %6.0f %6s %21s %10s %9s %10s\n", r.gpu, r.shape, r.tokens,
                r.fitted ? "fit" : "check", measured.c_str(), time_text(t).c_str(),
                r.lo_s == r.hi_s || e != 0 ? percent(e).c_str() : "within",
                time_text(bound_s(d, math, flops, weights + activations)).c_str());
  }
  std::printf("  fit rows:\n");
  summarize("MoE module (fit rows)", fit);
  std::printf("  check rows:\n");
  summarize("MoE module (check rows)", check);
}

} // namespace

int main() {
  GpuCatalog catalog;
  std::vector<Device> devices = {typical_device(catalog, "h100-sxm"),
                                 typical_device(catalog, "h200"), typical_device(catalog, "b200")};
  std::printf("kvcalc estimate accuracy: the typical profiles against the kernel measurements "
              "behind them\n");
  for (const Device& d : devices) {
    std::printf("  %-8s %s (%s)\n", d.name, d.profile->file.c_str(), d.profile->device.c_str());
  }
  decode_leave_one_out(devices);
  prefill_leave_one_out(devices);
  all_reduce_leave_one_out(devices);
  gemm_rows(devices);
  decode_rows(devices);
  moe_module_rows(devices);
  std::printf("\n== Summary: |error| per class ==\n");
  for (const auto& [cls, errors] : g_summary) {
    std::printf("  %-38s median %5.1f%%  max %5.1f%%  (%zu)\n", cls.c_str(), median(errors) * 100,
                max_of(errors) * 100, errors.size());
  }
  return 0;
}
