// Fuzz target: capacity plans evaluated (docs/capacity-plans.md): parsed, then every scenario's
// model loaded and its capacity and requirements computed. The Hub is never asked: a repo id
// names an empty cache, offline.

#include "fuzz_target.hpp"

#include <cstdlib>

#include <kvcalc/core/error.hpp>
#include <kvcalc/model/loader.hpp>
#include <kvcalc/plan/plan.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const bool offline = [] {
    ::setenv("HF_HUB_OFFLINE", "1", 1);
    ::setenv("HF_HUB_CACHE", "/nonexistent/kvcalc-fuzz-hub", 1);
    return true;
  }();
  (void)offline;
  try {
    kvcalc::plan::Plan plan =
        kvcalc::plan::parse_plan(kvcalc::fuzz::as_text(data, size), "fuzz.yaml");
    kvcalc::model::Diagnostics diagnostics;
    std::vector<kvcalc::plan::ScenarioResult> results =
        kvcalc::plan::evaluate_plan(plan, diagnostics);
    for (const auto& r : results) {
      (void)r.passed();
    }
  } catch (const kvcalc::Error&) {
  }
  return 0;
}
