#include <kvcalc/device/profile.hpp>

#include <algorithm>
#include <fstream>
#include <optional>
#include <sstream>

#include <fmt/format.h>

#include <kvcalc/core/error.hpp>
#include <kvcalc/core/spell.hpp>

#include "../core/yaml_support.hpp"

namespace kvcalc::device {

namespace {

/// The fix for a file that is kvcalc's report of a run rather than the profile.
constexpr const char* k_write_profile =
    "write the profile with `kvcalc measure --profile FILE` (or `--measure --save-profile FILE` "
    "on roofline, capacity and simulate); -o/--output writes the report";

/// What `text` is when it is one of kvcalc's reports rather than a profile: its JSON (with
/// the command that wrote it), or measure's table in text, Markdown or CSV; nullopt otherwise.
std::optional<std::string> report_kind(const std::string& text) {
  std::size_t start = text.find_first_not_of(" \t\r\n");
  if (start != std::string::npos && text[start] == '{' &&
      text.find("\"kvcalc\"", start) != std::string::npos) {
    std::size_t command = text.find("\"command\": \"");
    if (command != std::string::npos) {
      std::size_t begin = command + 12;
      std::string name = text.substr(begin, text.find('"', begin) - begin);
      return "kvcalc " + name + "'s JSON report";
    }
    return "a kvcalc JSON report";
  }
  for (const char* mark :
       {"Probes on ", "**Probes on ", "name,heads,batch,context,time_s", "probe,rate"}) {
    if (text.compare(start == std::string::npos ? 0 : start, std::string_view(mark).size(), mark) ==
        0) {
      return "kvcalc measure's report";
    }
  }
  return std::nullopt;
}

} // namespace

DeviceProfile parse_device_profile(const std::string& text, const std::string& file) {
  if (std::optional<std::string> kind = report_kind(text)) {
    throw InputError(file + " is " + *kind + ", not a device profile: " + k_write_profile);
  }
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
                "flops_per_s", "link_bytes_per_s", "machine", "kernels", "memory_levels", "probes",
                "spread_bound"});
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
  bool any = false;
  for (const auto& field : k_peak_flops_fields) {
    p.flops_per_s.*field.value = flops->device_rate(field.name);
    any = any || (p.flops_per_s.*field.value).has_value();
  }
  if (!any) {
    r.fail("flops_per_s", "'flops_per_s' names no dtype: give the measured FLOP/s of at least "
                          "one (bf16: 780e12), as kvcalc measure writes it");
  }
  p.link_bytes_per_s = r.device_rate("link_bytes_per_s").value_or(0);
  return p;
}

std::string device_profile_yaml(const DeviceProfile& p) {
  std::ostringstream y;
  auto num = [](double v) { return fmt::format("{:.6g}", v); };
  y << "# Written by `kvcalc measure` (docs/device-profile.md).\n";
  y << "kvcalc_device_profile: 1\n";
  y << "device: \"" << p.device << "\"\n";
  y << "backend: " << p.backend << "\n";
  y << "date: " << p.date << "\n";
  y << "bandwidth_bytes_per_s: " << num(p.bandwidth_bytes_per_s) << "\n";
  y << "flops_per_s:\n";
  for (const auto& field : k_peak_flops_fields) {
    if (const auto& value = p.flops_per_s.*field.value) {
      y << "  " << field.name << ": " << num(*value) << "\n";
    }
  }
  if (p.link_bytes_per_s > 0) {
    y << "link_bytes_per_s: " << num(p.link_bytes_per_s) << "\n";
  }
  y << p.details_yaml;
  return y.str();
}

std::optional<u64> meminfo_bytes(std::string_view key) {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    // "MemAvailable:   20140516 kB"
    if (line.size() > key.size() && line.compare(0, key.size(), key) == 0 &&
        line[key.size()] == ':') {
      std::istringstream fields(line.substr(key.size() + 1));
      u64 kib = 0;
      if (fields >> kib) {
        return kib * 1024;
      }
    }
  }
  return std::nullopt;
}

Gpu cpu_as_gpu(const DeviceProfile& profile) {
  Gpu g;
  g.name = "cpu";
  g.display_name = profile.device;
  g.vendor = "cpu";
  g.architecture = "cpu";
  g.memory_bytes = meminfo_bytes("MemTotal").value_or(0);
  g.memory_nominal_bytes = g.memory_bytes;
  g.memory_bandwidth_bytes_per_s = profile.bandwidth_bytes_per_s;
  g.flops_per_s = profile.flops_per_s;
  if (!g.flops_per_s.bf16) {
    g.flops_per_s.bf16 = g.flops_per_s.fp32; // the CPU kernels compute bf16 data in fp32
  }
  g.sm_count = 1;
  g.l2_bytes = 0;
  g.interconnect = "none";
  g.interconnect_bytes_per_s = 1; // one device: no collectives are modelled at tp 1
  g.source = profile.file;
  return g;
}

Gpu device_of_profile(const DeviceProfile& profile, const GpuCatalog& catalog) {
  if (profile.backend == "cpu") {
    return cpu_as_gpu(profile);
  }
  if (profile.backend == "fake") {
    throw InputError("the device profile " + profile.file +
                     " is from the fake backend, which "
                     "measures no device: name a catalog GPU with --gpu");
  }
  std::string name = profile.device.substr(0, profile.device.find(" ("));
  std::string slug = ascii_lower(name);
  std::replace(slug.begin(), slug.end(), ' ', '-');
  if (slug.rfind("nvidia-", 0) == 0) {
    slug.erase(0, 7);
  }
  try {
    return catalog.find(slug);
  } catch (const InputError&) {
    throw InputError("the device profile measured '" + name + "', which the GPU catalog " +
                     "does not know as '" + slug + "'; name the catalog GPU with --gpu, or " +
                     "add it (with '" + slug + "' as an alias) in a --gpu-file");
  }
}

} // namespace kvcalc::device
