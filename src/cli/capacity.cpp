// `capacity`: how many sequences fit, engine by engine.

#include <algorithm>
#include <memory>
#include <set>

#include <fmt/format.h>

#include <kvcalc/core/error.hpp>
#include <kvcalc/core/units.hpp>
#include <kvcalc/kv/capacity.hpp>
#include <kvcalc/roofline/roofline.hpp>

#include "deployment.hpp"

namespace kvcalc::cli {

namespace {

struct CapacityArgs {
  std::vector<std::string> models;
  std::vector<u64> contexts; ///< empty: 4k,32k,128k unless --max-context-at is given
  std::optional<u64> max_context_at;
  std::optional<u64> block_size; ///< the engine's when unset
  bool explain = false;
  std::string device_profile; ///< measured ceilings: adds the decode step at full load
  CacheRequest cache;
  ParallelOptions parallel = ParallelOptions::on({"h100-sxm"});
  EngineOptions engine = EngineOptions::of(Engine::vllm);
  OutputOptions output;
};

/// One decode step with every sequence that fits running, each at its context (with measured
/// ceilings; docs/formulas.md, "Roofline"); tokens/s over all replicas.
struct FullLoad {
  u64 batch_per_replica = 0;
  double step_s = 0;
  double tokens_per_s = 0;
};

struct Scenario {
  CapacityRequest request;
  CapacityResult result;
  std::vector<std::optional<FullLoad>> loads; ///< per context, with a profile
};

std::optional<FullLoad> full_load(const Scenario& s, const ContextCapacity& x,
                                  const DeviceProfile& profile, std::set<std::string>& unmodelled) {
  const CapacityResult& c = s.result;
  if (!c.fits || x.max_sequences == 0) {
    return std::nullopt;
  }
  const CapacityRequest& req = s.request;
  RooflineRequest rr;
  rr.model = req.model;
  rr.gpu = req.gpu;
  rr.rates = device_rates(req.gpu, profile);
  rr.cache = req.cache;
  rr.weight_dtype = req.weight_dtype;
  rr.parallel = c.parallel;
  rr.parallel.gpus = 0; // one copy
  rr.parallel.dcp = 1;
  rr.phase = Phase::decode;
  rr.batch = std::max<u64>(1, x.max_sequences / c.replicas);
  rr.context = x.tokens;
  try {
    RooflineResult step = compute_roofline(rr);
    return FullLoad{rr.batch, step.time_s, step.tokens_per_s * static_cast<double>(c.replicas)};
  } catch (const InputError& e) {
    unmodelled.insert(req.model.name + ": no decode time: " + e.what());
    return std::nullopt;
  }
}

Json pool_groups_json(const CapacityResult& c) {
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
  return pool;
}

/// One scenario's JSON at one context (none with only --max-context-at).
Json scenario_json(const Scenario& s, const ContextCapacity* x, const std::optional<FullLoad>* load,
                   bool profiled, const CapacityArgs& args) {
  const CapacityResult& c = s.result;
  Json j = Json::object();
  j["model"] = s.request.model.name;
  j["gpu"] = c.gpu;
  j["engine"] = std::string(engine_name(c.engine));
  j["gpus"] = c.parallel.gpus;
  j["tp"] = c.parallel.tp;
  j["pp"] = c.parallel.pp;
  j["ep"] = c.parallel.ep;
  j["dcp"] = c.parallel.dcp;
  j["dp_attention"] = c.parallel.dp_attention;
  j["replicas"] = c.replicas;
  j["kv_pools"] = c.kv_pools;
  j["weight_dtype"] = std::string(dtype_name(c.weight_dtype));
  j["kv_cache"] = describe(c.cache);
  j["memory_bytes_per_gpu"] = c.memory_bytes;
  j["memory_fraction"] = c.engine == Engine::plain ? Json() : Json(c.memory_fraction);
  j["weights_bytes_per_gpu"] = c.weights_bytes_per_gpu;
  j["other_non_kv_bytes_per_gpu"] = c.other_non_kv_bytes_per_gpu;
  j["non_kv_estimated"] = c.non_kv_estimated;
  j["kv_pool_bytes_per_gpu"] = c.kv_pool_bytes_per_gpu;
  j["kv_bytes_per_token_per_gpu"] = c.kv_bytes_per_token_per_gpu;
  j["kv_tokens"] = c.kv_tokens;
  j["block_size"] = c.block_size ? Json(c.block_size) : Json();
  j["num_blocks"] = c.num_blocks ? Json(c.num_blocks) : Json();
  j["max_batched_tokens"] = c.max_batched_tokens;
  j["engine_rules"] = c.engine_rules;
  j["pool_groups"] = pool_groups_json(c);
  j["state_slots"] = c.state_slots ? Json(c.state_slots) : Json();
  j["fits"] = c.fits;
  j["reason"] = c.fits ? Json() : Json(c.reason);
  if (x) {
    j["context"] = x->tokens;
    j["max_sequences"] = x->max_sequences;
    j["max_concurrency"] = x->max_concurrency;
    j["blocks_per_sequence"] = x->blocks_per_sequence ? Json(x->blocks_per_sequence) : Json();
    j["kv_bytes_per_sequence_per_gpu"] = x->bytes_per_sequence;
    if (profiled) {
      Json d = Json::object();
      d["batch_per_replica"] = *load ? Json((*load)->batch_per_replica) : Json();
      d["step_s"] = *load ? Json((*load)->step_s) : Json();
      d["tokens_per_s"] = *load ? Json((*load)->tokens_per_s) : Json();
      j["decode_at_max_sequences"] = std::move(d);
    }
  } else {
    j["context"] = Json();
  }
  if (c.max_context_at) {
    j["max_context_at"]["sequences"] = *args.max_context_at;
    j["max_context_at"]["context"] = *c.max_context_at;
    j["max_context_at"]["limited_by"] = c.max_context_capped ? "max_context" : "kv_cache";
  }
  if (args.explain) {
    j["derivation"] = string_array(render_derivation(c.derivation));
  }
  return j;
}

/// One row at one context; `exact_context`: the CSV's raw token count instead of "4k".
std::vector<Cell> scenario_row(const Scenario& s, const ContextCapacity* x,
                               std::optional<u64> tokens, const std::optional<FullLoad>* load,
                               bool profiled, bool exact_context) {
  const CapacityResult& c = s.result;
  Cell context = !tokens         ? Cell::empty()
                 : exact_context ? Cell::count(*tokens)
                                 : Cell::text(context_label(*tokens));
  std::vector<Cell> cells{Cell::text(s.request.model.name),
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
  if (profiled) {
    bool timed = load && *load;
    cells.push_back(timed ? Cell::seconds((*load)->step_s) : Cell::empty());
    cells.push_back(timed ? Cell::number((*load)->tokens_per_s) : Cell::empty());
  }
  return cells;
}

std::string who(const Scenario& s) {
  return s.request.model.name + " on " + s.result.gpu + " (tp " +
         group_digits(s.result.parallel.tp) + ")";
}

int run_capacity(const CapacityArgs& args, std::ostream& out, std::ostream& err) {
  std::vector<u64> contexts = args.contexts;
  if (contexts.empty() && !args.max_context_at) {
    contexts = {4096, 32768, 131072};
  }
  Rendered r;
  std::vector<Model> models = load_models(args.models, r.warnings);
  std::optional<DeviceProfile> profile = read_device_profile(args.device_profile);
  std::vector<Gpu> devices =
      deployment_devices(args.parallel, profile, GpuCatalog(args.parallel.gpu_file),
                         "add a --device-profile that kvcalc measure wrote", r.warnings);

  // Compute every scenario, and with a profile its decode step at full load, before describing.
  std::vector<Scenario> scenarios;
  std::set<std::string> unmodelled; // models the roofline cannot time, said once each
  for (auto& req : capacity_requests(models, args.cache, args.parallel, args.engine,
                                     args.block_size, devices, contexts, args.max_context_at)) {
    req.explain = args.explain;
    Scenario s{req, compute_capacity(req), {}};
    for (const auto& note : s.result.notes) {
      r.warnings.push_back(req.model.name + " on " + req.gpu.name + ": " + note);
    }
    for (const auto& x : s.result.contexts) {
      s.loads.push_back(profile ? full_load(s, x, *profile, unmodelled) : std::nullopt);
    }
    scenarios.push_back(std::move(s));
  }

  r.json = json_header("capacity");
  Json list = Json::array();
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
  for (const Scenario& s : scenarios) {
    const CapacityResult& c = s.result;
    for (std::size_t i = 0; i < c.contexts.size(); ++i) {
      const ContextCapacity& x = c.contexts[i];
      list.push_back(scenario_json(s, &x, &s.loads[i], profile.has_value(), args));
      t.rows.push_back(scenario_row(s, &x, x.tokens, &s.loads[i], profile.has_value(), false));
      csv.rows.push_back(scenario_row(s, &x, x.tokens, &s.loads[i], profile.has_value(), true));
      if (c.engine == Engine::vllm && c.fits) {
        logs.push_back(fmt::format("{} on {} (tp {}): GPU KV cache size: {} tokens; # GPU blocks: "
                                   "{}; Maximum concurrency for {} tokens per request: {:.2f}x",
                                   s.request.model.name, c.gpu, c.parallel.tp,
                                   group_digits(c.kv_tokens), c.num_blocks, group_digits(x.tokens),
                                   x.max_concurrency));
      }
    }
    if (c.contexts.empty()) {
      list.push_back(scenario_json(s, nullptr, nullptr, profile.has_value(), args));
      t.rows.push_back(
          scenario_row(s, nullptr, c.max_context_at, nullptr, profile.has_value(), false));
      csv.rows.push_back(
          scenario_row(s, nullptr, c.max_context_at, nullptr, profile.has_value(), true));
    }
    if (!c.fits) {
      t.notes.push_back(who(s) + ": " + c.reason);
    }
    if (c.max_context_at) {
      t.notes.push_back(
          who(s) + ": longest context holding " + group_digits(*args.max_context_at) +
          " sequences: " + group_digits(*c.max_context_at) + " tokens" +
          (c.max_context_capped ? " (the model's max_context; the KV cache holds more)" : ""));
    }
    if (args.explain) {
      r.text_after.emplace_back();
      r.text_after.push_back(s.request.model.name + " on " + c.gpu + ", tp " +
                             group_digits(c.parallel.tp) + ", " +
                             std::string(engine_name(c.engine)) + ":");
      std::vector<std::string> lines = render_derivation(c.derivation);
      r.text_after.insert(r.text_after.end(), lines.begin(), lines.end());
    }
  }
  t.notes.insert(t.notes.end(), logs.begin(), logs.end());
  t.notes.insert(t.notes.end(), unmodelled.begin(), unmodelled.end());
  if (std::any_of(scenarios.begin(), scenarios.end(),
                  [](const Scenario& s) { return s.result.non_kv_estimated; })) {
    t.notes.push_back("non-KV memory besides weights is kvcalc's estimate (docs/formulas.md); "
                      "give --non-kv-memory or --kv-cache-memory from the engine's log for its "
                      "exact figures");
  }
  r.json["scenarios"] = std::move(list);
  r.csv = std::move(csv);
  r.tables.push_back(std::move(t));
  emit(r, args.output, out, err);
  return 0;
}

} // namespace

Command setup_capacity(CLI::App& app) {
  auto args = std::make_shared<CapacityArgs>();
  CLI::App* cmd = app.add_subcommand(
      "capacity", "Sequences that fit per GPU and deployment, with engine-exact budgets");
  cmd->add_option("models", args->models, k_models_help)->type_name("MODEL")->required();
  add_counts(cmd, "--context", args->contexts,
             "Context lengths in tokens, comma-separated: 4096, 4k, 128k, 1M [default: "
             "4k,32k,128k]")
      ->type_name("TOKENS,...")
      ->group(k_group_model);
  add_count(cmd, "--max-context-at", args->max_context_at,
            "Also find the longest context at which this many sequences fit")
      ->group(k_group_model);
  add_cache_options(cmd, args->cache);
  add_parallel_options(cmd, args->parallel, ParallelScope::deployment, true);
  add_engine_options(cmd, args->engine);
  add_count(cmd, "--block-size", args->block_size,
            "Page size in tokens [default: vLLM 16 (MLA 64 on Hopper, 128 on Blackwell), "
            "TensorRT-LLM 32, SGLang 1, plain none]")
      ->type_name("TOKENS")
      ->group(k_group_engine);
  cmd->add_option("--device-profile", args->device_profile,
                  "Measured ceilings (kvcalc measure --profile): adds the decode step time and "
                  "tokens/s with every sequence that fits running (docs/device-profile.md)")
      ->type_name("FILE")
      ->group(k_group_ceilings);
  cmd->add_flag("--explain", args->explain, "Print the budget, step by step")
      ->group(k_group_output);
  add_output_options(cmd, args->output, ScaledBytes::yes);
  return {cmd,
          [args](std::ostream& out, std::ostream& err) { return run_capacity(*args, out, err); }};
}

} // namespace kvcalc::cli
