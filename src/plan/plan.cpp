#include <kvcalc/plan/plan.hpp>

#include <algorithm>
#include <array>
#include <filesystem>
#include <functional>

#include <fmt/format.h>

#include <kvcalc/core/spell.hpp>
#include <kvcalc/core/units.hpp>

#include "../core/yaml_support.hpp"

using namespace kvcalc::kv;
using namespace kvcalc::device;
using namespace kvcalc::model;

namespace kvcalc::plan {

namespace {

using detail::MapReader;

constexpr std::array<std::string_view, 31> k_setting_keys{"model",
                                                          "gpu",
                                                          "gpus",
                                                          "tp",
                                                          "pp",
                                                          "ep",
                                                          "dcp",
                                                          "dp_attention",
                                                          "dp",
                                                          "redundant_experts",
                                                          "engine",
                                                          "gpu_memory_utilization",
                                                          "mem_fraction_static",
                                                          "free_gpu_memory_fraction",
                                                          "block_size",
                                                          "max_batched_tokens",
                                                          "max_seqs",
                                                          "max_model_len",
                                                          "num_gpu_blocks_override",
                                                          "reserve",
                                                          "non_kv_memory",
                                                          "kv_cache_memory",
                                                          "kv_dtype",
                                                          "kv_scale",
                                                          "kv_scale_dtype",
                                                          "mla_cache",
                                                          "mamba_cache_dtype",
                                                          "mamba_ssm_cache_dtype",
                                                          "mamba_cache_mode",
                                                          "weight_dtype",
                                                          "mtp"};

/// A setting only one engine has (vLLM's gpu_memory_utilization, SGLang's mem_fraction_static,
/// …). It is checked against the engine once defaults and scenario are merged: a scenario's own
/// key must be its engine's, and a default applies to the scenarios of its engine only.
struct EngineKey {
  std::string key;
  Engine owner;
  SourceLocation where;
  std::function<void(EngineSettings&)> apply;
  bool used = false; ///< a default some scenario took
};

/// Applies the settings present in `r` over `s`; the engine-owned ones go to `engine_keys`.
void read_settings(const MapReader& r, PlanScenario& s, std::vector<EngineKey>& engine_keys) {
  CapacityRequest& q = s.request;
  if (r.has("model")) {
    s.model = *r.text("model");
  }
  if (r.has("gpu")) {
    s.gpu = *r.text("gpu");
  }
  auto count = [&](std::string_view key, u64& into) {
    if (r.has(key)) {
      into = r.parsed(key, [&](const std::string& t) { return parse_count(t, key); });
    }
  };
  count("gpus", q.parallel.gpus);
  count("tp", q.parallel.tp);
  count("pp", q.parallel.pp);
  count("ep", q.parallel.ep);
  count("dcp", q.parallel.dcp);
  count("dp", q.parallel.dp);
  count("redundant_experts", q.parallel.redundant_experts);
  if (auto dp = r.flag("dp_attention")) {
    q.parallel.dp_attention = *dp;
  }
  if (r.has("engine")) {
    q.engine.engine = r.parsed("engine", [](const std::string& t) { return parse_engine(t); });
  }
  auto engine_key = [&](std::string_view key, Engine owner,
                        std::function<void(EngineSettings&)> apply) {
    engine_keys.push_back({std::string(key), owner, r.where(key), std::move(apply)});
  };
  struct Fraction {
    std::string_view key;
    Engine engine;
  };
  for (const Fraction& f : {Fraction{"gpu_memory_utilization", Engine::vllm},
                            Fraction{"mem_fraction_static", Engine::sglang},
                            Fraction{"free_gpu_memory_fraction", Engine::trtllm}}) {
    if (r.has(f.key)) {
      double fraction =
          r.parsed(f.key, [&](const std::string& t) { return parse_fraction(t, f.key, 0.0, 1.0); });
      if (fraction <= 0) {
        r.fail(f.key, std::string(f.key) + " must be above 0: it is the share of GPU memory "
                                           "the engine may use");
      }
      engine_key(f.key, f.engine, [fraction](EngineSettings& e) { e.memory_fraction = fraction; });
    }
  }
  auto optional_count = [&](std::string_view key, std::optional<u64>& into) {
    if (r.has(key)) {
      into = r.parsed(key, [&](const std::string& t) { return parse_count(t, key); });
    }
  };
  optional_count("block_size", q.engine.block_size);
  optional_count("max_batched_tokens", q.engine.max_batched_tokens);
  optional_count("max_seqs", q.engine.max_seqs);
  if (r.has("max_model_len") && iequals(*r.text("max_model_len"), "auto")) {
    q.engine.max_model_len_auto = true;
  } else {
    optional_count("max_model_len", q.engine.max_model_len);
  }
  if (r.has("num_gpu_blocks_override")) {
    std::optional<u64> blocks;
    optional_count("num_gpu_blocks_override", blocks);
    if (*blocks == 0) {
      r.fail("num_gpu_blocks_override", "num_gpu_blocks_override must be at least 1 block");
    }
    engine_key("num_gpu_blocks_override", Engine::vllm,
               [blocks](EngineSettings& e) { e.num_gpu_blocks = blocks; });
  }
  auto optional_bytes = [&](std::string_view key, std::optional<u64>& into) {
    if (r.has(key)) {
      into = r.parsed(key, [&](const std::string& t) { return parse_bytes(t, key); });
    }
  };
  optional_bytes("reserve", q.engine.reserve_bytes);
  optional_bytes("non_kv_memory", q.engine.non_kv_bytes);
  optional_bytes("kv_cache_memory", q.engine.kv_cache_bytes);
  auto dtype = [&](std::string_view key, std::optional<DType>& into) {
    if (r.has(key)) {
      into = r.parsed(key, [&](const std::string& t) { return parse_dtype_or_auto(t, key); });
    }
  };
  dtype("kv_dtype", q.cache.dtype);
  dtype("kv_scale_dtype", q.cache.scale_dtype);
  dtype("weight_dtype", q.weight_dtype);
  if (r.has("kv_scale")) {
    auto [granularity, group] =
        r.parsed("kv_scale", [](const std::string& t) { return parse_scale(t); });
    q.cache.scale = granularity;
    if (granularity == ScaleGranularity::per_group) {
      q.cache.scale_group = group;
    }
  }
  if (r.has("mla_cache")) {
    q.cache.mla_format =
        r.parsed("mla_cache", [](const std::string& t) { return parse_mla_format(t); });
  }
  auto state_dtype = [&](std::string_view key, std::optional<DType>& into) {
    if (r.has(key)) {
      into = r.parsed(key, [&](const std::string& t) { return parse_state_dtype(t, key); });
    }
  };
  state_dtype("mamba_cache_dtype", q.cache.state_dtype);
  state_dtype("mamba_ssm_cache_dtype", q.cache.ssm_state_dtype);
  if (r.has("mamba_cache_mode")) {
    MambaCacheMode mode = r.parsed(
        "mamba_cache_mode", [](const std::string& t) { return k_mamba_cache_modes.parse(t); });
    engine_key("mamba_cache_mode", Engine::vllm,
               [mode](EngineSettings& e) { e.mamba_cache_mode = mode; });
  }
  if (auto mtp = r.flag("mtp")) {
    q.mtp = *mtp;
  }
}

Requirement read_requirement(const MapReader& r) {
  r.allow_only({"min_sequences", "context", "min_context", "sequences", "max_kv_share",
                "min_kv_share", "min_kv_tokens", "fits"});
  Requirement q;
  q.where = detail::location_of(r.yaml(), r.locations()->file());
  auto count = [&](std::string_view key) {
    return r.parsed(key, [&](const std::string& t) { return parse_count(t, key); });
  };
  auto share = [&](std::string_view key) {
    return r.parsed(key, [&](const std::string& t) { return parse_fraction(t, key, 0, 1); });
  };
  int kinds = 0;
  for (const auto& kind : k_requirement_kinds.entries()) {
    kinds += r.has(kind.name) ? 1 : 0;
  }
  if (kinds != 1) {
    throw InputError(q.where, "each requirement states exactly one of min_sequences (with "
                              "context), min_context (with sequences), max_kv_share, "
                              "min_kv_share, min_kv_tokens, fits");
  }
  if (r.has("min_sequences")) {
    q.kind = RequirementKind::min_sequences;
    q.value = count("min_sequences");
    if (!r.has("context")) {
      throw InputError(q.where, "min_sequences needs 'context': the tokens of each sequence");
    }
    q.context = count("context");
  } else if (r.has("min_context")) {
    q.kind = RequirementKind::min_context;
    q.value = count("min_context");
    if (!r.has("sequences")) {
      throw InputError(q.where, "min_context needs 'sequences': how many run at once");
    }
    q.sequences = count("sequences");
  } else if (r.has("max_kv_share") || r.has("min_kv_share")) {
    bool max = r.has("max_kv_share");
    q.kind = max ? RequirementKind::max_kv_share : RequirementKind::min_kv_share;
    q.share = share(max ? "max_kv_share" : "min_kv_share");
  } else if (r.has("min_kv_tokens")) {
    q.kind = RequirementKind::min_kv_tokens;
    q.value = count("min_kv_tokens");
  } else {
    q.kind = RequirementKind::fits;
    if (!*r.flag("fits")) {
      r.fail("fits", "'fits: false' is not a requirement; use 'fits: true' or drop it");
    }
  }
  for (std::string_view key : {"context", "sequences"}) {
    bool allowed = (key == "context" && q.kind == RequirementKind::min_sequences) ||
                   (key == "sequences" && q.kind == RequirementKind::min_context);
    if (r.has(key) && !allowed) {
      r.fail(key, "'" + std::string(key) + "' does not apply to this requirement");
    }
  }
  return q;
}

/// A model as a plan names it: a path relative to the plan's folder (never to the working
/// folder), else a bundled name or a Hub repo id, as given.
std::string plan_model(const std::string& spec, const std::filesystem::path& base) {
  std::filesystem::path given(spec);
  if (given.is_absolute() || base.empty()) {
    return spec;
  }
  std::filesystem::path beside_plan = base / given;
  std::error_code ec;
  bool names_a_file = spec.ends_with(".yaml") || spec.ends_with(".yml") ||
                      spec.ends_with(".json") || spec.starts_with("./") || spec.starts_with("../");
  if (names_a_file || std::filesystem::exists(beside_plan, ec)) {
    return beside_plan.string();
  }
  return spec;
}

} // namespace

Plan parse_plan(const std::string& text, const std::string& file) {
  YAML::Node root = detail::parse_yaml(text, file);
  if (!root.IsDefined() || root.IsNull()) {
    throw InputError(SourceLocation{file, 0, 0}, "the plan is empty (docs/capacity-plans.md)");
  }
  auto locations = std::make_shared<detail::LocationMap>(file, detail::location_of(root, file),
                                                         "docs/capacity-plans.md");
  MapReader top(root, "", locations);
  top.allow_only({"defaults", "scenarios", "gpu_file"});
  Plan plan;
  plan.file = file;
  std::filesystem::path base = std::filesystem::path(file).parent_path();
  if (auto gpu_file = top.text("gpu_file")) {
    plan.gpu_file = (base / *gpu_file).string();
  }
  PlanScenario defaults;
  defaults.gpu = "h100-sxm";
  defaults.request.engine.engine = Engine::vllm; // the default of every command with an engine
  std::vector<EngineKey> default_keys;
  if (auto d = top.map("defaults")) {
    d->allow_only(k_setting_keys);
    read_settings(*d, defaults, default_keys);
  }
  YAML::Node list = top.node("scenarios");
  if (!list.IsDefined() || !list.IsSequence() || list.size() == 0) {
    throw InputError(detail::location_of(root, file),
                     "a plan needs a non-empty 'scenarios:' list (docs/capacity-plans.md)");
  }
  for (std::size_t i = 0; i < list.size(); ++i) {
    MapReader r(list[i], "scenarios[" + std::to_string(i) + "]", locations);
    std::vector<std::string_view> keys(k_setting_keys.begin(), k_setting_keys.end());
    keys.push_back("name");
    keys.push_back("require");
    r.allow_only(keys);
    PlanScenario s = defaults;
    s.where = detail::location_of(list[i], file);
    std::vector<EngineKey> own;
    read_settings(r, s, own);
    s.name = r.text("name").value_or("scenario " + std::to_string(i + 1));
    Engine engine = s.request.engine.engine;
    for (EngineKey& d : default_keys) {
      bool replaced =
          std::any_of(own.begin(), own.end(), [&](const EngineKey& k) { return k.key == d.key; });
      if (d.owner == engine && !replaced) {
        d.apply(s.request.engine);
        d.used = true;
      }
    }
    for (const EngineKey& k : own) {
      if (k.owner != engine) {
        throw InputError(
            k.where, k.key + " belongs to engine " + std::string(engine_name(k.owner)) +
                         " and scenario '" + s.name + "' runs " + std::string(engine_name(engine)) +
                         "; set engine: " + std::string(engine_name(k.owner)) + " or drop the key");
      }
      k.apply(s.request.engine);
    }
    s.model = plan_model(s.model, base);
    YAML::Node require = r.node("require");
    if (!require.IsDefined() || !require.IsSequence() || require.size() == 0) {
      throw InputError(s.where, "scenario '" + s.name + "' needs a non-empty 'require:' list");
    }
    for (std::size_t k = 0; k < require.size(); ++k) {
      MapReader q(require[k], r.path_of("require") + "[" + std::to_string(k) + "]", locations);
      s.requirements.push_back(read_requirement(q));
    }
    plan.scenarios.push_back(std::move(s));
  }
  for (const EngineKey& k : default_keys) {
    if (!k.used) {
      throw InputError(k.where, "defaults: " + k.key + " belongs to engine " +
                                    std::string(engine_name(k.owner)) +
                                    " and no scenario runs it; drop the key or set engine: " +
                                    std::string(engine_name(k.owner)));
    }
  }
  return plan;
}

bool ScenarioResult::passed() const {
  return std::all_of(requirements.begin(), requirements.end(),
                     [](const RequirementResult& r) { return r.passed; });
}

namespace {

std::string percent(double f) {
  return fmt::format("{:.1f}%", f * 100);
}

} // namespace

std::vector<ScenarioResult> evaluate_plan(const Plan& plan, Diagnostics& diagnostics) {
  GpuCatalog catalog(plan.gpu_file);
  std::vector<ScenarioResult> out;
  for (const PlanScenario& s : plan.scenarios) {
    ScenarioResult res;
    res.scenario = &s;
    CapacityRequest req = s.request;
    try {
      res.model = load_model(s.model, diagnostics);
      req.model = res.model;
      req.gpu = catalog.find(s.gpu);
      for (const Requirement& q : s.requirements) {
        if (q.kind == RequirementKind::min_sequences &&
            std::find(req.contexts.begin(), req.contexts.end(), q.context) == req.contexts.end()) {
          req.contexts.push_back(q.context);
        }
      }
      res.capacity = compute_capacity(req);
    } catch (const InputError& e) {
      throw InputError(s.where, "scenario '" + s.name + "': " + e.what());
    }
    const CapacityResult& c = res.capacity;
    double share =
        static_cast<double>(c.kv_pool_bytes_per_gpu) / static_cast<double>(c.memory_bytes);
    for (const Requirement& q : s.requirements) {
      RequirementResult rr;
      rr.requirement = q;
      switch (q.kind) {
      case RequirementKind::min_sequences: {
        auto at = std::find_if(c.contexts.begin(), c.contexts.end(),
                               [&](const ContextCapacity& x) { return x.tokens == q.context; });
        rr.text =
            "≥ " + group_digits(q.value) + " sequences at " + group_digits(q.context) + " tokens";
        rr.actual = group_digits(at->max_sequences);
        rr.actual_count = at->max_sequences;
        rr.passed = at->max_sequences >= q.value;
        break;
      }
      case RequirementKind::min_context: {
        CapacityRequest again = req;
        again.contexts.clear();
        again.max_context_at = q.sequences;
        CapacityResult x = compute_capacity(again);
        u64 got = x.max_context_at.value_or(0);
        rr.text = "≥ " + group_digits(q.value) + " tokens of context at " +
                  group_digits(q.sequences) + " sequences";
        rr.actual =
            group_digits(got) + (x.max_context_limited_by == "max_model_len" ? " (max_model_len)"
                                 : x.max_context_limited_by == "max_context" ? " (model max)"
                                                                             : "");
        rr.actual_count = got;
        rr.passed = got >= q.value;
        break;
      }
      case RequirementKind::max_kv_share:
        rr.text = "KV pool ≤ " + percent(q.share) + " of GPU memory";
        rr.actual = percent(share);
        rr.actual_share = share;
        rr.passed = share <= q.share;
        break;
      case RequirementKind::min_kv_share:
        rr.text = "KV pool ≥ " + percent(q.share) + " of GPU memory";
        rr.actual = percent(share);
        rr.actual_share = share;
        rr.passed = share >= q.share;
        break;
      case RequirementKind::min_kv_tokens:
        rr.text = "≥ " + group_digits(q.value) + " KV tokens per pool";
        rr.actual = group_digits(c.kv_tokens);
        rr.actual_count = c.fits ? c.kv_tokens : 0;
        rr.passed = c.fits && c.kv_tokens >= q.value;
        break;
      case RequirementKind::fits:
        rr.text = "weights and reserve fit";
        rr.actual = c.fits ? "yes" : "no: " + c.reason;
        rr.passed = c.fits;
        break;
      }
      res.requirements.push_back(std::move(rr));
    }
    out.push_back(std::move(res));
  }
  return out;
}

} // namespace kvcalc::plan
