// `capacity`: how many sequences fit, engine by engine.

#include <algorithm>
#include <memory>
#include <set>

#include <fmt/format.h>

#include <kvcalc/core/error.hpp>
#include <kvcalc/core/file.hpp>
#include <kvcalc/core/units.hpp>
#include <kvcalc/kv/capacity.hpp>
#include <kvcalc/report/record.hpp>
#include <kvcalc/report/svg.hpp>
#include <kvcalc/roofline/roofline.hpp>

#include "deployment.hpp"
#include "sweep.hpp"

using namespace kvcalc::roofline;
using namespace kvcalc::kv;

namespace kvcalc::cli {

namespace {

struct CapacityArgs {
  std::vector<std::string> models;
  std::vector<u64> contexts; ///< empty: 4k,32k,128k unless --max-context-at is given
  std::optional<u64> max_context_at;
  std::optional<u64> block_size; ///< the engine's when unset
  bool explain = false;
  CeilingOptions ceilings; ///< measured ceilings: adds the decode step at full load
  std::string plot;        ///< SVG of sequences against context
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
  std::optional<StepEstimate> estimate; ///< the same step as the kernels reach it, where known
  double replicas = 1;
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
  EstimateChoice estimate = choose_estimator(req.gpu, &profile);
  rr.rates.estimate = std::move(estimate.estimator);
  rr.rates.estimate_note = std::move(estimate.note);
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
    auto replicas = static_cast<double>(c.replicas);
    return FullLoad{rr.batch, step.time_s, step.tokens_per_s * replicas, step.estimate, replicas};
  } catch (const InputError& e) {
    unmodelled.insert(req.model.name + ": no decode time: " + e.what());
    return std::nullopt;
  }
}

void describe_pool_groups(std::vector<Record>& out, const CapacityResult& c) {
  for (const PoolGroup& g : c.pool_groups) {
    Record& r = out.emplace_back();
    r.value("kind", Cell::text(g.kind));
    r.value("layers", Cell::count(g.layers));
    r.value("groups", Cell::count(g.groups));
    r.value("block_size", g.block_size ? Cell::count(g.block_size) : Cell::empty());
    r.value("page_bytes", Cell::bytes_exact(g.page_bytes));
    r.value("capacity", g.capacity ? Cell::count(g.capacity) : Cell::empty());
  }
}

/// One scenario at one context (none with only --max-context-at): a JSON object and a row.
/// Where a scenario does not fit, people read "does not fit" and "-" where its pool would be;
/// JSON and CSV keep the numbers.
Record describe_row(const Scenario& s, const ContextCapacity* x,
                    const std::optional<FullLoad>* load, bool profiled, const CapacityArgs& args) {
  const CapacityResult& c = s.result;
  Record r;
  r.value("model", "model", Cell::text(s.request.model.name));
  r.value("gpu", "gpu", Cell::text(c.gpu));
  r.value("engine", "engine", Cell::text(std::string(engine_name(c.engine))));
  r.value("gpus", "gpus", Cell::count(c.parallel.gpus));
  r.value("tp", "tp", Cell::count(c.parallel.tp));
  r.value("pp", Cell::count(c.parallel.pp));
  r.value("ep", Cell::count(c.parallel.ep));
  r.value("dcp", Cell::count(c.parallel.dcp));
  r.value("dp_attention", Cell::flag(c.parallel.dp_attention));
  r.value("attention_dp", Cell::count(c.parallel.dp));
  r.value("replicas", Cell::count(c.replicas));
  r.value("kv_pools", Cell::count(c.kv_pools));
  r.value("weight_dtype", Cell::text(std::string(dtype_name(c.weight_dtype))));
  r.value("kv_cache", Cell::text(describe(c.cache)));
  r.value("memory_bytes_per_gpu", Cell::bytes(c.memory_bytes));
  r.value("memory_fraction",
          c.engine == Engine::plain ? Cell::empty() : Cell::number(c.memory_fraction));
  r.value("weights_bytes_per_gpu", "weights/GPU", Cell::bytes(c.weights_bytes_per_gpu));
  r.value("other_non_kv_bytes_per_gpu", Cell::bytes(c.other_non_kv_bytes_per_gpu));
  r.value("non_kv_estimated", Cell::flag(c.non_kv_estimated));
  Cell pool = Cell::bytes(c.kv_pool_bytes_per_gpu);
  r.value("kv_pool_bytes_per_gpu", "KV pool/GPU", c.fits ? pool : pool.shown_as("does not fit"));
  r.value("kv_bytes_per_token_per_gpu", "KV/token/GPU",
          Cell::bytes_exact(c.kv_bytes_per_token_per_gpu));
  Cell tokens = Cell::count(c.kv_tokens);
  r.value("kv_tokens", "KV tokens", c.fits ? tokens : tokens.shown_as("-"));
  r.value("block_size", c.block_size ? Cell::count(c.block_size) : Cell::empty());
  r.value("num_blocks", "blocks", c.num_blocks ? Cell::count(c.num_blocks) : Cell::empty());
  r.value("max_batched_tokens", Cell::count(c.max_batched_tokens));
  r.value("max_model_len", c.max_model_len ? Cell::count(c.max_model_len) : Cell::empty());
  r.value("longest_request", c.longest_request ? Cell::count(*c.longest_request) : Cell::empty());
  if (!holds_every_context(c)) {
    if (std::optional<Parallelism> p = smallest_fitting_tp(s.request)) {
      Record& at = r.object("fits_at");
      at.value("gpus", Cell::count(p->gpus));
      at.value("tp", Cell::count(p->tp));
    } else {
      r.value("fits_at", Cell::empty());
    }
  }
  r.value("engine_rules", Cell::text(c.engine_rules));
  describe_pool_groups(r.list("pool_groups"), c);
  r.value("state_slots", c.state_slots ? Cell::count(c.state_slots) : Cell::empty());
  r.value("fits", Cell::flag(c.fits));
  // The deployment's reason, else this context's: one sequence of it does not fit.
  std::string why = !c.fits ? c.reason : x ? x->too_long : std::string();
  describe_outcome(r, why.empty() ? Outcome::ok : Outcome::does_not_fit, why);
  if (x) {
    r.value("context", "context", Cell::tokens(x->tokens));
    r.value("max_sequences", "max seqs", Cell::count(x->max_sequences));
    Cell concurrency = Cell::concurrency(x->max_concurrency);
    r.value("max_concurrency", "concurrency", c.fits ? concurrency : concurrency.shown_as("-"));
    r.value("blocks_per_sequence",
            x->blocks_per_sequence ? Cell::count(x->blocks_per_sequence) : Cell::empty());
    r.value("kv_bytes_per_sequence_per_gpu", Cell::bytes(x->bytes_per_sequence));
    if (profiled) {
      bool timed = load && *load;
      Record& d = r.object("decode_at_max_sequences");
      d.value("batch_per_replica", timed ? Cell::count((*load)->batch_per_replica) : Cell::empty());
      d.value("step_s", "decode step", timed ? Cell::seconds((*load)->step_s) : Cell::empty());
      d.value("tokens_per_s", "decode tok/s",
              timed ? Cell::number((*load)->tokens_per_s) : Cell::empty());
      const std::optional<StepEstimate>* e = timed ? &(*load)->estimate : nullptr;
      bool estimated = e && *e;
      d.value("estimate_step_s", "est. decode step",
              estimated ? Cell::seconds((*e)->time_s) : Cell::empty());
      d.value("estimate_tokens_per_s", "est. decode tok/s",
              estimated ? Cell::number((*e)->tokens_per_s * (*load)->replicas) : Cell::empty());
    }
  } else {
    r.value("context", Cell::empty(), k_json_only);
    // The row shows the context --max-context-at found.
    r.value("context", "context",
            c.max_context_at ? Cell::tokens(*c.max_context_at) : Cell::empty(), k_tables_only);
    r.value("max_sequences", "max seqs", Cell::empty(), k_tables_only);
    r.value("max_concurrency", "concurrency", Cell::empty(), k_tables_only);
  }
  if (c.max_context_at) {
    Record& m = r.object("max_context_at");
    m.value("sequences", Cell::count(*args.max_context_at));
    m.value("context", Cell::count(*c.max_context_at));
    m.value("limited_by", Cell::text(c.max_context_limited_by));
  }
  if (args.explain) {
    r.strings("derivation", render_derivation(c.derivation));
  }
  return r;
}

std::string who(const Scenario& s) {
  return s.request.model.name + " on " + s.result.gpu + " (tp " +
         group_digits(s.result.parallel.tp) + ")";
}

/// The figures of a sized row before its context.
constexpr std::array<const char*, 5> k_sized_figures{
    "weights_bytes_per_gpu", "kv_pool_bytes_per_gpu", "kv_bytes_per_token_per_gpu", "kv_tokens",
    "num_blocks"};

/// A combination that could not be sized: what was asked, and why (its table row says n/a),
/// a row per context asked.
Record describe_unsized(const CapacityRequest& q, const ContextCapacity* x, Outcome outcome,
                        const std::string& reason) {
  Record r;
  Cell none = Cell::empty().shown_as("n/a");
  r.value("model", "model", Cell::text(q.model.name));
  r.value("gpu", "gpu", Cell::text(q.gpu.name));
  r.value("engine", "engine", Cell::text(std::string(engine_name(q.engine.engine))));
  r.value("gpus", "gpus", q.parallel.gpus ? Cell::count(q.parallel.gpus) : Cell::empty());
  r.value("tp", "tp", Cell::count(q.parallel.tp));
  r.value("pp", Cell::count(q.parallel.pp));
  for (const char* key : k_sized_figures) {
    r.value(key, none, k_tables_only);
  }
  r.value("fits", Cell::flag(false));
  describe_outcome(r, outcome, reason);
  r.value("context", "context", x ? Cell::tokens(x->tokens) : Cell::empty());
  r.value("max_sequences", none, k_tables_only);
  r.value("max_concurrency", none, k_tables_only);
  return r;
}

/// One model on one GPU and tp, sized, and with a profile its decode step at full load.
Scenario run_scenario(const CapacityArgs& args, CapacityRequest request,
                      const std::optional<DeviceProfile>& profile,
                      std::set<std::string>& unmodelled, std::vector<std::string>& warnings) {
  request.explain = args.explain;
  CapacityResult result = compute_capacity(request);
  Scenario s{std::move(request), std::move(result), {}};
  for (const auto& note : s.result.notes) {
    warnings.push_back(s.request.model.name + " on " + s.request.gpu.name + ": " + note);
  }
  for (const auto& x : s.result.contexts) {
    s.loads.push_back(profile ? full_load(s, x, *profile, unmodelled) : std::nullopt);
  }
  return s;
}

/// What people read under the table, gathered scenario by scenario: why a scenario does not fit,
/// the longest contexts found, then the figures as vLLM's log prints them, and what kvcalc
/// estimated.
class CapacityNotes {
public:
  void add(const CapacityArgs& args, const Scenario& s) {
    const CapacityResult& c = s.result;
    if (c.engine == Engine::vllm && c.fits) {
      for (const ContextCapacity& x : c.contexts) {
        m_logs.push_back(
            fmt::format("{} on {} (tp {}): GPU KV cache size: {} tokens; # GPU blocks: {}; Maximum "
                        "concurrency for {} tokens per request: {:.2f}x",
                        s.request.model.name, c.gpu, c.parallel.tp, group_digits(c.kv_tokens),
                        c.num_blocks, group_digits(x.tokens), x.max_concurrency));
      }
    }
    if (!c.fits) {
      m_notes.push_back(who(s) + ": " + c.reason + "; " + fit_hint(s.request));
    } else if (!holds_every_context(c)) {
      std::vector<std::string> at;
      for (const ContextCapacity& x : c.contexts) {
        if (x.max_sequences == 0) {
          at.push_back(group_digits(x.tokens));
        }
      }
      std::string lengths;
      for (std::size_t i = 0; i < at.size(); ++i) {
        lengths += (i == 0 ? "" : i + 1 == at.size() ? " or " : ", ") + at[i];
      }
      m_notes.push_back(who(s) + ": does not hold one sequence of " +
                        (at.empty() ? std::string("the context asked") : lengths + " tokens") +
                        "; " + fit_hint(s.request));
    }
    if (c.max_context_at) {
      const std::string& by = c.max_context_limited_by;
      m_notes.push_back(
          who(s) + ": longest context holding " + group_digits(*args.max_context_at) +
          (*args.max_context_at == 1 ? " sequence: " : " sequences: ") +
          group_digits(*c.max_context_at) + " tokens" +
          (by == "max_model_len"  ? " (--max-model-len; the KV cache holds more)"
           : by == "max_context"  ? " (the model's max_context; the KV cache holds more)"
           : by == "search_limit" ? " (where kvcalc's search stops: the model gives no max_context)"
                                  : ""));
    }
    m_estimated = m_estimated || c.non_kv_estimated;
  }

  [[nodiscard]] std::vector<std::string> lines(const std::set<std::string>& unmodelled) const {
    std::vector<std::string> out = m_notes;
    out.insert(out.end(), m_logs.begin(), m_logs.end());
    out.insert(out.end(), unmodelled.begin(), unmodelled.end());
    if (m_estimated) {
      out.push_back("non-KV memory besides weights is kvcalc's estimate (docs/formulas.md); "
                    "give --non-kv-memory or --kv-cache-memory from the engine's log for its "
                    "exact figures");
    }
    return out;
  }

private:
  std::vector<std::string> m_notes;
  std::vector<std::string> m_logs;
  bool m_estimated = false;
};

/// --explain: a scenario's budget, step by step, after the table.
void explain_budget(const Scenario& s, Output& out) {
  const CapacityResult& c = s.result;
  out.text_after("");
  out.text_after(s.request.model.name + " on " + c.gpu + ", tp " + group_digits(c.parallel.tp) +
                 ", " + std::string(engine_name(c.engine)) + ":");
  for (std::string& line : render_derivation(c.derivation)) {
    out.text_after(std::move(line));
  }
}

/// Sequences that fit against context, one line per scenario, from 1k tokens to the longest
/// context asked (at least 128k), by doubling.
class CapacityPlot {
public:
  explicit CapacityPlot(const std::vector<u64>& contexts) {
    for (u64 c : contexts) {
      m_longest = std::max(m_longest, c);
    }
  }

  void add(const Scenario& s) {
    CapacityRequest q = s.request;
    q.contexts.clear();
    q.max_context_at.reset();
    q.explain = false;
    q.engine.max_model_len.reset(); // the curve runs past a length the engine was started for
    for (u64 c = 1024; c <= m_longest; c *= 2) {
      q.contexts.push_back(c);
    }
    CapacityResult r = compute_capacity(q);
    LineSeries line{
        s.request.model.name + " on " + r.gpu + ", tp " + group_digits(r.parallel.tp), {}, {}};
    for (const ContextCapacity& x : r.contexts) {
      if (x.max_sequences > 0) {
        line.xs.push_back(static_cast<double>(x.tokens));
        line.ys.push_back(static_cast<double>(x.max_sequences));
      }
    }
    if (!line.xs.empty()) {
      m_chart.series.push_back(std::move(line));
    }
  }

  /// Some scenario holds one sequence of 1k tokens: there is a line to draw.
  [[nodiscard]] bool drawable() const { return !m_chart.series.empty(); }

  void write(const std::string& path) {
    m_chart.title = "Sequences that fit against context";
    m_chart.x_label = "context (tokens per sequence)";
    m_chart.y_label = "sequences (whole deployment)";
    m_chart.y_unit = "count";
    m_chart.x_unit = "count";
    if (m_chart.series.empty()) {
      throw DoesNotFit("--plot: no scenario holds one sequence of 1k tokens; there is nothing to "
                       "draw");
    }
    write_text_file(path, render_svg({m_chart}), "--plot");
  }

private:
  u64 m_longest = 131072;
  LineChart m_chart;
};

int run_capacity(const CapacityArgs& args, std::ostream& out, std::ostream& err) {
  check_plot_path(args.plot);
  std::vector<u64> contexts = args.contexts;
  if (contexts.empty() && !args.max_context_at) {
    contexts = default_contexts(args.engine);
  }
  CommandOutput output(args.output, "capacity", out, err);
  std::vector<Model> models = load_models(args.models, output.warnings);
  GpuCatalog catalog(args.parallel.gpu_file);
  const std::string how_to_measure =
      "add --measure, or a --device-profile that kvcalc measure wrote";
  std::optional<DeviceProfile> profile =
      read_ceilings(args.ceilings, args.parallel, catalog, how_to_measure, err);
  std::vector<Gpu> devices =
      deployment_devices(args.parallel, profile, catalog, how_to_measure, output.warnings);
  std::set<std::string> unmodelled; // models the roofline cannot time, said once each
  check_sweep({{"models", models.size()},
               {"GPUs", devices.size()},
               {"tp", args.parallel.tp_sweep().size()},
               {"--context", contexts.size()}});

  std::vector<ColumnRef> columns = {{"model"},
                                    {"gpu"},
                                    {"gpus"},
                                    {"tp"},
                                    {"engine"},
                                    {"weights_bytes_per_gpu"},
                                    {"kv_pool_bytes_per_gpu"},
                                    {"kv_bytes_per_token_per_gpu"},
                                    {"kv_tokens"},
                                    {"num_blocks"},
                                    {"context"},
                                    {"max_sequences"},
                                    {"max_concurrency"}};
  if (profile) {
    columns.push_back({"decode_at_max_sequences.step_s", "", "decode_step_s"});
    columns.push_back({"decode_at_max_sequences.estimate_step_s", "", "decode_estimate_step_s"});
    columns.push_back({"decode_at_max_sequences.tokens_per_s", "", "decode_tokens_per_s"});
    columns.push_back(
        {"decode_at_max_sequences.estimate_tokens_per_s", "", "decode_estimate_tokens_per_s"});
  }
  Output::TableId table = output->begin_table("", columns);
  // CSV: a row that does not fit carries its numbers and says so; one that could not be sized,
  // why.
  columns.insert(columns.end(), {{"fits"}, {"status"}, {"reason"}});
  output->csv_view(columns);
  output->begin_list("scenarios");
  CapacityNotes notes;
  std::optional<CapacityPlot> plot;
  if (!args.plot.empty()) {
    plot.emplace(contexts);
  }
  SweepOutcomes outcomes;
  std::vector<std::string> unsized;   // why each combination that could not be sized, each once
  std::vector<std::string> estimated; // where the estimate comes from, each once
  for (auto& request : capacity_requests(models, args.cache, args.parallel, args.engine,
                                         args.block_size, devices, contexts, args.max_context_at)) {
    std::optional<Scenario> s;
    if (std::optional<Error> error = attempt([&] {
          s.emplace(run_scenario(args, request, profile, unmodelled, output.warnings));
        })) {
      outcomes.add(*error);
      for (u64 tokens : contexts) {
        ContextCapacity x;
        x.tokens = tokens;
        output->item(describe_unsized(request, &x, outcome_of(*error), error->what()));
      }
      if (contexts.empty()) {
        output->item(describe_unsized(request, nullptr, outcome_of(*error), error->what()));
      }
      std::string note = outcome_note(request.model.name, request.gpu.name, request.parallel.tp,
                                      outcome_of(*error), error->what());
      if (std::find(unsized.begin(), unsized.end(), note) == unsized.end()) {
        unsized.push_back(std::move(note));
      }
      continue;
    }
    for (std::size_t i = 0; i < s->result.contexts.size(); ++i) {
      output->item(
          describe_row(*s, &s->result.contexts[i], &s->loads[i], profile.has_value(), args));
    }
    if (s->result.contexts.empty()) {
      output->item(describe_row(*s, nullptr, nullptr, profile.has_value(), args));
    }
    notes.add(args, *s);
    if (profile) {
      EstimateChoice estimate = choose_estimator(s->request.gpu, &*profile);
      std::string line = estimate.estimator
                             ? "est. decode: what the kernels reach, from the " + estimate.note
                             : estimate.note;
      if (std::find(estimated.begin(), estimated.end(), line) == estimated.end()) {
        estimated.push_back(std::move(line));
      }
    }
    if (args.explain && output->for_people()) {
      explain_budget(*s, output.document());
    }
    if (plot) {
      plot->add(*s);
    }
    if (!plot || plot->drawable()) {
      output->stream(); // a combination sized (and, with --plot, drawn): the result stands
    }
    outcomes.add(holds_every_context(s->result) ? Outcome::ok : Outcome::does_not_fit);
  }
  output->end_list();
  outcomes.throw_if_none_ran();
  for (std::string& line : unsized) {
    output->note(table, std::move(line));
  }
  for (std::string& line : notes.lines(unmodelled)) {
    output->note(table, std::move(line));
  }
  for (std::string& line : estimated) {
    output->note(table, std::move(line));
  }
  if (plot) {
    plot->write(args.plot);
    err << "kvcalc: wrote " << args.plot << '\n';
  }
  output.finish();
  return outcomes.exit_code();
}

} // namespace

Command setup_capacity(const Options& app) {
  auto args = std::make_shared<CapacityArgs>();
  Options cmd = app.subcommand(
      "capacity", "Sequences that fit per GPU and deployment, with engine-exact budgets");
  cmd.option("models", args->models, k_models_help).type_name("MODEL").required();
  add_counts(cmd, "--context", args->contexts,
             "Context lengths in tokens, comma-separated: 4096, 4k, 128k, 1M [default: "
             "4k,32k,128k]")
      .type_name("TOKENS,...")
      .group(k_group_model);
  add_count(cmd, "--max-context-at", args->max_context_at,
            "Also find the longest context at which this many sequences fit")
      .group(k_group_model);
  add_cache_options(cmd, args->cache);
  add_parallel_options(cmd, args->parallel, ParallelScope::deployment, true);
  add_engine_options(cmd, args->engine);
  add_count(cmd, "--block-size", args->block_size,
            "Page size in tokens [default: vLLM 16 (MLA 64 on Hopper, 128 on Blackwell), "
            "TensorRT-LLM 32, SGLang 1, plain none]")
      .type_name("TOKENS")
      .group(k_group_engine);
  add_ceiling_options(cmd, args->ceilings,
                      "Measured ceilings (kvcalc measure --profile): adds the decode step time "
                      "and tokens/s with every sequence that fits running, bound and estimate "
                      "(docs/device-profile.md)");
  cmd.flag("--explain", args->explain, "Print the budget, step by step").group(k_group_output);
  cmd.option("--plot", args->plot,
             "Write an SVG of the sequences that fit against context, one line per model, "
             "GPU and tp")
      .type_name("FILE.svg")
      .group(k_group_output);
  add_output_options(cmd, args->output, ScaledBytes::yes);
  return {cmd.app(),
          [args](std::ostream& out, std::ostream& err) { return run_capacity(*args, out, err); }};
}

} // namespace kvcalc::cli
