#include "deployment.hpp"

#include <algorithm>

#include <unistd.h>

#include <fmt/format.h>

#include <kvcalc/core/error.hpp>
#include <kvcalc/core/file.hpp>
#include <kvcalc/core/spell.hpp>
#include <kvcalc/measure/measure.hpp>

using namespace kvcalc::measure;

namespace kvcalc::cli {

std::vector<Gpu> deployment_devices(const ParallelOptions& p,
                                    const std::optional<DeviceProfile>& profile,
                                    const GpuCatalog& catalog, const std::string& how_to_measure,
                                    std::vector<std::string>& warnings) {
  auto is_auto = [](const std::string& name) { return iequals(name, "auto"); };
  std::vector<std::string> names = p.gpus;
  if (profile && !p.gpu_given) {
    names = {"auto"};
  }
  bool any_auto = std::any_of(names.begin(), names.end(), is_auto);
  if (any_auto && !profile) {
    throw InputError("--gpu auto means the device a profile measured: " + how_to_measure);
  }
  // The device the profile measured, where kvcalc can model it: for `auto` an error says why
  // not (a fake profile, a GPU the catalog lacks); beside a named GPU there is just none.
  std::optional<Gpu> own;
  if (any_auto) {
    own = device_of_profile(*profile, catalog);
  } else if (profile) {
    try {
      own = device_of_profile(*profile, catalog);
    } catch (const InputError&) {
      own.reset();
    }
  }
  std::vector<Gpu> devices;
  for (const auto& name : names) {
    if (is_auto(name)) {
      const Gpu& measured = *own;
      std::vector<u64> tps = p.tp_sweep();
      bool several = std::any_of(tps.begin(), tps.end(), [](u64 tp) { return tp > 1; }) ||
                     p.pp > 1 || p.ep > 1 || p.dcp > 1 || p.deployment_gpus().value_or(1) > 1;
      if (measured.vendor == "cpu" && several) {
        throw InputError("the device profile measured a CPU, one device: --tp, --pp, --ep, "
                         "--dcp and --gpus above 1 need GPUs; name a catalog --gpu to model a "
                         "deployment with the CPU's ceilings, or drop them");
      }
      devices.push_back(measured);
      continue;
    }
    const Gpu& gpu = catalog.find(name);
    if (profile && (!own || own->name != gpu.name)) {
      warnings.push_back(fmt::format("{} takes the ceilings the {} backend measured on {}{}",
                                     gpu.name, profile->backend, profile->device,
                                     own ? "; use --gpu auto to model the measured device" : ""));
    }
    devices.push_back(gpu);
  }
  return devices;
}

std::vector<CapacityRequest>
capacity_requests(const std::vector<Model>& models, const CacheRequest& cache,
                  const ParallelOptions& p, const EngineOptions& engine,
                  std::optional<u64> block_size, const std::vector<Gpu>& devices,
                  const std::vector<u64>& contexts, std::optional<u64> max_context_at) {
  EngineSettings settings = engine_settings(engine, block_size);
  std::vector<CapacityRequest> out;
  for (const Model& m : models) {
    for (const Gpu& gpu : devices) {
      for (u64 tp : p.tp_sweep()) {
        CapacityRequest req;
        req.model = m;
        req.gpu = gpu;
        req.cache = cache;
        req.weight_dtype = p.weight_dtype;
        req.parallel.gpus = p.deployment_gpus().value_or(0);
        req.parallel.tp = tp;
        req.parallel.pp = p.pp;
        req.parallel.ep = p.ep;
        req.parallel.dcp = p.dcp;
        req.parallel.dp_attention = p.dp_attention;
        req.parallel.dp = p.dp;
        req.parallel.redundant_experts = p.redundant_experts;
        req.engine = settings;
        req.mtp = p.mtp;
        req.contexts = contexts;
        req.max_context_at = max_context_at;
        out.push_back(std::move(req));
      }
    }
  }
  return out;
}

std::string fit_hint(const CapacityRequest& request) {
  if (std::optional<Parallelism> p = smallest_fitting_tp(request)) {
    return "it fits at --gpus " + std::to_string(p->gpus) + " --tp " + std::to_string(p->tp);
  }
  return "no tensor parallelism up to 64 fits it: try a smaller --weight-dtype or --kv-dtype, "
         "or shorter contexts";
}

std::vector<u64> default_contexts(const EngineOptions& engine) {
  std::vector<u64> out;
  if (engine.settings.max_model_len_auto) {
    return out; // the length the pool fits, found by compute_capacity
  }
  std::optional<u64> limit = engine.settings.max_model_len;
  for (u64 tokens : {u64{4096}, u64{32768}, u64{131072}}) {
    if (!limit || tokens < *limit) {
      out.push_back(tokens);
    }
  }
  if (limit) {
    out.push_back(*limit);
  }
  return out;
}

std::optional<DeviceProfile> read_ceilings(const CeilingOptions& c, const ParallelOptions& p,
                                           const GpuCatalog& catalog,
                                           const std::string& how_to_measure, std::ostream& err) {
  if (!c.device_profile.empty() && c.measure) {
    throw InputError("--measure measures the ceilings --device-profile would give; choose one");
  }
  if (!c.save_profile.empty() && !c.measure) {
    throw InputError("--save-profile keeps what --measure measured: add --measure (kvcalc "
                     "measure --profile FILE measures and writes a profile on its own)");
  }
  if (!c.measure) {
    return read_device_profile(c.device_profile);
  }
  auto backend = make_measure_backend("auto");
  DeviceProfile planned;
  planned.backend = backend->name();
  planned.device = backend->device();
  planned.file = "(measured now)";
  std::vector<std::string> ignored; // the real check after measuring says them
  (void)deployment_devices(p, planned, catalog, how_to_measure, ignored);
  MeasureOptions options; // probes only: the ceilings
  if (isatty(2) != 0) {
    options.progress = [&err](const std::string& what) { err << "kvcalc: " << what << '\n'; };
  }
  std::string source = c.save_profile.empty() ? "(measured now)" : c.save_profile;
  DeviceProfile measured = to_device_profile(run_measure(*backend, options), source);
  if (!c.save_profile.empty()) {
    write_text_file(c.save_profile, device_profile_yaml(measured), "--save-profile");
    err << "kvcalc: wrote " << c.save_profile << '\n';
  }
  return measured;
}

std::optional<DeviceProfile> read_device_profile(const std::string& path) {
  if (path.empty()) {
    return std::nullopt;
  }
  return parse_device_profile(read_text_file(path), path);
}

} // namespace kvcalc::cli
