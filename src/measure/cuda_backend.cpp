// The cuda measure backend: kernels/cuda's probes and MLA decode kernels, each MLA kernel
// checked against the double reference (and naive against absorbed) before it is timed with
// CUDA events, the L2 flushed before every run, the median of the timed runs reported.

#include "backends.hpp"

#include <algorithm>
#include <optional>
#include <stdexcept>

#include <fmt/format.h>
#include <kvcalc/kernels/cuda/cuda_kernels.hpp>

#include <kvcalc/core/error.hpp>

namespace kvcalc::measure::detail {

namespace {

namespace gpu = kernels::cuda;
using kernels::median;

/// Kernel-side failures (std::runtime_error, std::invalid_argument) become kvcalc errors
/// naming what was being measured and where.
template <class Body>
auto guarded(const std::string& what, const std::string& device, Body&& body) -> decltype(body()) {
  try {
    return body();
  } catch (const Error&) {
    throw;
  } catch (const std::bad_alloc&) {
    throw; // the host ran out: main says so
  } catch (const std::exception& e) {
    throw Error(fmt::format("measuring {} on {}: {}", what, device, e.what()));
  }
}

class CudaBackend final : public MeasureBackend {
public:
  CudaBackend() : m_info(gpu::device_info()) {}

  [[nodiscard]] std::string name() const override { return "cuda"; }
  [[nodiscard]] std::string device() const override {
    return fmt::format("{} ({} SMs, sm_{}{}, {:.0f} MHz, driver {}, runtime {})", m_info.name,
                       m_info.sm_count, m_info.compute_major, m_info.compute_minor,
                       m_info.sm_clock_hz / 1e6, m_info.driver_version, m_info.runtime_version);
  }
  [[nodiscard]] unsigned threads() const override { return static_cast<unsigned>(m_info.sm_count); }
  [[nodiscard]] double bytes_per_element() const override { return 2; } // bf16
  [[nodiscard]] double memory_available_bytes() const override {
    return guarded("free memory", m_info.name,
                   [] { return static_cast<double>(gpu::device_free_bytes()); });
  }
  [[nodiscard]] double memory_needed_bytes(const MlaKernelConfig& c) const override {
    return gpu::MlaDecodeCuda::device_bytes(mla_shape(c));
  }

  /// The L2 is flushed before every kernel run (MlaDecodeCuda::run), as a decode step finds
  /// its cache cold: the kernels read device memory.
  [[nodiscard]] bool flushes_caches() const override { return true; }

  [[nodiscard]] ProbeResults probe(bool quick,
                                   const std::vector<MlaKernelConfig>& /*configs*/) override {
    return guarded("probes", m_info.name, [&] {
      ProbeResults p;
      // The L2 read with an array half its size.
      auto l2 = static_cast<double>(m_info.l2_bytes);
      if (l2 > 0) {
        p.levels.push_back(
            {"L2", l2, l2 / 2,
             gpu::measure_read_bandwidth(m_info.l2_bytes / 2, quick ? 5 : k_timed_runs)});
      }
      // STREAM's rule: each array at least 4x the last-level cache; 1 GiB is ~17x an H200's L2.
      std::uint64_t array =
          std::max<std::uint64_t>(4 * m_info.l2_bytes, quick ? 256ULL << 20 : 1ULL << 30);
      kernels::BandwidthResult bw = gpu::measure_bandwidth(array, quick ? 5 : k_timed_runs);
      p.read_bytes_per_s = bw.read_bytes_per_s;
      p.copy_bytes_per_s = bw.copy_bytes_per_s;
      p.triad_bytes_per_s = bw.triad_bytes_per_s;
      p.levels.push_back({"device memory", 0, static_cast<double>(array), bw.read_bytes_per_s});
      p.fma_flops_per_s = gpu::measure_fma_flops(quick ? 5 : k_timed_runs);
      gpu::GemmRates g = gpu::measure_gemm_flops(quick ? 4096 : 8192, quick ? 5 : k_timed_runs);
      p.gemm.bf16 = g.bf16;
      p.gemm.fp16 = g.fp16;
      p.gemm.fp32 = g.fp32;
      return p;
    });
  }

  /// bf16 GEMMs of one row over weights of 1024² to 8192² (floor and streaming), of 16 rows,
  /// and of 256, 1,024 and 4,096 rows over 8192² (compute); read passes of 64 KiB and 1 GiB.
  [[nodiscard]] EfficiencySweeps sweep(bool quick) override {
    return guarded("the efficiency sweeps", m_info.name, [&] {
      EfficiencySweeps out;
      unsigned runs = quick ? 5 : k_timed_runs;
      out.gemm = sweep_gemms("bf16", 2, 1, {1024, 2048, 4096, 8192}, {16, 256, 1024, 4096},
                             [&](const TimedGemm& g) {
                               return gpu::time_gemm_bf16(g.m, g.n, g.k, runs, m_info.l2_bytes);
                             });
      for (std::uint64_t bytes : {64ULL << 10, 1ULL << 30}) {
        kernels::BandwidthResult bw = gpu::measure_bandwidth(bytes, runs);
        auto b = static_cast<double>(bytes);
        out.passes.push_back({b,
                              {b / bw.read_bytes_per_s.median, b / bw.read_bytes_per_s.max,
                               b / bw.read_bytes_per_s.min, bw.read_bytes_per_s.runs}});
      }
      return out;
    });
  }

  [[nodiscard]] KernelRun run_mla(const MlaKernelConfig& c, bool naive, bool quick) override {
    std::string what = naive ? "mla_decode.naive" : "mla_decode.absorbed";
    return guarded(what, m_info.name, [&] {
      prepare(c);
      // Correctness first: one run, the first sequence against the double reference.
      (void)m_problem->run(naive, true);
      std::vector<float> out = m_problem->output();
      (void)require_agreement(what, c, out, *m_reference, "the double reference");
      if (naive) {
        m_absorbed.check_naive(c, out);
      } else {
        m_absorbed.keep(c, std::move(out));
      }
      (void)m_problem->run(naive, true); // warm-up
      unsigned runs = quick ? 5 : k_timed_runs;
      std::vector<double> totals;
      std::vector<std::vector<double>> phase_times;
      std::vector<std::string> phase_names;
      for (unsigned i = 0; i < runs; ++i) {
        gpu::MlaRunTimes t = m_problem->run(naive, true);
        totals.push_back(t.total_s);
        if (phase_names.empty()) {
          for (const auto& p : t.phases) {
            phase_names.push_back(p.name);
          }
          phase_times.resize(phase_names.size());
        }
        for (std::size_t k = 0; k < t.phases.size() && k < phase_times.size(); ++k) {
          phase_times[k].push_back(t.phases[k].seconds);
        }
      }
      KernelRun r;
      r.time_s = kernels::spread_of(totals);
      for (std::size_t k = 0; k < phase_names.size(); ++k) {
        r.phases.push_back({phase_names[k], median(phase_times[k])});
      }
      kernels::Agreement a = require_agreement(what, c, m_problem->output(), *m_reference,
                                               "the double reference after the timed runs");
      r.max_abs_error = a.max_abs_error;
      r.cos_diff = a.cos_diff;
      return r;
    });
  }

private:
  /// The problem and its reference stay resident between the absorbed and the naive run of a
  /// configuration.
  void prepare(const MlaKernelConfig& c) {
    if (m_problem && m_config.heads == c.heads && m_config.batch == c.batch &&
        m_config.context == c.context && m_config.query == c.query) {
      return;
    }
    m_problem.reset();
    m_problem = std::make_unique<gpu::MlaDecodeCuda>(mla_shape(c), 20260101);
    m_reference = kernels::mla_decode_reference(m_problem->first_sequence(), 1);
    m_config = c;
  }

  gpu::DeviceInfo m_info;
  MlaKernelConfig m_config;
  std::unique_ptr<gpu::MlaDecodeCuda> m_problem;
  std::optional<std::vector<double>> m_reference;
  AbsorbedOutput m_absorbed;
};

} // namespace

bool cuda_device_visible() {
  return gpu::device_count() > 0;
}

void open_cuda_libraries() {
  try {
    gpu::open_cublas();
  } catch (const std::runtime_error& e) {
    throw Error(fmt::format("--backend cuda: {}. The GPU's kernels and GEMM probe need {}: "
                            "install the CUDA Toolkit or NVIDIA's cuBLAS package that has it, or "
                            "put its folder on LD_LIBRARY_PATH; --backend cpu measures without it",
                            e.what(), gpu::cublas_library()));
  }
}

std::unique_ptr<MeasureBackend> make_cuda_backend() {
  return std::make_unique<CudaBackend>();
}

} // namespace kvcalc::measure::detail
