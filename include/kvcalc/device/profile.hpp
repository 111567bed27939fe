#pragma once
/// Device profiles: the ceilings `kvcalc measure` measured on one device, their file format
/// (docs/device-profile.md), and the measured device as a catalog entry for `--gpu auto`.

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <kvcalc/core/embedded.hpp>
#include <kvcalc/device/efficiency.hpp>
#include <kvcalc/device/gpu.hpp>

namespace kvcalc::device {

/// Measured ceilings of one device, as `kvcalc measure` writes them (docs/device-profile.md).
struct DeviceProfile {
  std::string file;
  std::string device;  ///< "NVIDIA H200", "AMD EPYC 9654 (96 threads)"
  std::string backend; ///< cuda | cpu | fake
  std::string date;
  double bandwidth_bytes_per_s = 0;
  PeakFlops flops_per_s;       ///< measured; unset dtypes were not measured
  double link_bytes_per_s = 0; ///< 0: not measured
  /// Kernels' and links' efficiencies over their shape; the estimate's (none: not measured).
  std::optional<EfficiencyProfile> efficiency;
  /// Catalog GPUs the efficiencies apply to, each with how (a typical profile's; measured
  /// profiles apply to the device they measured).
  std::vector<std::pair<std::string, std::string>> applies_to;
  /// What else the measurement recorded for people (machine, probes, kernels), as YAML written
  /// after the ceilings; the reader skips it.
  std::string details_yaml;
};

/// Parses a device profile; errors are located InputErrors.
[[nodiscard]] DeviceProfile parse_device_profile(const std::string& text, const std::string& file);

/// The profile YAML of `profile`: readable by parse_device_profile.
[[nodiscard]] std::string device_profile_yaml(const DeviceProfile& profile);

/// The typical profile of `gpu`'s kind, compiled in (src/device/profiles/), and how it
/// applies: "measured on this GPU", or the measured GPU it is mapped to and why. nullopt: no
/// published measurement covers this GPU, which then gets no estimate.
struct TypicalProfile {
  const DeviceProfile* profile = nullptr;
  std::string how;
};
[[nodiscard]] std::optional<TypicalProfile> typical_profile(const Gpu& gpu);

/// The typical profiles' files (src/device/profiles/), compiled in.
[[nodiscard]] std::span<const EmbeddedFile> builtin_profile_files();

/// Every typical profile compiled in.
[[nodiscard]] const std::vector<DeviceProfile>& typical_profiles();

/// The `efficiency` section of a profile as YAML (part of device_profile_yaml).
[[nodiscard]] std::string efficiency_yaml(const EfficiencyProfile& efficiency);

/// A field of /proc/meminfo in bytes ("MemTotal", "MemAvailable"); none where it is absent.
[[nodiscard]] std::optional<u64> meminfo_bytes(std::string_view key);

/// A measured CPU described as a catalog entry, for `--gpu auto` on a machine without a GPU:
/// memory from /proc/meminfo, ceilings from the profile (bf16 at the fp32 rate), one "SM" per
/// thread, no interconnect.
[[nodiscard]] Gpu cpu_as_gpu(const DeviceProfile& profile);

/// The device a profile measured, for `--gpu auto`: the CPU as above, or the catalog entry of
/// the GPU the driver named ("NVIDIA H200" → h200, "NVIDIA H100 80GB HBM3" → h100-80gb-hbm3,
/// an alias of h100-sxm). An unknown GPU is an InputError saying how to add it.
[[nodiscard]] Gpu device_of_profile(const DeviceProfile& profile, const GpuCatalog& catalog);

} // namespace kvcalc::device
