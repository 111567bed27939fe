#include <kvcalc/device/profile.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
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

/// The longest floor a kernel may have: a millisecond. A larger one is a unit slip (4.3 for
/// 4.3 µs), and every step it priced would be slow by a thousand.
constexpr double k_max_floor_s = 1e-3;

/// Reads the `efficiency` section of a profile (docs/device-profile.md).
class EfficiencyReader {
public:
  explicit EfficiencyReader(const detail::MapReader& r) : m_r(r) {}

  EfficiencyProfile read() const {
    m_r.allow_only({"source", "gemm", "grouped_gemm", "decode_attention", "mla_decode",
                    "prefill_attention", "elementwise", "all_reduce", "links", "step_overhead_s"});
    EfficiencyProfile e;
    e.source = m_r.required_text("source", "the measurements the figures come from");
    detail::MapReader gemm = need_map(m_r, "gemm", "bf16, fp8 and fp8_block GEMMs");
    gemm.allow_only({"bf16", "fp8", "fp8_block"});
    e.gemm_bf16 = read_gemm(need_map(gemm, "bf16", "the bf16 GEMM"));
    e.gemm_fp8 = read_gemm(need_map(gemm, "fp8", "the fp8 GEMM with per-tensor scales"));
    e.gemm_fp8_block = read_gemm(need_map(gemm, "fp8_block", "the block-scaled fp8 GEMM"));

    detail::MapReader grouped = need_map(m_r, "grouped_gemm", "the MoE module");
    grouped.allow_only({"floor_s", "stream", "compute"});
    e.grouped.floor_s = floor(grouped);
    e.grouped.stream = fraction(grouped, "stream");
    detail::MapReader compute = need_map(grouped, "compute", "compute against expert width");
    compute.allow_only({"bf16", "fp8"});
    e.grouped.compute_bf16 = curve(compute, "bf16", "expert_width");
    e.grouped.compute_fp8 = curve(compute, "fp8", "expert_width");

    detail::MapReader decode = need_map(m_r, "decode_attention", "decode attention by KV dtype");
    decode.allow_only({"bf16", "fp8"});
    e.decode_bf16 = read_decode(need_map(decode, "bf16", "decode attention over a bf16 cache"));
    e.decode_fp8 = read_decode(need_map(decode, "fp8", "decode attention over an fp8 cache"));

    detail::MapReader mla = need_map(m_r, "mla_decode", "MLA decode over the latent");
    mla.allow_only({"floor_s", "bandwidth", "compute"});
    e.mla_decode = {floor(mla), fraction(mla, "bandwidth"), fraction(mla, "compute")};

    detail::MapReader prefill = need_map(m_r, "prefill_attention", "causal prefill attention");
    prefill.allow_only({"bf16", "fp8"});
    e.prefill_bf16 = read_prefill(need_map(prefill, "bf16", "prefill attention in bf16"));
    e.prefill_fp8 = read_prefill(need_map(prefill, "fp8", "prefill attention in fp8"));

    detail::MapReader elementwise = need_map(m_r, "elementwise", "norms, rotary, activations");
    elementwise.allow_only({"floor_s", "bandwidth"});
    e.elementwise = {floor(elementwise), fraction(elementwise, "bandwidth")};

    detail::MapReader reduce = need_map(m_r, "all_reduce", "all-reduce tables");
    reduce.allow_only({"graph", "eager"});
    e.all_reduce_graph = all_reduce(reduce, "graph");
    e.all_reduce_eager = all_reduce(reduce, "eager");

    detail::MapReader links = need_map(m_r, "links", "fractions of each link's rate");
    links.allow_only({"scale_up", "scale_out", "dispatch", "combine"});
    e.links = {fraction(links, "scale_up"), fraction(links, "scale_out"),
               fraction(links, "dispatch"), fraction(links, "combine")};
    e.step_overhead_s = seconds(m_r, "step_overhead_s", k_max_floor_s * 100);
    return e;
  }

private:
  static detail::MapReader need_map(const detail::MapReader& r, std::string_view key,
                                    std::string_view meaning) {
    auto m = r.map(key);
    if (!m) {
      r.missing(key, meaning);
    }
    if (!m->yaml().IsMap()) {
      r.fail(key, "'" + r.path_of(key) + "' must be a map (" + std::string(meaning) + ")");
    }
    return *m;
  }

  /// An efficiency: above 0 and at most 1 of the datasheet.
  static double fraction(const detail::MapReader& r, std::string_view key) {
    auto v = r.number(key);
    if (!v) {
      r.missing(key, "a fraction of the datasheet, above 0 and at most 1");
    }
    if (*v <= 0 || *v > 1) {
      r.fail(key, "'" + r.path_of(key) + "' = " + *r.text(key) +
                      " is not an efficiency: a fraction of the datasheet, above 0 and at most 1");
    }
    return *v;
  }

  static double seconds(const detail::MapReader& r, std::string_view key, double most) {
    auto v = r.number(key);
    if (!v) {
      r.missing(key, "seconds");
    }
    if (*v > most) {
      r.fail(key, "'" + r.path_of(key) + "' = " + *r.text(key) + " s is over " +
                      fmt::format("{:g}", most) + " s: the unit is seconds (4.3 µs is 4.3e-6)");
    }
    return *v;
  }

  static double floor(const detail::MapReader& r) { return seconds(r, "floor_s", k_max_floor_s); }

  /// A list of numbers under `key`, each positive; `ascending`: each above the one before.
  static std::vector<double> numbers(const detail::MapReader& r, std::string_view key,
                                     bool ascending) {
    YAML::Node list = r.node(key);
    if (!r.has(key) || !list.IsSequence() || list.size() == 0) {
      r.fail(key, "'" + r.path_of(key) + "' must be a non-empty list of numbers");
    }
    std::vector<double> out;
    for (std::size_t i = 0; i < list.size(); ++i) {
      auto where = detail::location_of(list[i], r.locations()->file());
      const std::string text = list[i].IsScalar() ? list[i].Scalar() : std::string();
      char* end = nullptr;
      double v = std::strtod(text.c_str(), &end);
      if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(v) || v <= 0) {
        throw InputError(where, "'" + r.path_of(key) + "[" + std::to_string(i) +
                                    "]' must be a positive number, got '" + text + "'");
      }
      if (ascending && !out.empty() && v <= out.back()) {
        throw InputError(where, "'" + r.path_of(key) + "' must ascend: " + text + " follows " +
                                    fmt::format("{:g}", out.back()));
      }
      out.push_back(v);
    }
    return out;
  }

  /// {x_key: [...], efficiency: [...]}: as many efficiencies as points, each in (0, 1].
  static Curve curve(const detail::MapReader& parent, std::string_view key,
                     std::string_view x_key) {
    detail::MapReader r = need_map(parent, key, "points and their efficiencies");
    r.allow_only({x_key, "efficiency"});
    Curve c;
    c.x = numbers(r, x_key, true);
    c.y = numbers(r, "efficiency", false);
    if (c.y.size() != c.x.size()) {
      r.fail("efficiency", "'" + r.path_of("efficiency") + "' has " + std::to_string(c.y.size()) +
                               " values for " + std::to_string(c.x.size()) + " points of '" +
                               r.path_of(x_key) + "'");
    }
    for (double y : c.y) {
      if (y > 1) {
        r.fail("efficiency", "'" + r.path_of("efficiency") + "' holds " + fmt::format("{:g}", y) +
                                 ": an efficiency is a fraction of the datasheet, at most 1");
      }
    }
    return c;
  }

  static GemmEfficiency read_gemm(const detail::MapReader& r) {
    r.allow_only({"floor_s", "stream", "compute"});
    return {floor(r), fraction(r, "stream"), curve(r, "compute", "rows")};
  }

  static EfficiencyProfile::DecodeAttention read_decode(const detail::MapReader& r) {
    r.allow_only({"floor_s", "bandwidth", "compute"});
    return {floor(r), curve(r, "bandwidth", "kv_bytes"), fraction(r, "compute")};
  }

  static EfficiencyProfile::PrefillAttention read_prefill(const detail::MapReader& r) {
    r.allow_only({"floor_s", "compute"});
    return {floor(r), curve(r, "compute", "tokens")};
  }

  static std::vector<AllReduceTable> all_reduce(const detail::MapReader& r, std::string_view key) {
    // An empty list: no table measured; every all-reduce then at the links' fractions.
    YAML::Node list = r.node(key);
    if (!r.has(key) || !list.IsSequence()) {
      r.fail(key, "'" + r.path_of(key) +
                      "' must be a list of {gpus, bytes, time_s} tables ([] for none)");
    }
    std::vector<AllReduceTable> out;
    for (std::size_t i = 0; i < list.size(); ++i) {
      detail::MapReader t(list[i], r.path_of(key) + "[" + std::to_string(i) + "]", r.locations());
      if (!list[i].IsMap()) {
        throw InputError(detail::location_of(list[i], r.locations()->file()),
                         "an all-reduce table is a map {gpus, bytes, time_s}");
      }
      t.allow_only({"gpus", "bytes", "time_s"});
      AllReduceTable table;
      table.gpus = t.required_count("gpus", "the GPUs of the group measured");
      if (table.gpus < 2) {
        t.fail("gpus", "'" + t.path_of("gpus") + "' = " + std::to_string(table.gpus) +
                           ": an all-reduce group has at least 2 GPUs");
      }
      for (const AllReduceTable& seen : out) {
        if (seen.gpus == table.gpus) {
          t.fail("gpus", "'" + t.path_of("gpus") + "': two tables for " +
                             std::to_string(table.gpus) + " GPUs in '" + r.path_of(key) + "'");
        }
      }
      table.table.bytes = numbers(t, "bytes", true);
      table.table.time_s = numbers(t, "time_s", false);
      if (table.table.time_s.size() != table.table.bytes.size()) {
        t.fail("time_s", "'" + t.path_of("time_s") + "' has " +
                             std::to_string(table.table.time_s.size()) + " times for " +
                             std::to_string(table.table.bytes.size()) + " sizes");
      }
      out.push_back(std::move(table));
    }
    return out;
  }

  const detail::MapReader& m_r;
};

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
                "flops_per_s", "link_bytes_per_s", "efficiency", "applies_to", "machine", "kernels",
                "memory_levels", "probes", "spread_bound"});
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
  if (auto efficiency = r.map("efficiency")) {
    if (!efficiency->yaml().IsMap()) {
      r.fail("efficiency", "'efficiency' must be a map (docs/device-profile.md)");
    }
    p.efficiency = EfficiencyReader(*efficiency).read();
  }
  if (auto applies = r.map("applies_to")) {
    if (!applies->yaml().IsMap()) {
      r.fail("applies_to", "'applies_to' maps each catalog GPU to how the profile applies");
    }
    for (const auto& entry : applies->yaml()) {
      std::string gpu = entry.first.Scalar();
      p.applies_to.emplace_back(gpu, applies->required_text(gpu, "how the profile applies"));
    }
  }
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
  if (p.efficiency) {
    y << efficiency_yaml(*p.efficiency);
  }
  y << p.details_yaml;
  return y.str();
}

std::string efficiency_yaml(const EfficiencyProfile& e) {
  // The shortest text that reads back as the same number: a table's 268,435,456 B would be
  // 268,435,000 at 6 digits, and sizes closer than that would no longer ascend.
  auto num = [](double v) { return fmt::format("{}", v); };
  auto list = [&](const std::vector<double>& v) {
    std::string out = "[";
    for (std::size_t i = 0; i < v.size(); ++i) {
      out += (i ? ", " : "") + num(v[i]);
    }
    return out + "]";
  };
  auto curve = [&](const char* x_key, const Curve& c) {
    return fmt::format("{{{}: {}, efficiency: {}}}", x_key, list(c.x), list(c.y));
  };
  std::ostringstream y;
  y << "efficiency:\n";
  y << "  source: \"" << e.source << "\"\n";
  y << "  gemm:\n";
  for (auto [name, g] : {std::pair{"bf16", &e.gemm_bf16}, std::pair{"fp8", &e.gemm_fp8},
                         std::pair{"fp8_block", &e.gemm_fp8_block}}) {
    y << "    " << name << ": {floor_s: " << num(g->floor_s) << ", stream: " << num(g->stream)
      << ", compute: " << curve("rows", g->compute) << "}\n";
  }
  y << "  grouped_gemm:\n";
  y << "    floor_s: " << num(e.grouped.floor_s) << "\n";
  y << "    stream: " << num(e.grouped.stream) << "\n";
  y << "    compute:\n";
  y << "      bf16: " << curve("expert_width", e.grouped.compute_bf16) << "\n";
  y << "      fp8: " << curve("expert_width", e.grouped.compute_fp8) << "\n";
  y << "  decode_attention:\n";
  for (auto [name, a] : {std::pair{"bf16", &e.decode_bf16}, std::pair{"fp8", &e.decode_fp8}}) {
    y << "    " << name << ": {floor_s: " << num(a->floor_s)
      << ", bandwidth: " << curve("kv_bytes", a->bandwidth) << ", compute: " << num(a->compute)
      << "}\n";
  }
  y << "  mla_decode: {floor_s: " << num(e.mla_decode.floor_s)
    << ", bandwidth: " << num(e.mla_decode.bandwidth) << ", compute: " << num(e.mla_decode.compute)
    << "}\n";
  y << "  prefill_attention:\n";
  for (auto [name, a] : {std::pair{"bf16", &e.prefill_bf16}, std::pair{"fp8", &e.prefill_fp8}}) {
    y << "    " << name << ": {floor_s: " << num(a->floor_s)
      << ", compute: " << curve("tokens", a->compute) << "}\n";
  }
  y << "  elementwise: {floor_s: " << num(e.elementwise.floor_s)
    << ", bandwidth: " << num(e.elementwise.bandwidth) << "}\n";
  y << "  all_reduce:\n";
  for (auto [name, tables] :
       {std::pair{"graph", &e.all_reduce_graph}, std::pair{"eager", &e.all_reduce_eager}}) {
    y << "    " << name << ":" << (tables->empty() ? " []" : "") << "\n";
    for (const AllReduceTable& t : *tables) {
      y << "      - {gpus: " << t.gpus << ", bytes: " << list(t.table.bytes)
        << ", time_s: " << list(t.table.time_s) << "}\n";
    }
  }
  y << "  links: {scale_up: " << num(e.links.scale_up) << ", scale_out: " << num(e.links.scale_out)
    << ", dispatch: " << num(e.links.dispatch) << ", combine: " << num(e.links.combine) << "}\n";
  y << "  step_overhead_s: " << num(e.step_overhead_s) << "\n";
  return y.str();
}

const std::vector<DeviceProfile>& typical_profiles() {
  static const std::vector<DeviceProfile> profiles = [] {
    std::vector<DeviceProfile> out;
    for (const EmbeddedFile& f : builtin_profile_files()) {
      out.push_back(parse_device_profile(std::string(f.text), std::string(f.path)));
    }
    return out;
  }();
  return profiles;
}

std::optional<TypicalProfile> typical_profile(const Gpu& gpu) {
  for (const DeviceProfile& p : typical_profiles()) {
    for (const auto& [name, how] : p.applies_to) {
      if (ascii_lower(name) == ascii_lower(gpu.name)) {
        return TypicalProfile{&p, how};
      }
    }
  }
  return std::nullopt;
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
