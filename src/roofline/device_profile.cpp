#include <kvcalc/roofline/roofline.hpp>

#include "../core/yaml_support.hpp"

namespace kvcalc {

DeviceProfile parse_device_profile(const std::string& text, const std::string& file) {
  YAML::Node root = detail::parse_yaml(text, file);
  if (!root.IsDefined() || !root.IsMap()) {
    throw InputError(SourceLocation{file, 1, 1},
                     "a device profile is a map written by `kvcalc measure` "
                     "(docs/device-profile.md)");
  }
  auto locations = std::make_shared<detail::LocationMap>(file, detail::location_of(root, file),
                                                         "docs/device-profile.md");
  detail::MapReader r(root, "", locations);
  r.allow_only({"kvcalc_device_profile", "device", "backend", "date", "bandwidth_bytes_per_s",
                "flops_per_s", "link_bytes_per_s", "machine", "kernels", "probes"});
  u64 version = r.required_count("kvcalc_device_profile", "the profile format version, 1");
  if (version != 1) {
    r.fail("kvcalc_device_profile",
           "profile format " + std::to_string(version) + " is not one this kvcalc reads (1)");
  }
  DeviceProfile p;
  p.file = file;
  p.device = r.required_text("device", "the device measured");
  p.backend = r.required_text("backend", "cuda, cpu or fake");
  p.date = r.text("date").value_or("");
  auto bw = r.device_rate("bandwidth_bytes_per_s");
  if (!bw) {
    r.missing("bandwidth_bytes_per_s", "the measured memory bandwidth, bytes per second");
  }
  p.bandwidth_bytes_per_s = *bw;
  auto flops = r.map("flops_per_s");
  if (!flops) {
    r.missing("flops_per_s", "measured FLOP/s per dtype");
  }
  flops->allow_only({"fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4"});
  for (const auto& field : k_peak_flops_fields) {
    p.flops_per_s.*field.value = flops->device_rate(field.name);
  }
  p.link_bytes_per_s = r.device_rate("link_bytes_per_s").value_or(0);
  return p;
}

DeviceRates device_rates(const Gpu& gpu, const DeviceProfile& profile) {
  DeviceRates r = device_rates(gpu);
  r.bandwidth_bytes_per_s = profile.bandwidth_bytes_per_s;
  const PeakFlops& m = profile.flops_per_s;
  const PeakFlops& sheet = gpu.flops_per_s;
  auto reference = m.bf16 ? m.bf16 : m.fp16 ? m.fp16 : m.fp32;
  auto sheet_reference = m.bf16 ? sheet.bf16 : m.fp16 ? sheet.fp16 : sheet.fp32;
  double ratio = reference && sheet_reference ? *reference / *sheet_reference : 1.0;
  bool scaled = false;
  for (const auto& field : k_peak_flops_fields) {
    const auto& measured = m.*field.value;
    const auto& datasheet = sheet.*field.value;
    if (!measured && datasheet) {
      scaled = true;
    }
    r.flops_per_s.*field.value = measured    ? measured
                                 : datasheet ? std::optional<double>(*datasheet * ratio)
                                             : std::nullopt;
  }
  if (profile.link_bytes_per_s > 0) {
    r.link_bytes_per_s = profile.link_bytes_per_s;
  }
  r.source = "device profile " + profile.file + " (" + profile.backend + ", " + profile.device +
             (profile.date.empty() ? "" : ", " + profile.date) + ")";
  if (scaled && ratio != 1.0) {
    r.source += "; unmeasured dtypes at datasheet × " + std::to_string(ratio).substr(0, 5);
  }
  return r;
}

} // namespace kvcalc
