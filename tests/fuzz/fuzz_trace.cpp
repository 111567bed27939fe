// Fuzz target: request traces, CSV or JSONL, read as the simulator streams them.

#include "fuzz_target.hpp"

#include <sstream>

#include <kvcalc/core/error.hpp>
#include <kvcalc/sim/trace.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::istringstream in(kvcalc::fuzz::as_text(data, size));
  try {
    kvcalc::sim::TraceReader reader(in, "fuzz.trace");
    while (reader.next()) {
    }
  } catch (const kvcalc::Error&) {
  }
  return 0;
}
