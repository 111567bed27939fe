#pragma once
// Shared by the measure backends: the checks before timing (docs/device-profile.md), and the
// CUDA backend's factory (src/measure/cuda_backend.cpp, built with CUDA only).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <kvcalc/kernels/cpu/mla_decode.hpp>

#include <kvcalc/measure/measure.hpp>

namespace kvcalc::measure::detail {

/// The bars a kernel's output must meet. Against the double reference: cosine difference
/// ≤ 1e-5, every element within kernels::compare's bar, never NaN. Naive against absorbed over
/// every sequence: each is within those bars of the reference, so they may differ by twice them.
struct AgreementBars {
  double abs_bar = 0;
  double rel_bar = 0;
  double max_cos_diff = 0;
};
inline constexpr AgreementBars k_against_reference{kernels::k_abs_bar, kernels::k_rel_bar, 1e-5};
inline constexpr AgreementBars k_between_strategies{2 * kernels::k_abs_bar, 2 * kernels::k_rel_bar,
                                                    2e-5};

/// The kernels' shape of a configuration (DeepSeek's widths).
[[nodiscard]] kernels::MlaShape mla_shape(const MlaKernelConfig& c);

/// Memory this process may still take: MemAvailable, lowered to what is left under the cgroup
/// (v2) memory limit when there is one; unbounded where the system says neither, so the
/// allocation itself is the check.
[[nodiscard]] double host_memory_available_bytes();

/// Timed repeats of each probe and kernel, every backend (STREAM's and nvbandwidth's practice:
/// the median of at least 10); `--quick` runs fewer.
inline constexpr unsigned k_timed_runs = 10;

/// kernels::compare of `got` against `want` (a prefix of it: the reference covers the first
/// sequence). Throws Error naming the kernel, the configuration, the figures and where the
/// missing elements lie when `got` misses `bars`.
kernels::Agreement require_agreement(const std::string& kernel, const MlaKernelConfig& c,
                                     const std::vector<float>& got, const std::vector<double>& want,
                                     const std::string& against,
                                     const AgreementBars& bars = k_against_reference);

/// The absorbed output of the last configuration, so the naive run of the same configuration
/// is checked against it over every sequence, not only the reference's first.
class AbsorbedOutput {
public:
  void keep(const MlaKernelConfig& c, std::vector<float> out);
  /// Checks `naive` against the kept output when it is for `c`; a no-op otherwise.
  void check_naive(const MlaKernelConfig& c, const std::vector<float>& naive) const;

private:
  MlaKernelConfig m_config;
  std::vector<float> m_out;
};

#if defined(KVCALC_MEASURE_CUDA)
[[nodiscard]] bool cuda_device_visible();
/// Opens the libraries the cuda backend loads on demand (cuBLAS); throws Error saying which is
/// missing and how to provide it.
void open_cuda_libraries();
[[nodiscard]] std::unique_ptr<MeasureBackend> make_cuda_backend();
#endif

} // namespace kvcalc::measure::detail
