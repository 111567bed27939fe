// `plan`: check a capacity plan's requirements; exit 3 when any fails (CI gate).

#include <fstream>
#include <ostream>

#include <kvcalc/core/units.hpp>
#include <kvcalc/plan/plan.hpp>

#include "../core/yaml_support.hpp"
#include "commands.hpp"

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

} // namespace

int run_plan(const PlanArgs& args, std::ostream& out, std::ostream& err) {
  Plan plan = parse_plan(detail::read_text_file(args.file), args.file);
  Diagnostics diagnostics;
  std::vector<ScenarioResult> results = evaluate_plan(plan, diagnostics);
  warn(err, diagnostics.warnings);

  u64 total = 0;
  u64 failed = 0;
  Rendered r;
  r.json = json_header("plan");
  r.json["plan"] = args.file;
  Table t;
  t.columns = {{"scenario", "scenario"},
               {"requirement", "requirement"},
               {"actual", "actual"},
               {"verdict", "verdict"}};
  std::string md = "# Capacity plan: " + args.file + "\n\n";
  Json scenarios = Json::array();
  for (const ScenarioResult& s : results) {
    Json sj = Json::object();
    sj["name"] = s.scenario->name;
    sj["model"] = s.model.name;
    sj["gpu"] = s.capacity.gpu;
    sj["gpus"] = s.capacity.parallel.gpus;
    sj["tp"] = s.capacity.parallel.tp;
    sj["engine"] = std::string(engine_name(s.capacity.engine));
    sj["kv_pool_bytes_per_gpu"] = s.capacity.kv_pool_bytes_per_gpu;
    sj["kv_tokens"] = s.capacity.kv_tokens;
    sj["fits"] = s.capacity.fits;
    sj["passed"] = s.passed();
    md += "## " + s.scenario->name + ": " + (s.passed() ? "PASS" : "FAIL") + "\n\n" + setup(s) +
          "\n\n| requirement | actual | verdict |\n| --- | ---: | --- |\n";
    Json reqs = Json::array();
    for (const RequirementResult& q : s.requirements) {
      ++total;
      failed += q.passed ? 0 : 1;
      t.rows.push_back({Cell::text(s.scenario->name), Cell::text(q.text), Cell::text(q.actual),
                        Cell::text(q.passed ? "PASS" : "FAIL")});
      md += "| " + q.text + " | " + q.actual + " | " + (q.passed ? "PASS" : "**FAIL**") + " |\n";
      Json qj = Json::object();
      qj["requirement"] = q.text;
      qj["actual"] = q.actual;
      qj["passed"] = q.passed;
      qj["where"] = q.requirement.where.str();
      reqs.push_back(std::move(qj));
    }
    md += "\n";
    sj["requirements"] = std::move(reqs);
    scenarios.push_back(std::move(sj));
  }
  std::string verdict = group_digits(total - failed) + " of " + group_digits(total) +
                        " requirements hold: plan " + (failed ? "FAILED" : "passed");
  md += "**" + verdict + "**\n";
  t.notes.push_back(verdict);
  r.json["scenarios"] = std::move(scenarios);
  r.json["requirements"] = total;
  r.json["failed"] = failed;
  r.json["passed"] = failed == 0;
  r.csv = t;
  r.tables.push_back(std::move(t));
  if (!args.report.empty()) {
    write_text_file(args.report, md);
  }
  if (!args.json.empty()) {
    write_text_file(args.json, r.json.dump(2) + "\n");
  }
  emit(r, args.output, out);
  return failed ? static_cast<int>(ExitCode::plan_failed) : 0;
}

} // namespace kvcalc::cli
