// `gpus` (the catalog) and `capacity` (how many sequences fit, engine by engine).

#include <algorithm>
#include <cmath>
#include <ostream>
#include <set>

#include <fmt/format.h>

#include <kvcalc/core/error.hpp>
#include <kvcalc/core/spell.hpp>
#include <kvcalc/core/units.hpp>
#include <kvcalc/kv/capacity.hpp>
#include <kvcalc/measure/measure.hpp>
#include <kvcalc/model/loader.hpp>
#include <kvcalc/roofline/roofline.hpp>

#include "../core/yaml_support.hpp"
#include "commands.hpp"

namespace kvcalc::cli {

int run_gpus(const GpusArgs& args, std::ostream& out, std::ostream& /*err*/) {
  GpuCatalog catalog(args.gpu_file);
  Rendered r;
  r.json = json_header("gpus");
  Table t;
  t.columns = {{"name", "name"},
               {"memory", "memory_bytes"},
               {"bandwidth", "memory_bandwidth_bytes_per_s"},
               {"bf16 dense", "bf16_flops_per_s"},
               {"fp8 dense", "fp8_flops_per_s"},
               {"fp4 dense", "fp4_flops_per_s"},
               {"ridge bf16", "ridge_bf16_flop_per_byte"},
               {"SMs", "sm_count"},
               {"link", "interconnect"},
               {"aliases", "aliases"}};
  Json list = Json::array();
  for (const Gpu& g : catalog.gpus()) {
    std::string aliases;
    for (const auto& a : g.aliases) {
      aliases += (aliases.empty() ? "" : " ") + a;
    }
    auto bf16 = g.flops_per_s.bf16 ? g.flops_per_s.bf16 : g.flops_per_s.fp16;
    auto rate = [](const std::optional<double>& v) { return v ? Cell::flops(*v) : Cell::empty(); };
    t.rows.push_back({Cell::text(g.name), Cell::bytes(g.memory_bytes),
                      Cell::bytes_per_s(g.memory_bandwidth_bytes_per_s), rate(bf16),
                      rate(g.flops_per_s.fp8), rate(g.flops_per_s.fp4),
                      Cell::number(*bf16 / g.memory_bandwidth_bytes_per_s), Cell::count(g.sm_count),
                      Cell::text(g.interconnect), Cell::text(aliases)});
    Json j = Json::object();
    j["name"] = g.name;
    j["display_name"] = g.display_name;
    j["aliases"] = string_array(g.aliases);
    j["vendor"] = g.vendor;
    j["architecture"] = g.architecture;
    j["memory_bytes"] = g.memory_bytes;
    j["memory_nominal_bytes"] = g.memory_nominal_bytes;
    j["memory_bandwidth_bytes_per_s"] = g.memory_bandwidth_bytes_per_s;
    j["flops_per_s"] = peak_flops_json(g.flops_per_s);
    j["sm_count"] = g.sm_count;
    j["l2_bytes"] = g.l2_bytes;
    j["interconnect"]["kind"] = g.interconnect;
    j["interconnect"]["bytes_per_s"] = g.interconnect_bytes_per_s;
    j["source"] = g.source;
    list.push_back(std::move(j));
  }
  r.json["gpus"] = std::move(list);
  t.notes.push_back(std::to_string(catalog.gpus().size()) +
                    " GPUs; memory as the driver reports it; FLOP/s are dense peaks (no 2:4 "
                    "sparsity); ridge = bf16 FLOP/s ÷ bandwidth");
  r.csv = t;
  r.tables.push_back(std::move(t));
  emit(r, args.output, out);
  return 0;
}

} // namespace kvcalc::cli

namespace kvcalc::cli {

namespace {

std::optional<double> fraction_option(const std::string& text, const char* name) {
  if (text.empty()) {
    return std::nullopt;
  }
  return parse_fraction(text, name, 0.0, 1.0);
}

std::optional<u64> bytes_option(const std::string& text, const char* name) {
  if (text.empty()) {
    return std::nullopt;
  }
  return parse_bytes(text, name);
}

std::optional<u64> count_option(const std::string& text, const char* name) {
  if (text.empty()) {
    return std::nullopt;
  }
  return parse_count(text, name);
}

/// The engine settings of the options, refusing a knob of another engine.
EngineSettings engine_settings(const DeploymentOptions& d, std::optional<u64> block_size) {
  EngineSettings s;
  s.engine = parse_engine(d.engine);
  struct Knob {
    const std::string& value;
    const char* flag;
    Engine engine;
  };
  for (const Knob& k :
       {Knob{d.gpu_memory_utilization, "--gpu-memory-utilization", Engine::vllm},
        Knob{d.mem_fraction_static, "--mem-fraction-static", Engine::sglang},
        Knob{d.free_gpu_memory_fraction, "--free-gpu-memory-fraction", Engine::trtllm}}) {
    if (!k.value.empty()) {
      if (s.engine != k.engine) {
        throw InputError(std::string(k.flag) + " belongs to --engine " +
                         std::string(engine_name(k.engine)) + ", not " + d.engine);
      }
      s.memory_fraction = fraction_option(k.value, k.flag);
      if (*s.memory_fraction <= 0) {
        throw InputError(std::string(k.flag) + " must be above 0");
      }
    }
  }
  s.block_size = block_size;
  s.max_batched_tokens = count_option(d.max_batched_tokens, "--max-batched-tokens");
  s.max_seqs = count_option(d.max_seqs, "--max-seqs");
  s.reserve_bytes = bytes_option(d.reserve, "--reserve");
  s.non_kv_bytes = bytes_option(d.non_kv_memory, "--non-kv-memory");
  s.kv_cache_bytes = bytes_option(d.kv_cache_memory, "--kv-cache-memory");
  s.mamba_cache_mode = k_mamba_cache_modes.parse(d.mamba_cache_mode);
  if (s.mamba_cache_mode != MambaCacheMode::none && s.engine != Engine::vllm) {
    throw InputError("--mamba-cache-mode belongs to --engine vllm, not " + d.engine);
  }
  if (s.reserve_bytes && s.non_kv_bytes) {
    throw InputError("--reserve and --non-kv-memory both set the non-KV memory; give one");
  }
  if (s.kv_cache_bytes && (s.reserve_bytes || s.non_kv_bytes)) {
    throw InputError("--kv-cache-memory gives the pool itself; drop --reserve/--non-kv-memory");
  }
  return s;
}

} // namespace

std::vector<Gpu> deployment_devices(const DeploymentOptions& d,
                                    const std::optional<DeviceProfile>& profile,
                                    const GpuCatalog& catalog, const std::string& how_to_measure,
                                    Diagnostics& diagnostics) {
  auto is_auto = [](const std::string& name) { return iequals(name, "auto"); };
  std::vector<std::string> names = d.gpus;
  if (profile && !d.gpu_given) {
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
      bool several = std::any_of(d.tps.begin(), d.tps.end(), [](u64 tp) { return tp > 1; }) ||
                     d.pp > 1 || d.ep > 1 || d.dcp > 1 ||
                     (!d.gpu_count.empty() && parse_count(d.gpu_count, "--gpus") > 1);
      if (measured.vendor == "cpu" && several) {
        throw InputError("the device profile measured a CPU, one device: --tp, --pp, --ep, "
                         "--dcp and --gpus above 1 need GPUs; name a catalog --gpu to model a "
                         "deployment with the CPU's ceilings, or drop them");
      }
      devices.push_back(measured);
      continue;
    }
    const Gpu& gpu = catalog.find(name);
    if (profile) {
      if (!own || own->name != gpu.name) {
        diagnostics.warnings.push_back(fmt::format(
            "{} takes the ceilings the {} backend measured on {}{}", gpu.name, profile->backend,
            profile->device, own ? "; use --gpu auto to model the measured device" : ""));
      }
    }
    devices.push_back(gpu);
  }
  return devices;
}

std::vector<CapacityRequest>
capacity_requests(const std::vector<Model>& models, const CacheOptions& cache,
                  const DeploymentOptions& d, const std::vector<Gpu>& devices,
                  std::vector<u64> contexts, std::optional<u64> max_context_at) {
  std::optional<u64> block_size = count_option(cache.block_size, "--block-size");
  EngineSettings engine = engine_settings(d, block_size);
  std::optional<DType> weight_dtype;
  if (!d.weight_dtype.empty()) {
    weight_dtype = parse_dtype(d.weight_dtype, "--weight-dtype");
  }
  u64 gpu_count = d.gpu_count.empty() ? 0 : parse_count(d.gpu_count, "--gpus");
  std::vector<CapacityRequest> out;
  for (const Model& m : models) {
    for (const Gpu& gpu : devices) {
      for (u64 tp : d.tps) {
        CapacityRequest req;
        req.model = m;
        req.gpu = gpu;
        req.cache = cache_request(cache);
        req.weight_dtype = weight_dtype;
        req.parallel = {gpu_count, tp, d.pp, d.ep, d.dcp, d.dp_attention};
        req.engine = engine;
        req.mtp = d.mtp;
        req.contexts = contexts;
        req.max_context_at = max_context_at;
        out.push_back(std::move(req));
      }
    }
  }
  return out;
}

int run_capacity(const CapacityArgs& args, std::ostream& out, std::ostream& err) {
  std::optional<u64> at = count_option(args.max_context_at, "--max-context-at");
  std::vector<u64> contexts;
  if (!args.contexts.empty() || !at) {
    contexts = parse_count_list(args.contexts.empty() ? "4k,32k,128k" : args.contexts, "--context");
  }
  Diagnostics diagnostics;
  std::vector<Model> models;
  for (const auto& spec : args.models) {
    models.push_back(load_model(spec, diagnostics));
  }
  std::optional<DeviceProfile> profile;
  if (!args.device_profile.empty()) {
    profile =
        parse_device_profile(detail::read_text_file(args.device_profile), args.device_profile);
  }
  std::vector<Gpu> devices =
      deployment_devices(args.deployment, profile, GpuCatalog(args.deployment.gpu_file),
                         "add a --device-profile that kvcalc measure wrote", diagnostics);
  std::vector<CapacityRequest> requests =
      capacity_requests(models, args.cache, args.deployment, devices, contexts, at);
  std::vector<CapacityResult> results;
  for (auto& req : requests) {
    req.explain = args.explain;
    results.push_back(compute_capacity(req));
    for (const auto& note : results.back().notes) {
      diagnostics.warnings.push_back(req.model.name + " on " + req.gpu.name + ": " + note);
    }
  }
  warn(err, diagnostics.warnings);

  Rendered r;
  r.json = json_header("capacity");
  Json scenarios = Json::array();
  Table t;
  t.columns = {{"model", "model"},
               {"gpu", "gpu"},
               {"gpus", "gpus"},
               {"tp", "tp"},
               {"engine", "engine"},
               {"weights/GPU", "weights_bytes_per_gpu"},
               {"KV pool/GPU", "kv_pool_bytes_per_gpu"},
               {"KV/token/GPU", "kv_bytes_per_token_per_gpu"},
               {"KV tokens", "kv_tokens"},
               {"blocks", "num_blocks"},
               {"context", "context"},
               {"max seqs", "max_sequences"},
               {"concurrency", "max_concurrency"}};
  if (profile) {
    t.columns.push_back({"decode step", "decode_step_s"});
    t.columns.push_back({"decode tok/s", "decode_tokens_per_s"});
  }
  Table csv = t;
  std::vector<std::string> logs;
  std::set<std::string> unmodelled; // models the roofline cannot time, said once each
  for (std::size_t i = 0; i < results.size(); ++i) {
    const CapacityResult& c = results[i];
    const Model& m = requests[i].model;
    // With measured ceilings: one decode step with every sequence that fits running, each at
    // this context (docs/formulas.md, "Roofline"); the deployment's tokens/s over all replicas.
    struct FullLoad {
      u64 batch_per_replica = 0;
      double step_s = 0;
      double tokens_per_s = 0;
    };
    auto full_load = [&](const ContextCapacity& x) -> std::optional<FullLoad> {
      if (!profile || !c.fits || x.max_sequences == 0) {
        return std::nullopt;
      }
      const CapacityRequest& req = requests[i];
      RooflineRequest rr;
      rr.model = req.model;
      rr.gpu = req.gpu;
      rr.rates = device_rates(req.gpu, *profile);
      rr.cache = req.cache;
      rr.weight_dtype = req.weight_dtype;
      rr.parallel = {0, c.parallel.tp, c.parallel.pp, c.parallel.ep, 1, c.parallel.dp_attention};
      rr.phase = Phase::decode;
      rr.batch = std::max<u64>(1, x.max_sequences / c.replicas);
      rr.context = x.tokens;
      try {
        RooflineResult step = compute_roofline(rr);
        return FullLoad{rr.batch, step.time_s, step.tokens_per_s * static_cast<double>(c.replicas)};
      } catch (const InputError& e) {
        unmodelled.insert(m.name + ": no decode time: " + e.what());
        return std::nullopt;
      }
    };
    auto scenario = [&](std::optional<ContextCapacity> at_context) {
      Json s = Json::object();
      s["model"] = m.name;
      s["gpu"] = c.gpu;
      s["engine"] = std::string(engine_name(c.engine));
      s["gpus"] = c.parallel.gpus;
      s["tp"] = c.parallel.tp;
      s["pp"] = c.parallel.pp;
      s["ep"] = c.parallel.ep;
      s["dcp"] = c.parallel.dcp;
      s["dp_attention"] = c.parallel.dp_attention;
      s["replicas"] = c.replicas;
      s["kv_pools"] = c.kv_pools;
      s["weight_dtype"] = std::string(dtype_name(c.weight_dtype));
      s["kv_cache"] = describe(c.cache);
      s["memory_bytes_per_gpu"] = c.memory_bytes;
      s["memory_fraction"] = c.engine == Engine::plain ? Json() : Json(c.memory_fraction);
      s["weights_bytes_per_gpu"] = c.weights_bytes_per_gpu;
      s["other_non_kv_bytes_per_gpu"] = c.other_non_kv_bytes_per_gpu;
      s["non_kv_estimated"] = c.non_kv_estimated;
      s["kv_pool_bytes_per_gpu"] = c.kv_pool_bytes_per_gpu;
      s["kv_bytes_per_token_per_gpu"] = c.kv_bytes_per_token_per_gpu;
      s["kv_tokens"] = c.kv_tokens;
      s["block_size"] = c.block_size ? Json(c.block_size) : Json();
      s["num_blocks"] = c.num_blocks ? Json(c.num_blocks) : Json();
      s["max_batched_tokens"] = c.max_batched_tokens;
      s["engine_rules"] = c.engine_rules;
      Json pool = Json::array();
      for (const PoolGroup& g : c.pool_groups) {
        Json gj = Json::object();
        gj["kind"] = g.kind;
        gj["layers"] = g.layers;
        gj["groups"] = g.groups;
        gj["block_size"] = g.block_size ? Json(g.block_size) : Json();
        gj["page_bytes"] = g.page_bytes;
        gj["capacity"] = g.capacity ? Json(g.capacity) : Json();
        pool.push_back(std::move(gj));
      }
      s["pool_groups"] = std::move(pool);
      s["state_slots"] = c.state_slots ? Json(c.state_slots) : Json();
      s["fits"] = c.fits;
      s["reason"] = c.fits ? Json() : Json(c.reason);
      if (at_context) {
        s["context"] = at_context->tokens;
        s["max_sequences"] = at_context->max_sequences;
        s["max_concurrency"] = at_context->max_concurrency;
        s["blocks_per_sequence"] =
            at_context->blocks_per_sequence ? Json(at_context->blocks_per_sequence) : Json();
        s["kv_bytes_per_sequence_per_gpu"] = at_context->bytes_per_sequence;
        if (profile) {
          std::optional<FullLoad> load = full_load(*at_context);
          Json d = Json::object();
          d["batch_per_replica"] = load ? Json(load->batch_per_replica) : Json();
          d["step_s"] = load ? Json(load->step_s) : Json();
          d["tokens_per_s"] = load ? Json(load->tokens_per_s) : Json();
          s["decode_at_max_sequences"] = std::move(d);
        }
      } else {
        s["context"] = Json();
      }
      if (c.max_context_at) {
        s["max_context_at"]["sequences"] = *at;
        s["max_context_at"]["context"] = *c.max_context_at;
        s["max_context_at"]["limited_by"] = c.max_context_capped ? "max_context" : "kv_cache";
      }
      if (args.explain) {
        Json lines = Json::array();
        for (const auto& line : render_derivation(c.derivation)) {
          lines.push_back(line);
        }
        s["derivation"] = std::move(lines);
      }
      scenarios.push_back(std::move(s));
    };
    auto row = [&](const ContextCapacity* x, std::optional<u64> tokens) {
      Cell context = tokens ? Cell::text(context_label(*tokens)) : Cell::empty();
      std::vector<Cell> cells{Cell::text(m.name),
                              Cell::text(c.gpu),
                              Cell::count(c.parallel.gpus),
                              Cell::count(c.parallel.tp),
                              Cell::text(std::string(engine_name(c.engine))),
                              Cell::bytes(c.weights_bytes_per_gpu),
                              c.fits ? Cell::bytes(c.kv_pool_bytes_per_gpu)
                                     : Cell::text("does not fit"),
                              Cell::bytes_exact(c.kv_bytes_per_token_per_gpu),
                              c.fits ? Cell::count(c.kv_tokens) : Cell::empty(),
                              c.num_blocks ? Cell::count(c.num_blocks) : Cell::empty(),
                              std::move(context),
                              x ? Cell::count(x->max_sequences) : Cell::empty(),
                              x && c.fits ? Cell::ratio(x->max_concurrency) : Cell::empty()};
      if (profile) {
        std::optional<FullLoad> load = x ? full_load(*x) : std::nullopt;
        cells.push_back(load ? Cell::seconds(load->step_s) : Cell::empty());
        cells.push_back(load ? Cell::number(load->tokens_per_s) : Cell::empty());
      }
      t.rows.push_back(cells);
      cells[10] = tokens ? Cell::count(*tokens) : Cell::empty(); // CSV: exact tokens
      csv.rows.push_back(std::move(cells));
    };
    for (const auto& x : c.contexts) {
      scenario(x);
      row(&x, x.tokens);
      if (c.engine == Engine::vllm && c.fits) {
        logs.push_back(fmt::format("{} on {} (tp {}): GPU KV cache size: {} tokens; # GPU blocks: "
                                   "{}; Maximum concurrency for {} tokens per request: {:.2f}x",
                                   m.name, c.gpu, c.parallel.tp, group_digits(c.kv_tokens),
                                   c.num_blocks, group_digits(x.tokens), x.max_concurrency));
      }
    }
    if (c.contexts.empty()) {
      scenario(std::nullopt);
      row(nullptr, c.max_context_at);
    }
    if (!c.fits) {
      t.notes.push_back(m.name + " on " + c.gpu + " (tp " + group_digits(c.parallel.tp) +
                        "): " + c.reason);
    }
    if (c.max_context_at) {
      t.notes.push_back(
          m.name + " on " + c.gpu + " (tp " + group_digits(c.parallel.tp) +
          "): longest context holding " + group_digits(*at) +
          " sequences: " + group_digits(*c.max_context_at) + " tokens" +
          (c.max_context_capped ? " (the model's max_context; the KV cache holds more)" : ""));
    }
    if (args.explain) {
      r.text_after.emplace_back();
      r.text_after.push_back(m.name + " on " + c.gpu + ", tp " + group_digits(c.parallel.tp) +
                             ", " + std::string(engine_name(c.engine)) + ":");
      std::vector<std::string> lines = render_derivation(c.derivation);
      r.text_after.insert(r.text_after.end(), lines.begin(), lines.end());
    }
  }
  for (const auto& line : logs) {
    t.notes.push_back(line);
  }
  t.notes.insert(t.notes.end(), unmodelled.begin(), unmodelled.end());
  bool estimated = std::any_of(results.begin(), results.end(),
                               [](const CapacityResult& c) { return c.non_kv_estimated; });
  if (estimated) {
    t.notes.push_back("non-KV memory besides weights is kvcalc's estimate (docs/formulas.md); "
                      "give --non-kv-memory or --kv-cache-memory from the engine's log for its "
                      "exact figures");
  }
  r.json["scenarios"] = std::move(scenarios);
  r.csv = std::move(csv);
  r.tables.push_back(std::move(t));
  emit(r, args.output, out);
  return 0;
}

} // namespace kvcalc::cli
