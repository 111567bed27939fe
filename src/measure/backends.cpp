// The measure backends: cpu (kernels/cpu) and fake (deterministic, for tests); cuda lives in
// cuda_backend.cpp.

#include "backends.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <thread>

#include <fmt/format.h>
#include <kvcalc/kernels/cpu/mla_decode.hpp>
#include <kvcalc/kernels/cpu/probes.hpp>

#include <kvcalc/core/error.hpp>

namespace kvcalc::measure {

namespace detail {

namespace {

/// A number in a file ("max" and anything else that is not digits: none).
std::optional<double> number_in(const std::string& path) {
  std::ifstream in(path);
  std::string text;
  if (in >> text && !text.empty() && text.find_first_not_of("0123456789") == std::string::npos) {
    return std::stod(text);
  }
  return std::nullopt;
}

/// What this process's memory cgroup has left under its limit: v2's memory.max less
/// memory.current, or v1's memory.limit_in_bytes less memory.usage_in_bytes; none without a
/// limit.
std::optional<double> cgroup_memory_left() {
  std::ifstream self("/proc/self/cgroup");
  std::string line;
  while (std::getline(self, line)) {
    // "0::/path" (v2), or "4:memory:/path" (v1, the controllers comma-separated).
    auto first = line.find(':');
    auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) {
      continue;
    }
    std::string controllers = "," + line.substr(first + 1, second - first - 1) + ",";
    std::string path = line.substr(second + 1);
    std::optional<double> limit;
    std::optional<double> used;
    if (controllers == ",,") {
      limit = number_in("/sys/fs/cgroup" + path + "/memory.max");
      used = number_in("/sys/fs/cgroup" + path + "/memory.current");
    } else if (controllers.find(",memory,") != std::string::npos) {
      limit = number_in("/sys/fs/cgroup/memory" + path + "/memory.limit_in_bytes");
      used = number_in("/sys/fs/cgroup/memory" + path + "/memory.usage_in_bytes");
    }
    if (limit) {
      return std::max(0.0, *limit - used.value_or(0));
    }
  }
  return std::nullopt;
}

} // namespace

double host_memory_available_bytes() {
  double available = std::numeric_limits<double>::infinity();
  if (auto bytes = kvcalc::device::meminfo_bytes("MemAvailable")) {
    available = static_cast<double>(*bytes);
  }
  if (auto left = cgroup_memory_left()) {
    available = std::min(available, *left);
  }
  return available;
}

kernels::MlaShape mla_shape(const MlaKernelConfig& c) {
  kernels::MlaShape shape;
  shape.batch = c.batch;
  shape.heads = c.heads;
  shape.context = c.context;
  shape.query = c.query;
  return shape;
}

kernels::Agreement require_agreement(const std::string& kernel, const MlaKernelConfig& c,
                                     const std::vector<float>& got, const std::vector<double>& want,
                                     const std::string& against, const AgreementBars& bars) {
  kernels::Agreement a = kernels::compare(got, want, bars.abs_bar, bars.rel_bar);
  if (!a.finite || a.cos_diff > bars.max_cos_diff || a.elements_over_bar > 0) {
    std::string misses =
        kernels::describe_misses(got, want, mla_shape(c), bars.abs_bar, bars.rel_bar);
    throw Error(fmt::format(
        "{} (heads {}, batch {}, context {}, query {}) disagrees with {}: cos diff {:.3g} (bar "
        "{:.0e}), max |err| {:.3g}{}; {}",
        kernel, c.heads, c.batch, c.context, c.query, against, a.cos_diff, bars.max_cos_diff,
        a.max_abs_error, a.finite ? "" : " (NaN: a page tail or an unwritten output was read)",
        misses.empty() ? "every element is within the per-element bar" : misses));
  }
  return a;
}

void AbsorbedOutput::keep(const MlaKernelConfig& c, std::vector<float> out) {
  m_config = c;
  m_out = std::move(out);
}

void AbsorbedOutput::check_naive(const MlaKernelConfig& c, const std::vector<float>& naive) const {
  if (m_out.empty() || c.heads != m_config.heads || c.batch != m_config.batch ||
      c.context != m_config.context || c.query != m_config.query) {
    return;
  }
  std::vector<double> want(m_out.begin(), m_out.end());
  (void)require_agreement("mla_decode.naive", c, naive, want,
                          "mla_decode.absorbed over every sequence", k_between_strategies);
}

} // namespace detail

namespace {

/// Timed repeats of each CPU probe and kernel: k_timed_runs, or 3 with --quick.
/// Seconds of `work` at each of the rates measured: the fastest rate the shortest time.
Spread time_of(double work, const Spread& rate) {
  return {work / rate.median, work / rate.max, work / rate.min, rate.runs};
}

unsigned cpu_runs(bool quick) {
  return quick ? 3 : detail::k_timed_runs;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      std::string name = line.substr(colon + 1);
      name.erase(0, name.find_first_not_of(" \t"));
      return name;
    }
  }
  return "unknown CPU";
}

class CpuBackend final : public MeasureBackend {
public:
  CpuBackend() : m_threads(std::max(1u, std::thread::hardware_concurrency())) {
    // Timed calls reuse the buffers of the calls before them, as a serving engine's workspace.
    kernels::keep_freed_memory();
  }

  [[nodiscard]] std::string name() const override { return "cpu"; }
  [[nodiscard]] std::string device() const override {
    return cpu_model() + " (" + std::to_string(m_threads) + " threads)";
  }
  [[nodiscard]] unsigned threads() const override { return m_threads; }
  [[nodiscard]] double bytes_per_element() const override { return 2; } // bf16 cache and weights
  [[nodiscard]] double memory_available_bytes() const override {
    return detail::host_memory_available_bytes();
  }
  [[nodiscard]] double memory_needed_bytes(const MlaKernelConfig& c) const override {
    const kernels::MlaShape dims; // DeepSeek's widths, as run_mla uses them
    const double latent = static_cast<double>(dims.d_c + dims.d_r);
    const double d_c = static_cast<double>(dims.d_c);
    const double kv = static_cast<double>(dims.d_nope + dims.d_v);
    const double rows =
        static_cast<double>(c.batch) * static_cast<double>(c.query) * static_cast<double>(c.heads);
    // The naive kernel's fp32 W_UK and W_UV, and each thread's chunk of tokens (fp32 latent, K
    // and V, scores); the absorbed kernel's latent query and output; three outputs kept.
    const double chunk = kernels::k_naive_chunk_tokens;
    double naive = static_cast<double>(c.heads) * kv * d_c * 4 +
                   m_threads * chunk * (latent + kv + static_cast<double>(c.query)) * 4;
    double absorbed = rows * (latent + d_c) * 4;
    return mla_inputs_bytes(c, bytes_per_element()) + std::max(naive, absorbed) +
           3 * rows * static_cast<double>(dims.d_v) * 4;
  }

  [[nodiscard]] ProbeResults probe(bool quick,
                                   const std::vector<MlaKernelConfig>& configs) override {
    ProbeResults p;
    // Each cache level read with an array well inside it and well beyond the level below: half
    // of an L2 (the innermost measured), the geometric mean of the two capacities further out.
    // A level under 4x the one below cannot be told from it by size: a private one is left out,
    // a shared one (where kernels' inputs are placed) is read with half its capacity, partly
    // from the caches inside it, which errs on the fast side, as a bound must.
    double inner = 0;
    double largest = 0;
    for (const kernels::CacheLevel& cache : kernels::cache_levels(m_threads)) {
      auto capacity = static_cast<double>(cache.bytes());
      bool shared = cache.instances == 1;
      largest = std::max(largest, capacity);
      bool apart = inner == 0 || capacity >= 4 * inner;
      if (!apart && !shared) {
        continue;
      }
      double working_set = inner > 0 && apart ? std::sqrt(inner * capacity) : capacity / 2;
      p.levels.push_back({"L" + std::to_string(cache.level), capacity, working_set,
                          kernels::measure_read_bandwidth(static_cast<std::uint64_t>(working_set),
                                                          m_threads, cpu_runs(quick)),
                          shared});
      inner = std::max(inner, capacity);
    }
    // DRAM by STREAM's rule: each array at least 4x the last-level caches of all the threads
    // (a CPU of several L3 slices has one per slice).
    auto llc = static_cast<std::uint64_t>(largest > 0 ? largest : 32.0 * (1 << 20));
    std::uint64_t array =
        std::max<std::uint64_t>((quick ? 2 : 4) * llc, quick ? 32ULL << 20 : 64ULL << 20);
    kernels::BandwidthResult bw = kernels::measure_bandwidth(array, m_threads, cpu_runs(quick));
    p.read_bytes_per_s = bw.read_bytes_per_s;
    p.copy_bytes_per_s = bw.copy_bytes_per_s;
    p.triad_bytes_per_s = bw.triad_bytes_per_s;
    p.levels.push_back({"DRAM", 0, static_cast<double>(array), bw.read_bytes_per_s});
    // The FMA loops run for a time, once: a single run, no spread.
    double fma = kernels::measure_fma_flops(m_threads, quick ? 0.05 : 0.25);
    p.fma_flops_per_s = {fma, fma, fma, 1};
    if (double bf16 = kernels::measure_fma_bf16_flops(m_threads, quick ? 0.05 : 0.25); bf16 > 0) {
      p.fma_bf16_flops_per_s = Spread{bf16, bf16, bf16, 1};
    }
    // The profile's GEMM: 1024³ a thread, --quick too, so a quick ceiling is not a smaller
    // GEMM's. And the naive kernel's own: a chunk of latent rows times one head's W_UK or W_UV
    // (kernels/cpu/mla_decode.cpp), the chunk as long as the longest context asks.
    p.gemm.fp32 = kernels::measure_gemm_flops({1024, 1024, 1024}, m_threads, cpu_runs(quick));
    const kernels::MlaShape dims;
    std::uint64_t rows = 1;
    for (const MlaKernelConfig& c : configs) {
      rows = std::max(rows, std::min<std::uint64_t>(c.context, kernels::k_naive_chunk_tokens));
    }
    p.kernel_gemm_fp32 =
        kernels::measure_gemm_flops({rows, dims.d_c, dims.d_nope}, m_threads, cpu_runs(quick));
    // The absorbed kernel's page at each row count its configurations run.
    std::vector<u64> row_counts;
    for (const MlaKernelConfig& c : configs) {
      row_counts.push_back(c.heads * c.query);
    }
    std::sort(row_counts.begin(), row_counts.end());
    row_counts.erase(std::unique(row_counts.begin(), row_counts.end()), row_counts.end());
    for (u64 count : row_counts) {
      kernels::MlaShape shape;
      shape.heads = count;
      shape.query = 1;
      p.absorbed_page_flops_per_s.push_back(
          {count, kernels::measure_absorbed_page_flops(shape, m_threads, cpu_runs(quick))});
    }
    return p;
  }

  /// The naive kernel's FLOPs are Eigen GEMMs, at the faster of the two GEMM probes. The
  /// absorbed kernel's scores and weighted sum run at its own page's in-core rate
  /// (ProbeResults::absorbed_page_flops_per_s), its projections on fp32 FMA tiles at the FMA
  /// loop's; the two run one after the other, so their times add.
  [[nodiscard]] double compute_seconds(const MlaKernelConfig& c, const KernelCost& cost, bool naive,
                                       const ProbeResults& probes) const override {
    if (naive) {
      double gemm = std::max(probes.gemm.fp32 ? probes.gemm.fp32->median : 0.0,
                             probes.kernel_gemm_fp32 ? probes.kernel_gemm_fp32->median : 0.0);
      return gemm > 0 ? cost.flops / gemm : 0.0;
    }
    double attention = cost.score_flops + cost.value_flops;
    double fma = probes.fma_flops_per_s.median;
    std::optional<Spread> page = probes.absorbed_page_at(c.heads * c.query);
    if (fma <= 0) {
      throw Error("the FMA loop measured no rate, so the absorbed kernel's compute bound cannot be "
                  "given");
    }
    if (attention > 0 && (!page || page->median <= 0)) {
      throw Error(fmt::format("the probes did not measure the absorbed kernel's page at {} query "
                              "rows, so its compute bound cannot be given",
                              c.heads * c.query));
    }
    return (attention > 0 ? attention / page->median : 0.0) + (cost.flops - attention) / fma;
  }

  [[nodiscard]] KernelRun run_mla(const MlaKernelConfig& c, bool naive, bool quick) override {
    kernels::MlaInputs in = kernels::make_mla_inputs(detail::mla_shape(c), 20260101);
    auto kernel = naive ? kernels::mla_decode_naive : kernels::mla_decode_absorbed;
    kernels::MlaOutput out;
    kernel(in, out, m_threads);
    // Correctness before timing, on the first sequence (the reference is O(B·H·t·d_c)).
    kernels::Agreement a =
        detail::require_agreement(naive ? "mla_decode.naive" : "mla_decode.absorbed", c, out,
                                  kernels::mla_decode_reference(in, 1), "the double reference");
    if (naive) {
      m_absorbed.check_naive(c, out);
    } else {
      m_absorbed.keep(c, out);
    }
    std::vector<double> times;
    unsigned runs = cpu_runs(quick);
    for (unsigned i = 0; i < runs; ++i) {
      auto start = std::chrono::steady_clock::now();
      kernel(in, out, m_threads);
      times.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    KernelRun r;
    r.time_s = kernels::spread_of(times);
    r.max_abs_error = a.max_abs_error;
    r.cos_diff = a.cos_diff;
    return r;
  }

  /// GEMMs of one row over weights of 256² to 1024² (floor and streaming), of 16 rows, and of
  /// 256 and 1,024 rows (compute), one product a thread as the GEMM probe runs them; memory
  /// passes of 64 KiB and of an array beyond the caches.
  [[nodiscard]] EfficiencySweeps sweep(bool quick) override {
    EfficiencySweeps out;
    out.gemm = sweep_gemms(
        "fp32", 4, m_threads, {256, 512, 1024},
        quick ? std::vector<u64>{16, 256} : std::vector<u64>{16, 256, 1024},
        [&](const TimedGemm& g) {
          return time_of(g.flops(),
                         kernels::measure_gemm_flops({g.m, g.k, g.n}, m_threads, cpu_runs(quick)));
        });
    for (std::uint64_t bytes : {64ULL << 10, quick ? 32ULL << 20 : 64ULL << 20}) {
      kernels::BandwidthResult bw = kernels::measure_bandwidth(bytes, m_threads, cpu_runs(quick));
      out.passes.push_back(
          {static_cast<double>(bytes), time_of(static_cast<double>(bytes), bw.read_bytes_per_s)});
    }
    return out;
  }

private:
  unsigned m_threads;
  detail::AbsorbedOutput m_absorbed;
};

/// Fixed figures, 80 GiB of memory, a private 4 MiB L2 and a shared 32 MiB L3 read at 4 and 2
/// times DRAM's rate, and kernel times of 1.25x (absorbed) and 1.4x (naive) the roofline bound
/// at the shared level their inputs fit, the naive one in two phases (3/4 decompression): exercises
/// measure, calibration and reporting without hardware, the same on every machine. Each figure's
/// runs lie within ±2% of it, but the copy probe's and the naive kernel's within ±15%: beyond the
/// spread bound, so their flags show.
class FakeBackend final : public MeasureBackend {
public:
  [[nodiscard]] std::string name() const override { return "fake"; }
  [[nodiscard]] std::string device() const override { return "fake device"; }
  [[nodiscard]] unsigned threads() const override { return 4; }
  [[nodiscard]] double bytes_per_element() const override { return 2; }
  [[nodiscard]] double memory_available_bytes() const override { return 80.0 * (1ULL << 30); }
  [[nodiscard]] double memory_needed_bytes(const MlaKernelConfig& c) const override {
    return mla_inputs_bytes(c, bytes_per_element());
  }
  [[nodiscard]] ProbeResults probe(bool /*quick*/,
                                   const std::vector<MlaKernelConfig>& /*configs*/) override {
    ProbeResults p;
    p.levels = {{"L2", k_l2_bytes, k_l2_bytes / 2, steady(4.0e11), false},
                {"L3", k_l3_bytes, 16.0 * (1 << 20), steady(2.0e11)},
                {"DRAM", 0, 256.0 * (1 << 20), steady(1.0e11)}};
    p.read_bytes_per_s = steady(1.0e11);
    // Copy and triad above read, as on a CPU with few cores: the ceiling is still the read.
    p.copy_bytes_per_s = noisy(1.2e11);
    p.triad_bytes_per_s = steady(1.1e11);
    p.fma_flops_per_s = steady(4.0e12);
    p.fma_bf16_flops_per_s = steady(8.0e12);
    p.gemm.bf16 = steady(2.0e12);
    p.gemm.fp32 = steady(1.0e12);
    p.kernel_gemm_fp32 = steady(0.9e12);
    return p;
  }
  [[nodiscard]] KernelRun run_mla(const MlaKernelConfig& c, bool naive, bool /*quick*/) override {
    // Read from the shared level its inputs fit (the L2 is private), as a CPU's caches keep
    // them between runs, step after step.
    double inputs = mla_inputs_bytes(c, bytes_per_element());
    double rate = inputs <= k_l3_bytes ? 2.0e11 : 1.0e11;
    double bound = 0;
    for (const KernelStep& step : mla_kernel_steps(c, naive, bytes_per_element())) {
      bound += std::max(step.cost.flops / 2.0e12, step.cost.bytes / rate);
    }
    KernelRun r;
    double time = bound * (naive ? 1.4 : 1.25);
    r.time_s = naive ? noisy(time) : steady(time);
    if (naive) {
      r.phases = {{"decompress", time * 0.75}, {"attention", time * 0.25}};
    }
    return r;
  }

  /// A device whose GEMMs take 5 µs plus their bytes at 0.8 of its 1e11 B/s, and compute at
  /// half its 2e12 bf16 FLOP/s beyond the floor; whose passes take 2 µs plus their bytes at 0.9
  /// of it: the fits must give these back.
  [[nodiscard]] EfficiencySweeps sweep(bool /*quick*/) override {
    EfficiencySweeps out;
    out.gemm =
        sweep_gemms("bf16", 2, 1, {1024, 2048, 4096}, {256, 1024, 4096}, [](const TimedGemm& g) {
          return steady(5e-6 + std::max(g.flops() / (0.5 * 2.0e12), g.bytes() / (0.8 * 1.0e11)));
        });
    for (double bytes : {65536.0, 1073741824.0}) {
      out.passes.push_back({bytes, steady(2e-6 + bytes / (0.9 * 1.0e11))});
    }
    return out;
  }

private:
  static constexpr double k_l2_bytes = 4.0 * (1 << 20);
  static constexpr double k_l3_bytes = 32.0 * (1 << 20);
  static Spread steady(double v) { return {v, 0.98 * v, 1.02 * v, detail::k_timed_runs}; }
  static Spread noisy(double v) { return {v, 0.85 * v, 1.15 * v, detail::k_timed_runs}; }
};

} // namespace

bool cuda_backend_built() {
#if defined(KVCALC_MEASURE_CUDA)
  return true;
#else
  return false;
#endif
}

bool cuda_device_present() {
#if defined(KVCALC_MEASURE_CUDA)
  return detail::cuda_device_visible();
#else
  return false;
#endif
}

std::unique_ptr<MeasureBackend> make_measure_backend(std::string_view name) {
  if (name == "auto") {
    name = cuda_device_present() ? "cuda" : "cpu";
  }
  // The cuda backend opens cuBLAS first, so a missing library is reported as such whether or not
  // a GPU is visible.
#if defined(KVCALC_MEASURE_CUDA)
  if (name == "cuda") {
    detail::open_cuda_libraries();
  }
#endif
  if (name == "cpu") {
    return std::make_unique<CpuBackend>();
  }
  if (name == "fake") {
    return std::make_unique<FakeBackend>();
  }
  if (name == "cuda") {
    if (!cuda_backend_built()) {
      throw InputError("--backend cuda: this kvcalc was built without CUDA support (configure "
                       "with the CUDA Toolkit installed and -DKVCALC_CUDA=ON); use --backend cpu");
    }
    if (!cuda_device_present()) {
      throw InputError("--backend cuda: no CUDA device is visible (check nvidia-smi and "
                       "CUDA_VISIBLE_DEVICES); use --backend cpu");
    }
#if defined(KVCALC_MEASURE_CUDA)
    return detail::make_cuda_backend();
#endif
  }
  throw InputError("unknown --backend '" + std::string(name) + "' (one of: auto, cpu, cuda, fake)");
}

} // namespace kvcalc::measure
