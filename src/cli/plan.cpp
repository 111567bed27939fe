// `plan`: check a capacity plan's requirements; exit 3 when any fails (CI gate).

#include <memory>
#include <ostream>

#include <kvcalc/core/error.hpp>
#include <kvcalc/core/file.hpp>
#include <kvcalc/core/units.hpp>
#include <kvcalc/core/version.hpp>
#include <kvcalc/plan/plan.hpp>

#include "command.hpp"

namespace kvcalc::cli {

namespace {

std::string setup(const ScenarioResult& s) {
  const CapacityResult& c = s.capacity;
  std::string text = s.model.name + " on " + group_digits(c.parallel.gpus) + " × " + c.gpu +
                     ", tp " + group_digits(c.parallel.tp);
  if (c.parallel.pp > 1) {
    text += ", pp " + group_digits(c.parallel.pp);
  }
  if (c.parallel.dp_attention) {
    text += ", dp-attention";
  }
  if (c.parallel.dcp > 1) {
    text += ", dcp " + group_digits(c.parallel.dcp);
  }
  return text + ", " + std::string(engine_name(c.engine)) + ", weights " +
         std::string(dtype_name(c.weight_dtype)) + ", KV " + describe(c.cache);
}

/// A requirement's bound as a number: sequences or tokens, a share of memory; null for `fits`.
Json threshold_json(const Requirement& q) {
  if (q.kind == RequirementKind::fits) {
    return Json();
  }
  return is_share(q.kind) ? Json(q.share) : Json(q.value);
}

/// What the scenario reached, in the threshold's unit; `fits`: true or false.
Json actual_json(const RequirementResult& r) {
  RequirementKind k = r.requirement.kind;
  if (k == RequirementKind::fits) {
    return Json(r.passed);
  }
  return is_share(k) ? Json(r.actual_share) : Json(r.actual_count);
}

struct PlanArgs {
  std::string file;
  std::string report; ///< Markdown report, appended (a CI job summary)
  OutputOptions output;
};

int run_plan(const PlanArgs& args, std::ostream& out, std::ostream& err) {
  Plan plan = parse_plan(read_text_file(args.file), args.file);
  Rendered r;
  Diagnostics diagnostics;
  std::vector<ScenarioResult> results = evaluate_plan(plan, diagnostics);
  r.warnings = diagnostics.warnings;

  u64 total = 0;
  u64 failed = 0;
  r.json = json_header("plan");
  r.json["plan"] = args.file;
  Table t;
  t.columns = {{"scenario", "scenario"},
               {"requirement", "requirement"},
               {"actual", "actual"},
               {"verdict", "verdict"}};
  Table csv;
  csv.columns = {{"", "scenario"},  {"", "kind"},        {"", "requirement"},
                 {"", "threshold"}, {"", "context"},     {"", "sequences"},
                 {"", "actual"},    {"", "actual_text"}, {"", "passed"}};
  std::string md = "# Capacity plan: " + args.file + "\n\n";
  Json scenarios = Json::array();
  bool estimated = false;
  for (const ScenarioResult& s : results) {
    estimated = estimated || s.capacity.non_kv_estimated;
    Json sj = Json::object();
    sj["name"] = s.scenario->name;
    sj["model"] = s.model.name;
    sj["gpu"] = s.capacity.gpu;
    sj["gpus"] = s.capacity.parallel.gpus;
    sj["tp"] = s.capacity.parallel.tp;
    sj["engine"] = std::string(engine_name(s.capacity.engine));
    sj["kv_pool_bytes_per_gpu"] = s.capacity.kv_pool_bytes_per_gpu;
    sj["kv_tokens"] = s.capacity.kv_tokens;
    sj["non_kv_estimated"] = s.capacity.non_kv_estimated;
    sj["fits"] = s.capacity.fits;
    sj["passed"] = s.passed();
    md += "## " + s.scenario->name + ": " + (s.passed() ? "PASS" : "FAIL") + "\n\n" + setup(s) +
          "\n\n| requirement | actual | verdict |\n| --- | --- | --- |\n";
    Json reqs = Json::array();
    for (const RequirementResult& q : s.requirements) {
      ++total;
      failed += q.passed ? 0 : 1;
      const Requirement& req = q.requirement;
      t.rows.push_back({Cell::text(s.scenario->name), Cell::text(q.text), Cell::text(q.actual),
                        Cell::text(q.passed ? "PASS" : "FAIL")});
      bool share = is_share(req.kind);
      bool fits = req.kind == RequirementKind::fits;
      csv.rows.push_back(
          {Cell::text(s.scenario->name),
           Cell::text(std::string(k_requirement_kinds.name(req.kind))), Cell::text(q.text),
           fits    ? Cell::empty()
           : share ? Cell::number(req.share)
                   : Cell::count(req.value),
           req.kind == RequirementKind::min_sequences ? Cell::count(req.context) : Cell::empty(),
           req.kind == RequirementKind::min_context ? Cell::count(req.sequences) : Cell::empty(),
           fits    ? Cell::text(q.passed ? "true" : "false")
           : share ? Cell::number(q.actual_share)
                   : Cell::count(q.actual_count),
           Cell::text(q.actual), Cell::text(q.passed ? "true" : "false")});
      md += "| " + q.text + " | " + q.actual + " | " + (q.passed ? "PASS" : "**FAIL**") + " |\n";
      Json qj = Json::object();
      qj["kind"] = std::string(k_requirement_kinds.name(req.kind));
      qj["requirement"] = q.text;
      qj["threshold"] = threshold_json(req);
      qj["context"] = req.kind == RequirementKind::min_sequences ? Json(req.context) : Json();
      qj["sequences"] = req.kind == RequirementKind::min_context ? Json(req.sequences) : Json();
      qj["actual"] = actual_json(q);
      qj["actual_text"] = q.actual;
      qj["passed"] = q.passed;
      qj["where"] = req.where.str();
      reqs.push_back(std::move(qj));
    }
    md += "\n";
    sj["requirements"] = std::move(reqs);
    scenarios.push_back(std::move(sj));
  }
  std::string verdict = group_digits(total - failed) + " of " + group_digits(total) +
                        " requirements hold: plan " + (failed ? "FAILED" : "passed");
  md += "**" + verdict + "**\n";
  std::string caveat = "non-KV memory besides weights is kvcalc's estimate (docs/formulas.md); "
                       "give non_kv_memory or kv_cache_memory from the engine's log for its "
                       "exact figures";
  if (estimated) {
    md += "\n" + caveat + ".\n";
  }
  md += "\n_kvcalc " + std::string(version()) + ", `kvcalc plan " + args.file + "`_\n";
  t.notes.push_back(verdict);
  if (estimated) {
    t.notes.push_back(caveat);
  }
  r.json["scenarios"] = std::move(scenarios);
  r.json["requirements"] = total;
  r.json["failed"] = failed;
  r.json["passed"] = failed == 0;
  r.csv = std::move(csv);
  r.tables.push_back(std::move(t));
  if (!args.report.empty()) {
    write_text_file(args.report, md, true);
    err << "kvcalc: appended the report to " << args.report << '\n';
  }
  emit(r, args.output, out, err);
  return failed ? static_cast<int>(ExitCode::plan_failed) : 0;
}

} // namespace

Command setup_plan(CLI::App& app) {
  auto args = std::make_shared<PlanArgs>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "Check a capacity plan's requirements; exit 3 when any fails (for CI)");
  cmd->add_option("file", args->file, "Plan YAML (docs/capacity-plans.md)")
      ->type_name("PLAN")
      ->required();
  cmd->add_option("--report", args->report,
                  "Append a Markdown report to FILE (a CI job summary, e.g. "
                  "$GITHUB_STEP_SUMMARY)")
      ->type_name("FILE")
      ->group(k_group_output);
  cmd->add_option_function<std::string>(
         "--json",
         [](const std::string&) { throw InputError("--json FILE is now --format json -o FILE"); },
         "")
      ->group("");
  add_output_options(cmd, args->output, ScaledBytes::no);
  return {cmd, [args](std::ostream& out, std::ostream& err) { return run_plan(*args, out, err); }};
}

} // namespace kvcalc::cli
