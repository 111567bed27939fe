// Fuzz target: workload YAML (docs/simulate.md, "Workload YAML"), its validation, and the first
// requests it generates.

#include "fuzz_target.hpp"

#include <kvcalc/core/error.hpp>
#include <kvcalc/sim/workload.hpp>

namespace {

/// Enough requests to reach every distribution and the prefix draw, few enough to stay fast.
constexpr int k_requests = 64;

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    kvcalc::Workload w = kvcalc::parse_workload(kvcalc::fuzz::as_text(data, size), "fuzz.yaml");
    kvcalc::validate_workload(w);
    (void)kvcalc::describe(w.prompt);
    (void)kvcalc::describe(w.output);
    kvcalc::SyntheticSource source(w);
    for (int i = 0; i < k_requests && source.next(); ++i) {
    }
  } catch (const kvcalc::Error&) {
  }
  return 0;
}
