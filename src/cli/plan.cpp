// `plan`: check a capacity plan's requirements; exit 3 when any fails (CI gate).

#include <memory>
#include <ostream>

#include <kvcalc/core/error.hpp>
#include <kvcalc/core/file.hpp>
#include <kvcalc/core/units.hpp>
#include <kvcalc/core/version.hpp>
#include <kvcalc/plan/plan.hpp>
#include <kvcalc/report/record.hpp>

#include "command.hpp"

using namespace kvcalc::plan;

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
    text += c.parallel.dp == c.parallel.tp ? ", dp-attention"
                                           : ", attention dp " + group_digits(c.parallel.dp);
  }
  if (c.parallel.dcp > 1) {
    text += ", dcp " + group_digits(c.parallel.dcp);
  }
  return text + ", " + std::string(engine_name(c.engine)) + ", weights " +
         std::string(dtype_name(c.weight_dtype)) + ", KV " + describe(c.cache);
}

/// A requirement's bound as a number: sequences or tokens, a share of memory; none for `fits`.
Cell threshold_cell(const Requirement& q) {
  if (q.kind == RequirementKind::fits) {
    return Cell::empty();
  }
  return is_share(q.kind) ? Cell::number(q.share) : Cell::count(q.value);
}

/// What the scenario reached, in the threshold's unit (`fits`: true or false); people read the
/// text beside it.
Cell actual_cell(const RequirementResult& r) {
  RequirementKind k = r.requirement.kind;
  Cell c = k == RequirementKind::fits ? Cell::flag(r.passed)
           : is_share(k)              ? Cell::number(r.actual_share)
                                      : Cell::count(r.actual_count);
  return c.shown_as(r.actual);
}

Record describe_requirement(const RequirementResult& q) {
  const Requirement& req = q.requirement;
  Record r;
  r.value("kind", Cell::text(std::string(k_requirement_kinds.name(req.kind))));
  r.value("requirement", "requirement", Cell::text(q.text));
  r.value("threshold", threshold_cell(req));
  r.value("context",
          req.kind == RequirementKind::min_sequences ? Cell::count(req.context) : Cell::empty());
  r.value("sequences",
          req.kind == RequirementKind::min_context ? Cell::count(req.sequences) : Cell::empty());
  r.value("actual", "actual", actual_cell(q));
  r.value("actual_text", Cell::text(q.actual));
  r.value("passed", "verdict", Cell::flag(q.passed).shown_as(q.passed ? "PASS" : "FAIL"));
  r.value("where", Cell::text(req.where.str()));
  return r;
}

Record describe_scenario(const ScenarioResult& s) {
  const CapacityResult& c = s.capacity;
  Record r;
  r.value("name", "scenario", Cell::text(s.scenario->name));
  r.value("model", Cell::text(s.model.name));
  r.value("gpu", Cell::text(c.gpu));
  r.value("gpus", Cell::count(c.parallel.gpus));
  r.value("tp", Cell::count(c.parallel.tp));
  r.value("engine", Cell::text(std::string(engine_name(c.engine))));
  r.value("kv_pool_bytes_per_gpu", Cell::bytes(c.kv_pool_bytes_per_gpu));
  r.value("kv_tokens", Cell::count(c.kv_tokens));
  r.value("non_kv_estimated", Cell::flag(c.non_kv_estimated));
  r.value("fits", Cell::flag(c.fits));
  r.value("passed", Cell::flag(s.passed()));
  auto& requirements = r.list("requirements");
  for (const RequirementResult& q : s.requirements) {
    requirements.push_back(describe_requirement(q));
  }
  return r;
}

/// The Markdown report a CI job summary shows: a section per scenario, the verdict, the
/// caveats, and which kvcalc said so.
std::string plan_report(const std::string& file, const std::vector<ScenarioResult>& results,
                        const std::vector<std::string>& notes) {
  std::string md = "# Capacity plan: " + file + "\n\n";
  for (const ScenarioResult& s : results) {
    md += "## " + s.scenario->name + ": " + (s.passed() ? "PASS" : "FAIL") + "\n\n" + setup(s) +
          "\n\n| requirement | actual | verdict |\n| --- | --- | --- |\n";
    for (const RequirementResult& q : s.requirements) {
      md += "| " + q.text + " | " + q.actual + " | " + (q.passed ? "PASS" : "**FAIL**") + " |\n";
    }
    md += "\n";
  }
  md += "**" + notes.front() + "**\n";
  for (std::size_t i = 1; i < notes.size(); ++i) {
    md += "\n" + notes[i] + ".\n";
  }
  return md + "\n_kvcalc " + std::string(version()) + ", `kvcalc plan " + file + "`_\n";
}

struct PlanArgs {
  std::string file;
  std::string report; ///< Markdown report, appended (a CI job summary)
  OutputOptions output;
};

int run_plan(const PlanArgs& args, std::ostream& out, std::ostream& err) {
  Plan plan = parse_plan(read_text_file(args.file), args.file);
  CommandOutput output(args.output, "plan", out, err);
  Diagnostics diagnostics;
  std::vector<ScenarioResult> results = evaluate_plan(plan, diagnostics);
  output.warnings = diagnostics.warnings;

  // A requirement a row, with its scenario's values.
  Output::TableId table =
      output->begin_table("", {{"name"}, {"requirement"}, {"actual"}, {"passed"}}, "requirements");
  output->csv_view({{"name", "", "scenario"},
                    {"kind"},
                    {"requirement"},
                    {"threshold"},
                    {"context"},
                    {"sequences"},
                    {"actual"},
                    {"actual_text"},
                    {"passed"}},
                   "requirements");
  output->field("plan", args.file);
  output->begin_list("scenarios");
  u64 total = 0;
  u64 failed = 0;
  bool estimated = false;
  for (const ScenarioResult& s : results) {
    output->item(describe_scenario(s));
    for (const RequirementResult& q : s.requirements) {
      failed += q.passed ? 0 : 1;
    }
    total += s.requirements.size();
    estimated = estimated || s.capacity.non_kv_estimated;
  }
  output->end_list();
  std::vector<std::string> notes{group_digits(total - failed) + " of " + group_digits(total) +
                                 " requirements hold: plan " + (failed ? "FAILED" : "passed")};
  if (estimated) {
    notes.push_back("non-KV memory besides weights is kvcalc's estimate (docs/formulas.md); "
                    "give non_kv_memory or kv_cache_memory from the engine's log for its exact "
                    "figures");
  }
  for (const std::string& note : notes) {
    output->note(table, note);
  }
  output->field("requirements", total);
  output->field("failed", failed);
  output->field("passed", failed == 0);
  if (!args.report.empty()) {
    write_text_file(args.report, plan_report(args.file, results, notes), "--report",
                    WriteMode::append);
    err << "kvcalc: appended the report to " << args.report << '\n';
  }
  output.finish();
  return failed ? static_cast<int>(ExitCode::plan_failed) : 0;
}

} // namespace

Command setup_plan(const Options& app) {
  auto args = std::make_shared<PlanArgs>();
  Options cmd = app.subcommand(
      "plan", "Check a capacity plan's requirements; exit 3 when any fails (for CI)");
  cmd.option("file", args->file, "Plan YAML (docs/capacity-plans.md)").type_name("PLAN").required();
  cmd.option("--report", args->report,
             "Append a Markdown report to FILE (a CI job summary, e.g. "
             "$GITHUB_STEP_SUMMARY)")
      .type_name("FILE")
      .group(k_group_output);
  cmd.text(
         "--json",
         [](const std::string&) { throw InputError("--json FILE is now --format json -o FILE"); },
         "")
      .group("");
  add_output_options(cmd, args->output, ScaledBytes::no);
  return {cmd.app(),
          [args](std::ostream& out, std::ostream& err) { return run_plan(*args, out, err); }};
}

} // namespace kvcalc::cli
