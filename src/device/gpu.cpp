#include <kvcalc/device/gpu.hpp>

#include <algorithm>

#include <kvcalc/core/file.hpp>
#include <kvcalc/core/spell.hpp>
#include <kvcalc/core/units.hpp>

#include "../core/yaml_support.hpp"

namespace kvcalc::device {

std::optional<double> peak_flops(const PeakFlops& f, DType dtype) {
  switch (dtype) {
  case DType::fp32:
    return f.fp32;
  case DType::fp16:
    return f.fp16;
  case DType::bf16:
    return f.bf16;
  case DType::fp8_e4m3:
  case DType::fp8_e5m2:
    return f.fp8;
  case DType::int8:
  case DType::int4:
    return f.int8;
  case DType::nvfp4:
  case DType::mxfp4:
    return f.fp4;
  }
  return std::nullopt;
}

u64 scale_up_domain(const Gpu& gpu, u64 gpus_per_node) {
  if (gpus_per_node == 0 || gpu.domain_spans_nodes) {
    return gpu.scale_up_domain;
  }
  return gpu.scale_up_domain == 0 ? gpus_per_node : std::min(gpu.scale_up_domain, gpus_per_node);
}

namespace {

using detail::MapReader;

/// The largest scale-up domain a catalog may state: beyond any rack built.
constexpr u64 k_max_domain = 4096;

Gpu checked_memory(const MapReader& r, Gpu g);

/// `latency_s` of a link: a time between 0 and 1 ms, 0 when not stated.
double link_latency(const MapReader& link) {
  if (!link.has("latency_s")) {
    return 0;
  }
  double v = link.number("latency_s").value_or(0);
  if (!(v > 0 && v <= 1e-3)) {
    link.fail("latency_s", "one message's latency in seconds: above 0 and at most 1e-3 (a "
                           "microsecond is 1e-6)");
  }
  return v;
}

Gpu read_gpu(const MapReader& r, CatalogKind kind) {
  bool every = kind == CatalogKind::bundled;
  r.allow_only({"name", "display_name", "aliases", "vendor", "architecture", "memory_bytes",
                "memory_nominal_bytes", "memory_bandwidth_bytes_per_s", "flops_per_s", "sm_count",
                "l2_bytes", "interconnect", "scale_out", "source"});
  Gpu g;
  g.name = r.required_text("name", "the registry key, e.g. h100-sxm");
  g.display_name = r.text("display_name").value_or(g.name);
  if (r.has("aliases")) {
    YAML::Node aliases = r.node("aliases");
    if (!aliases.IsSequence()) {
      r.fail("aliases", "'aliases' must be a list of names");
    }
    for (const auto& a : aliases) {
      g.aliases.push_back(detail::scalar_of(a, r.locations()->file(), "each alias"));
    }
  }
  g.file = r.locations()->file();
  // A user's entry may leave out what its commands do not use; the bundled one states all.
  auto given = [&](std::string_view key) {
    if (r.has(key)) {
      return true;
    }
    if (every) {
      return true; // the required reader below names it
    }
    g.not_given.emplace_back(key);
    return false;
  };
  if (given("vendor")) {
    g.vendor = r.required_text("vendor", "nvidia or amd");
  }
  if (given("architecture")) {
    g.architecture = r.required_text("architecture", "ampere, ada, hopper, blackwell, cdna3, ...");
  }
  g.memory_bytes = r.required_count("memory_bytes", "usable memory, as the driver reports it");
  g.memory_nominal_bytes = given("memory_nominal_bytes")
                               ? r.required_count("memory_nominal_bytes", "memory as marketed")
                               : g.memory_bytes;
  if (given("memory_bandwidth_bytes_per_s")) {
    auto bandwidth = r.device_rate("memory_bandwidth_bytes_per_s");
    if (!bandwidth) {
      r.missing("memory_bandwidth_bytes_per_s", "the datasheet memory bandwidth, bytes per second");
    }
    g.memory_bandwidth_bytes_per_s = *bandwidth;
  }
  if (given("flops_per_s")) {
    auto flops = r.map("flops_per_s");
    if (!flops) {
      r.missing("flops_per_s", "dense peak FLOP/s per dtype");
    }
    flops->allow_only({"fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4"});
    for (const auto& field : k_peak_flops_fields) {
      g.flops_per_s.*field.value = flops->device_rate(field.name);
    }
    if (!g.flops_per_s.bf16 && !g.flops_per_s.fp16) {
      flops->fail("bf16", "a GPU needs at least a bf16 or fp16 dense peak");
    }
  }
  if (given("sm_count")) {
    g.sm_count = r.required_count("sm_count", "streaming multiprocessors (CUs on AMD)");
  }
  if (given("l2_bytes")) {
    g.l2_bytes = r.required_count("l2_bytes", "last-level cache bytes");
  }
  if (given("source")) {
    g.source = r.required_text("source", "where the figures come from");
  }
  if (!given("interconnect")) {
    return checked_memory(r, std::move(g));
  }
  auto link = r.map("interconnect");
  if (!link) {
    r.missing("interconnect", "kind and bytes_per_s of the GPU-to-GPU link");
  }
  link->allow_only({"kind", "bytes_per_s", "domain", "spans_nodes", "latency_s"});
  g.interconnect = link->required_text("kind", "nvlink4, pcie5, infinity-fabric, ...");
  auto link_rate = link->device_rate("bytes_per_s");
  if (!link_rate) {
    link->missing("bytes_per_s", "the link's bandwidth, both directions, bytes per second");
  }
  g.interconnect_bytes_per_s = *link_rate;
  g.scale_up_domain = link->count("domain").value_or(0);
  if (link->has("domain") && (g.scale_up_domain == 0 || g.scale_up_domain > k_max_domain)) {
    link->fail("domain", "GPUs one interconnect domain joins: 1 to " +
                             std::to_string(k_max_domain) +
                             " (8 on an HGX board, 72 in an NVL72 "
                             "rack)");
  }
  g.domain_spans_nodes = link->flag("spans_nodes").value_or(false);
  g.interconnect_latency_s = link_latency(*link);
  if (auto out = r.map("scale_out")) {
    out->allow_only({"kind", "bytes_per_s", "latency_s"});
    g.scale_out.kind = out->required_text("kind", "infiniband-ndr, roce-400g, ...");
    auto rate = out->device_rate("bytes_per_s");
    if (!rate) {
      out->missing("bytes_per_s", "the NIC's bandwidth per GPU, one direction, bytes per second");
    }
    g.scale_out.bytes_per_s = *rate;
    g.scale_out.latency_s = link_latency(*out);
  }
  return checked_memory(r, std::move(g));
}

/// `g`, its memory sizes checked.
Gpu checked_memory(const MapReader& r, Gpu g) {
  if (g.memory_bytes == 0 || g.memory_nominal_bytes == 0) {
    r.fail("memory_bytes", "memory sizes must be at least 1 byte");
  }
  // A petabyte is far beyond any GPU, and keeps every budget sum far from 2^63.
  constexpr u64 k_max_gpu_memory = u64{1} << 50;
  if (g.memory_bytes > k_max_gpu_memory || g.memory_nominal_bytes > k_max_gpu_memory) {
    r.fail(g.memory_bytes > k_max_gpu_memory ? "memory_bytes" : "memory_nominal_bytes",
           "GPU memory of more than 1 PiB (2^50 bytes) is not a GPU's: the unit is bytes "
           "(an H200 has 150,754,820,096)");
  }
  // The driver reports what is left of the marketed memory after its own reservations: never
  // more (an H200's "141GB" is 141 GiB, 151,397,597,184 B; it reports 150,754,820,096).
  if (g.memory_bytes > g.memory_nominal_bytes) {
    r.fail("memory_bytes", "memory_bytes " + group_digits(g.memory_bytes) +
                               " is above memory_nominal_bytes " +
                               group_digits(g.memory_nominal_bytes) +
                               ": usable memory is what the driver reports of the nominal, so "
                               "it is at most that (vendors' GB on GPUs are GiB)");
  }
  return g;
}

} // namespace

void require_figures(const Gpu& gpu, std::initializer_list<std::string_view> keys,
                     std::string_view what) {
  std::vector<std::string> missing;
  for (std::string_view key : keys) {
    if (std::find(gpu.not_given.begin(), gpu.not_given.end(), key) != gpu.not_given.end()) {
      missing.emplace_back(key);
    }
  }
  if (missing.empty()) {
    return;
  }
  std::string list;
  for (std::size_t i = 0; i < missing.size(); ++i) {
    list += (i == 0 ? "" : i + 1 == missing.size() ? " and " : ", ") + missing[i];
  }
  throw InputError(gpu.file + ": GPU '" + gpu.name + "' does not give " + list + ", which " +
                   std::string(what) + " needs; add " + (missing.size() == 1 ? "it" : "them") +
                   " to its entry (docs/gpu-catalog.md)");
}

std::vector<Gpu> parse_gpu_catalog(const std::string& text, const std::string& file,
                                   CatalogKind kind) {
  YAML::Node root = detail::parse_yaml(text, file);
  auto locations = std::make_shared<detail::LocationMap>(file, detail::location_of(root, file),
                                                         "docs/gpu-catalog.md");
  if (!root.IsMap()) {
    throw InputError(SourceLocation{file, 1, 1},
                     "a GPU catalog is a map with a 'gpus:' list (docs/gpu-catalog.md)");
  }
  MapReader top(root, "", locations);
  top.allow_only({"gpus"});
  YAML::Node list = top.has("gpus") ? top.node("gpus") : YAML::Node();
  if (!list.IsSequence() || list.size() == 0) {
    throw InputError(detail::location_of(root, file),
                     "a GPU catalog needs a non-empty 'gpus:' list (docs/gpu-catalog.md)");
  }
  std::vector<Gpu> out;
  std::vector<std::string> seen;
  for (std::size_t i = 0; i < list.size(); ++i) {
    MapReader entry(list[i], "gpus[" + std::to_string(i) + "]", locations);
    Gpu g = read_gpu(entry, kind);
    std::vector<std::string> names{ascii_lower(g.name)};
    for (const auto& a : g.aliases) {
      names.push_back(ascii_lower(a));
    }
    for (const auto& n : names) {
      if (std::find(seen.begin(), seen.end(), n) != seen.end()) {
        entry.fail("name", "name or alias '" + n + "' is used by two GPUs in this catalog");
      }
      seen.push_back(n);
    }
    out.push_back(std::move(g));
  }
  return out;
}

const std::vector<Gpu>& builtin_gpus() {
  static const std::vector<Gpu> gpus = [] {
    std::vector<Gpu> out;
    for (const auto& file : builtin_gpu_files()) {
      auto part = parse_gpu_catalog(std::string(file.text), std::string(file.path));
      out.insert(out.end(), part.begin(), part.end());
    }
    return out;
  }();
  return gpus;
}

GpuCatalog::GpuCatalog(const std::string& extra_file) : m_gpus(builtin_gpus()) {
  if (extra_file.empty()) {
    return;
  }
  for (Gpu& g : parse_gpu_catalog(read_text_file(extra_file), extra_file, CatalogKind::user)) {
    // An alias another GPU already answers to would be shadowed by it, silently: refused.
    for (const std::string& alias : g.aliases) {
      for (const Gpu& b : m_gpus) {
        bool taken = !iequals(b.name, g.name) &&
                     (iequals(b.name, alias) ||
                      std::any_of(b.aliases.begin(), b.aliases.end(),
                                  [&](const std::string& a) { return iequals(a, alias); }));
        if (taken) {
          throw InputError(extra_file + ": alias '" + alias + "' of " + g.name + " already names " +
                           b.name + "; choose another alias, or name your entry " + b.name +
                           " to replace it");
        }
      }
    }
    // Names match in any case, as --gpu does: "H200" replaces the bundled h200.
    auto same = std::find_if(m_gpus.begin(), m_gpus.end(),
                             [&](const Gpu& b) { return iequals(b.name, g.name); });
    if (same != m_gpus.end()) {
      *same = std::move(g);
    } else {
      m_gpus.push_back(std::move(g));
    }
  }
}

const Gpu& GpuCatalog::find(std::string_view name) const {
  for (const Gpu& g : m_gpus) {
    if (iequals(g.name, name)) {
      return g;
    }
  }
  for (const Gpu& g : m_gpus) {
    for (const auto& a : g.aliases) {
      if (iequals(a, name)) {
        return g;
      }
    }
  }
  std::vector<std::string> names;
  for (const Gpu& g : m_gpus) {
    names.push_back(g.name);
    names.insert(names.end(), g.aliases.begin(), g.aliases.end());
  }
  throw InputError("unknown GPU '" + std::string(name) + "'" + did_you_mean(name, names) +
                   " (`kvcalc gpus` lists the catalog; --gpu-file adds your own)");
}

} // namespace kvcalc::device
