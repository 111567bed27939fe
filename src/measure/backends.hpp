#pragma once
// Shared by the measure backends: the checks before timing (docs/device-profile.md), and the
// CUDA backend's factory (src/measure/cuda_backend.cpp, built with CUDA only).

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <cpu/mla_decode.hpp>

#include <kvcalc/measure/measure.hpp>

namespace kvcalc::measure_detail {

/// Against the double reference: cosine difference ≤ 1e-5, every element within the bar of
/// kernels::compare, never NaN. Naive against absorbed: each is within those bars of the
/// reference, so their mutual difference may reach twice them.
inline constexpr double k_max_cos_diff = 1e-5;
inline constexpr double k_max_cos_diff_between = 2e-5;
inline constexpr double k_abs_bar_between = 2 * kernels::k_abs_bar;
inline constexpr double k_rel_bar_between = 2 * kernels::k_rel_bar;

/// A /proc/meminfo figure in bytes ("MemTotal", "MemAvailable"); none where the system has no
/// such file or line.
[[nodiscard]] std::optional<std::uint64_t> meminfo_bytes(std::string_view key);

/// Memory this process may still take: MemAvailable, lowered to what is left under the cgroup
/// (v2) memory limit when there is one; unbounded where the system says neither, so the
/// allocation itself is the check.
[[nodiscard]] double host_memory_available_bytes();

/// Timed repeats of each probe and kernel, every backend (REFERENCE §4: the median of at least
/// 10); `--quick` runs fewer.
inline constexpr unsigned k_timed_runs = 10;

/// Throws Error naming the kernel and configuration when `a` misses the bars.
void require_agreement(const std::string& kernel, const MlaKernelConfig& c,
                       const kernels::Agreement& a, const std::string& against,
                       double max_cos_diff = k_max_cos_diff);

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
[[nodiscard]] std::unique_ptr<MeasureBackend> make_cuda_backend();
#endif

} // namespace kvcalc::measure_detail
