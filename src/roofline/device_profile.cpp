#include <kvcalc/roofline/roofline.hpp>

using namespace kvcalc::device;

namespace kvcalc::roofline {

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
    r.links.up_bytes_per_s = profile.link_bytes_per_s;
  }
  r.source = "device profile " + profile.file + " (" + profile.backend + ", " + profile.device +
             (profile.date.empty() ? "" : ", " + profile.date) + ")";
  if (scaled && ratio != 1.0) {
    r.source += "; unmeasured dtypes at datasheet × " + std::to_string(ratio).substr(0, 5);
  }
  return r;
}

} // namespace kvcalc::roofline
