// Fuzz target: capacity plans (docs/capacity-plans.md). Only parsing: evaluating a plan reads
// the model and GPU files it names.

#include "fuzz_target.hpp"

#include <kvcalc/core/error.hpp>
#include <kvcalc/plan/plan.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    (void)kvcalc::plan::parse_plan(kvcalc::fuzz::as_text(data, size), "fuzz.yaml");
  } catch (const kvcalc::Error&) {
  }
  return 0;
}
