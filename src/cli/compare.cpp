// `compare`: models side by side against a baseline, with a deployment's sequences per model.

#include <algorithm>
#include <memory>

#include <kvcalc/core/error.hpp>
#include <kvcalc/model/loader.hpp>

#include "deployment.hpp"
#include "footprints.hpp"

namespace kvcalc::cli {

namespace {

struct CompareArgs {
  std::vector<std::string> models;
  std::string baseline; ///< empty: the first model
  std::vector<u64> contexts{4096, 32768, 131072};
  CacheRequest cache;
  std::optional<u64> block_size;
  bool explain = false;
  ParallelOptions parallel; ///< with a --gpu: the sequences each model fits
  EngineOptions engine = EngineOptions::of(Engine::vllm);
  OutputOptions output;
};

/// The entry `--baseline` names, else the first.
const Entry& baseline_of(const std::vector<Entry>& entries, const std::string& baseline) {
  const Entry* base = &entries.front();
  if (!baseline.empty()) {
    base = nullptr;
    Diagnostics ignored;
    std::string wanted = load_model(baseline, ignored).name;
    for (const auto& e : entries) {
      if (e.model.name == wanted) {
        base = &e;
      }
    }
    if (!base) {
      throw InputError("--baseline '" + baseline +
                       "' is not one of the compared models; add it to the list");
    }
  }
  if (base->footprint.bytes_per_token == 0) {
    throw InputError("baseline " + base->model.name +
                     " keeps no per-token KV cache; choose another --baseline");
  }
  return *base;
}

int run_compare(const CompareArgs& args, std::ostream& out, std::ostream& err) {
  FootprintOptions options;
  options.cache = args.cache;
  options.contexts = args.contexts;
  options.explain = args.explain;
  options.block_size = args.block_size.value_or(0);
  CommandOutput output(args.output, "compare", out, err);
  std::vector<std::string>& warnings = output.warnings;
  bool all_fit = true;
  std::vector<Entry> entries = footprint_entries(args.models, options, warnings);
  if (!args.parallel.gpus.empty()) {
    if (args.parallel.gpus.size() > 1 || args.parallel.tps.size() > 1) {
      throw InputError("compare takes one --gpu and one --tp; use kvcalc capacity to sweep");
    }
    std::vector<Model> models;
    for (const auto& e : entries) {
      models.push_back(e.model);
    }
    std::vector<Gpu> devices =
        deployment_devices(args.parallel, std::nullopt, GpuCatalog(args.parallel.gpu_file),
                           "compare takes catalog GPUs only", warnings);
    auto requests = capacity_requests(models, args.cache, args.parallel, args.engine,
                                      args.block_size, devices, args.contexts, std::nullopt);
    for (std::size_t i = 0; i < entries.size(); ++i) {
      entries[i].capacity = compute_capacity(requests[i]);
      const CapacityResult& c = *entries[i].capacity;
      std::string who = requests[i].model.name + " on " + c.gpu + ": ";
      for (const auto& note : c.notes) {
        // The footprint said the model's own remarks (a context past max_context) already.
        if (std::find(warnings.begin(), warnings.end(), note) == warnings.end()) {
          warnings.push_back(who + note);
        }
      }
      if (!holds_every_context(c)) {
        all_fit = false;
        warnings.push_back(
            who + (c.fits ? "does not hold one sequence of every context asked" : c.reason) + "; " +
            fit_hint(requests[i]));
      }
    }
  }
  const Entry& base = baseline_of(entries, args.baseline);
  Output::TableId table = output->begin_table("KV cache per sequence, baseline " + base.model.name,
                                              compare_columns(base));
  for (std::string& line : compare_notes(entries, base)) {
    output->note(table, std::move(line));
  }
  output->csv_view(flat_columns(true, options.block_size != 0), "contexts");
  output->field("baseline", base.model.name);
  output->stream(); // every model is loaded and sized: nothing below can fail
  output->begin_list("models");
  for (const auto& e : entries) {
    output->item(describe_footprint(e, &base, args.explain));
    if (args.explain) {
      explain_lines(e, output.document());
    }
  }
  output->end_list();
  output.finish();
  return static_cast<int>(all_fit ? ExitCode::ok : ExitCode::does_not_fit);
}

} // namespace

Command setup_compare(const Options& app) {
  auto args = std::make_shared<CompareArgs>();
  Options cmd = app.subcommand(
      "compare", "Models side by side: KV per token and per layer, ratio to a baseline");
  cmd.option("models", args->models, k_models_help).type_name("MODEL").required();
  cmd.option("--baseline", args->baseline,
             "The model ratios are taken against [default: the first]")
      .type_name("MODEL")
      .group(k_group_model);
  add_footprint_options(cmd, args->contexts, args->cache, args->block_size);
  add_parallel_options(cmd, args->parallel, ParallelScope::deployment, false);
  add_engine_options(cmd, args->engine);
  add_explain_option(cmd, args->explain);
  add_output_options(cmd, args->output, ScaledBytes::yes);
  return {cmd.app(),
          [args](std::ostream& out, std::ostream& err) { return run_compare(*args, out, err); }};
}

} // namespace kvcalc::cli
