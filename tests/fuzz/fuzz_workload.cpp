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
    kvcalc::sim::Workload w =
        kvcalc::sim::parse_workload(kvcalc::fuzz::as_text(data, size), "fuzz.yaml");
    kvcalc::sim::validate_workload(w);
    (void)kvcalc::sim::describe(w.prompt);
    (void)kvcalc::sim::describe(w.output);
    kvcalc::sim::SyntheticSource source(w);
    for (int i = 0; i < k_requests && source.next(); ++i) {
    }
  } catch (const kvcalc::Error&) {
  }
  return 0;
}
