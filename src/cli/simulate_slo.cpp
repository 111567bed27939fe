// `simulate --slo`: each instance searched for the highest arrival rate (or the largest batch)
// that meets latency targets, or checked at the rates given; described as records, then
// rendered (docs/simulate.md, "SLO search").

#include <algorithm>
#include <istream>
#include <ostream>

#include <fmt/format.h>

#include <kvcalc/core/error.hpp>
#include <kvcalc/core/units.hpp>

#include "simulate.hpp"

using namespace kvcalc::sim;

namespace kvcalc::cli {

namespace {

/// What --slo asks of every instance.
struct SloQuestion {
  std::vector<SloTarget> targets;
  std::string targets_text; ///< for people: "TTFT p99 ≤ 2.000 s, …"
  bool by_batch = false;    ///< --slo-search batch: the largest burst
  bool search = false;      ///< search each instance; else check it at the rates (or trace) given
};

/// The deployment the verdict names: the most per GPU (a search), or the fewest GPUs (a check).
struct SloBest {
  const Scenario* scenario = nullptr;
  double value = 0; ///< requests/s or requests per GPU (a search), GPUs (a check)
};

/// --slo-search batch sizes bursts itself: what would set the arrivals or their count is refused.
void check_batch_search(const SimulateArgs& args, const SimulateInputs& in) {
  std::string why = "--slo-search batch sends N requests at t = 0 and searches N";
  if (in.trace) {
    throw InputError(why + "; a trace brings its own arrivals: drop --trace or --slo-search");
  }
  if (!args.rates.empty()) {
    throw InputError(why + "; drop --rate (or search the rate: --slo-search rate)");
  }
  if (args.arrival && *args.arrival != ArrivalProcess::burst) {
    throw InputError(why + "; drop --arrival " + std::string(arrival_name(*args.arrival)));
  }
  if (args.requests || (!args.workload.empty() && in.workload.requests)) {
    throw InputError(why + "; drop the request count (--requests, or requests: in the workload)");
  }
  if (in.workload.duration_s) {
    throw InputError(why + "; drop the duration (--duration, or duration: in the workload)");
  }
}

/// The targets and what to do with them, the options that do not go with --slo refused.
SloQuestion read_slo(const SimulateArgs& args, const SimulateInputs& in) {
  SloQuestion q;
  q.targets = parse_slo(args.slo);
  if (in.prefill_pool) {
    throw InputError("--slo searches one instance at a time; drop --prefill/--decode, or run "
                     "each rate without --slo");
  }
  if (!args.timeline.empty() || !args.plot.empty()) {
    throw InputError("--slo runs many simulations; --timeline and --plot draw one: drop them");
  }
  q.by_batch = args.slo_search == SloSearchKind::batch;
  if (q.by_batch) {
    check_batch_search(args, in);
  }
  // A burst arrives at once whatever the rate: it is checked, not searched by rate.
  q.search = q.by_batch ||
             (!in.trace && args.rates.empty() && in.workload.arrival != ArrivalProcess::burst);
  for (const SloTarget& t : q.targets) {
    q.targets_text += (q.targets_text.empty() ? "" : ", ") + describe(t);
  }
  return q;
}

u64 instance_gpus(const Scenario& s) {
  return s.config.step.parallel.tp * s.config.step.parallel.pp;
}

bool all_meet(const SloSearch& found) {
  return std::all_of(found.runs.begin(), found.runs.end(), [](const SloRun& x) { return x.meets; });
}

/// One instance's runs: the search for its largest batch or highest rate, or one run at each
/// rate given (the trace's own arrivals).
SloSearch search_instance(const Scenario& base, const SloQuestion& q, const SimulateArgs& args,
                          const SimulateInputs& in) {
  auto run_at = [&](std::optional<double> rate) {
    std::unique_ptr<std::istream> file;
    auto source = open_source(args, in, rate, file);
    return simulate(base.config, *source);
  };
  if (q.by_batch) {
    return search_max_batch(
        [&](u64 requests) {
          Workload w = in.workload;
          w.arrival = ArrivalProcess::burst;
          w.requests = requests;
          SyntheticSource source(w);
          return simulate(base.config, source);
        },
        q.targets);
  }
  if (q.search) {
    return search_max_rate([&](double rate) { return run_at(rate); }, q.targets, in.workload.rate);
  }
  SloSearch found;
  for (const auto& rate : in.rates) {
    SimResult x = run_at(rate);
    bool ok = meets(x, q.targets);
    found.runs.push_back({rate.value_or(0), std::move(x), ok});
  }
  return found;
}

/// One instance's row: its deployment, what the search found (or whether the check met the
/// targets), and how many runs it took.
Record describe_slo_row(const Scenario& base, const SloSearch& found, const SloQuestion& q) {
  u64 gpus = instance_gpus(base);
  auto per_gpu = [&](double v) {
    return v > 0 ? Cell::number(v / static_cast<double>(gpus)) : Cell::empty();
  };
  Record row;
  row.value("model", "model", Cell::text(base.model));
  row.value("gpu", "gpu", Cell::text(base.gpu));
  row.value("gpus", "gpus", Cell::count(gpus));
  row.value("tp", "tp", Cell::count(base.config.step.parallel.tp));
  if (q.by_batch) {
    auto count = [](double n) { return n > 0 ? Cell::count(static_cast<u64>(n)) : Cell::empty(); };
    row.value("max_batch", "max batch", count(found.best));
    row.value("max_batch_per_gpu", "batch/GPU", per_gpu(found.best));
    row.value("failed_batch", "fails at", count(found.failed));
  } else if (q.search) {
    auto rate = [](double r) { return r > 0 ? Cell::number(r) : Cell::empty(); };
    row.value("max_rate_per_s", "max rate/s", rate(found.best));
    row.value("max_rate_per_s_per_gpu", "rate/s/GPU", per_gpu(found.best));
    row.value("failed_rate_per_s", "fails at/s", rate(found.failed));
  } else {
    row.value("meets", "within SLO", Cell::flag(all_meet(found)));
  }
  row.value("runs", "runs", Cell::count(found.runs.size()));
  describe_outcome(row, Outcome::ok, "");
  return row;
}

/// The row of an instance that was not searched: it does not fit, or cannot run.
Record describe_slo_skipped(const Scenario& base, const SloQuestion& q) {
  Outcome outcome = outcome_of(base);
  Record row;
  row.value("model", "model", Cell::text(base.model));
  row.value("gpu", "gpu", Cell::text(base.gpu));
  row.value("gpus", "gpus", base.error ? Cell::empty() : Cell::count(instance_gpus(base)));
  row.value("tp", "tp", Cell::count(base.config.step.parallel.tp));
  // Where the verdict would be, people read why there is none.
  const char* verdict = q.by_batch ? "max_batch" : q.search ? "max_rate_per_s" : "meets";
  const char* header = q.by_batch ? "max batch" : q.search ? "max rate/s" : "within SLO";
  row.value(verdict, header, Cell::empty().shown_as(status_name(outcome)), k_tables_only);
  row.value("runs", "runs", Cell::count(0));
  describe_outcome(row, outcome, base.error ? base.error->what() : base.unfit);
  return row;
}

/// Every run of one instance as evidence: the value run, each statistic the targets name, and
/// whether it met them.
void describe_slo_runs(const Scenario& base, const SloSearch& found, const SloQuestion& q,
                       bool trace, std::vector<Record>& runs) {
  for (const SloRun& x : found.runs) {
    Record& e = runs.emplace_back();
    e.value("model", "model", Cell::text(base.model));
    e.value("gpu", "gpu", Cell::text(base.gpu));
    e.value("tp", "tp", Cell::count(base.config.step.parallel.tp));
    if (q.by_batch) {
      e.value("batch", "batch", Cell::count(static_cast<u64>(x.value)));
    } else {
      e.value("rate_per_s", "rate/s", trace ? Cell::text("trace") : Cell::number(x.value));
    }
    Record& got = e.object("measured");
    for (const SloTarget& t : q.targets) {
      got.value(t.metric + "_" + t.statistic, t.metric + " " + t.statistic,
                Cell::seconds(measured(x.result, t)));
    }
    e.value("rejected", "rejected", Cell::count(x.result.requests_rejected));
    e.value("overloaded", "overloaded", Cell::flag(overloaded(x.result)));
    e.value("meets", "within SLO", Cell::flag(x.meets));
  }
}

/// Keeps `base` as the best when it beats it: more per GPU (a search), fewer GPUs meeting the
/// targets (a check).
void consider(SloBest& best, const Scenario& base, const SloSearch& found, const SloQuestion& q) {
  auto gpus = static_cast<double>(instance_gpus(base));
  if (q.search) {
    double per_gpu = found.best / gpus;
    if (found.best > 0 && per_gpu > best.value) {
      best = {&base, per_gpu};
    }
  } else if (all_meet(found) && (best.scenario == nullptr || gpus < best.value)) {
    best = {&base, gpus};
  }
}

/// The JSON's `slo`: the targets, the mode, a row per instance and every run.
Record describe_slo(const SloQuestion& q, std::vector<Record> rows, std::vector<Record> runs) {
  Record slo;
  std::vector<std::string> targets;
  for (const SloTarget& t : q.targets) {
    targets.push_back(t.metric + "_" + t.statistic + "=" + fmt::format("{:g}", t.seconds));
  }
  slo.strings("targets", targets);
  slo.value("mode", Cell::text(q.search ? "search" : "check"));
  slo.value("searched", q.search ? Cell::text(q.by_batch ? "batch" : "rate") : Cell::empty());
  slo.list("scenarios") = std::move(rows);
  slo.list("runs") = std::move(runs);
  return slo;
}

/// The line under the table that names the best deployment, or says none met the targets.
std::string slo_verdict(const SloQuestion& q, const SloBest& best) {
  if (best.scenario == nullptr) {
    return q.by_batch ? "no deployment meets the targets even one request at a time"
           : q.search ? "no deployment meets the targets at any rate searched (1/1,024 of the "
                        "start and up)"
                      : "no deployment meets the targets";
  }
  const Scenario& s = *best.scenario;
  u64 tp = s.config.step.parallel.tp;
  if (q.by_batch) {
    return fmt::format("largest batch per GPU within the targets: {} on {} (tp {}), {:.4g} "
                       "requests per GPU",
                       s.model, s.gpu, tp, best.value);
  }
  if (q.search) {
    return fmt::format("most requests/s per GPU within the targets: {} on {} (tp {}), {:.4g}/s "
                       "per GPU",
                       s.model, s.gpu, tp, best.value);
  }
  return fmt::format("fewest GPUs within the targets: {} on {} (tp {}), {} GPUs", s.model, s.gpu,
                     tp, static_cast<u64>(best.value));
}

/// The table of instances: what the search found, or whether the check met the targets.
Table slo_table(const SloQuestion& q, const Record& slo, const SloBest& best) {
  std::vector<ColumnRef> columns{{"model"}, {"gpu"}, {"gpus"}, {"tp"}};
  if (q.by_batch) {
    columns.insert(columns.end(), {{"max_batch"}, {"max_batch_per_gpu"}, {"failed_batch"}});
  } else if (q.search) {
    columns.insert(columns.end(),
                   {{"max_rate_per_s"}, {"max_rate_per_s_per_gpu"}, {"failed_rate_per_s"}});
  } else {
    columns.push_back({"meets"});
  }
  columns.push_back({"runs"});
  Table t = table_of(slo.records("scenarios"), columns);
  t.title = q.by_batch ? "Largest batch (requests arriving at once) within " + q.targets_text
            : q.search ? "Highest arrival rate within " + q.targets_text
                       : "Within " + q.targets_text + "?";
  t.notes.push_back(slo_verdict(q, best));
  t.notes.push_back("a run meets the targets when every statistic is within its bound, no "
                    "request is rejected and the queue does not grow (docs/simulate.md, SLO "
                    "search)");
  return t;
}

/// The runs' columns: the value run and each statistic the targets name.
std::vector<ColumnRef> slo_run_columns(const SloQuestion& q) {
  std::vector<ColumnRef> columns{{"model"}, {"gpu"}, {"tp"}, {q.by_batch ? "batch" : "rate_per_s"}};
  for (const SloTarget& x : q.targets) {
    columns.push_back({"measured." + x.metric + "_" + x.statistic});
  }
  columns.insert(columns.end(), {{"rejected"}, {"overloaded"}, {"meets"}});
  return columns;
}

/// The result in every format: the JSON's workload and slo, the tables of instances and of
/// runs for people, the runs as CSV.
void render_slo(CommandOutput& out, const SimulateArgs& args, const SimulateInputs& in,
                const SloQuestion& q, const Record& slo, const SloBest& best,
                const std::vector<std::string>& pricing) {
  out->field("workload", describe_workload(args, in));
  out->field("slo", slo);
  std::vector<ColumnRef> run_columns = slo_run_columns(q);
  Table runs = table_of(slo.records("runs"), run_columns);
  runs.title = "The simulations run";
  Table instances = slo_table(q, slo, best);
  for (const std::string& note : pricing) {
    instances.notes.push_back(note);
  }
  out->table(instances);
  out->table(runs);
  out->csv_table(table_of(slo.records("runs"), run_columns));
}

} // namespace

int run_slo(const SimulateArgs& args, const SimulateInputs& in, const std::vector<Model>& models,
            CommandOutput& out, std::ostream& err) {
  SloQuestion q = read_slo(args, in);
  std::vector<Scenario> bases = instances(args, in, models, out.warnings);
  std::vector<Record> rows;
  std::vector<Record> runs;
  SloBest best;
  std::vector<std::string> pricing; // how the instances priced their steps, each said once
  SweepOutcomes outcomes = outcomes_of(bases);
  Progress progress(err, bases.size());
  for (const Scenario& base : bases) {
    if (Outcome outcome = outcome_of(base); outcome != Outcome::ok) {
      out.warnings.push_back(base.error
                                 ? outcome_note(base.model, base.gpu, base.config.step.parallel.tp,
                                                outcome, base.error->what())
                                 : base.unfit);
      rows.push_back(describe_slo_skipped(base, q));
      continue;
    }
    progress.step((q.search ? "searching " : "checking ") + base.model + " on " + base.gpu +
                  " (tp " + std::to_string(base.config.step.parallel.tp) + ")");
    if (std::string note = pricing_note(base.config);
        std::find(pricing.begin(), pricing.end(), note) == pricing.end()) {
      pricing.push_back(std::move(note));
    }
    SloSearch found = search_instance(base, q, args, in);
    rows.push_back(describe_slo_row(base, found, q));
    describe_slo_runs(base, found, q, in.trace, runs);
    consider(best, base, found, q);
  }
  render_slo(out, args, in, q, describe_slo(q, std::move(rows), std::move(runs)), best, pricing);
  out.finish();
  return outcomes.exit_code();
}

} // namespace kvcalc::cli
