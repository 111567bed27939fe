// Fuzz target: the values users type on the command line and in files. The first byte picks
// the parser, the rest is the text.

#include "fuzz_target.hpp"

#include <string_view>

#include <kvcalc/core/dtype.hpp>
#include <kvcalc/core/error.hpp>
#include <kvcalc/core/units.hpp>
#include <kvcalc/kv/cache_format.hpp>
#include <kvcalc/kv/capacity.hpp>
#include <kvcalc/roofline/roofline.hpp>
#include <kvcalc/sim/simulator.hpp>
#include <kvcalc/sim/workload.hpp>

namespace {

void parse_one(unsigned char which, std::string_view text) {
  switch (which % 13) {
  case 0:
    (void)kvcalc::parse_count(text, "--context");
    break;
  case 1:
    (void)kvcalc::parse_count_list(text, "--context");
    break;
  case 2:
    (void)kvcalc::parse_bytes(text, "--reserve");
    break;
  case 3:
    (void)kvcalc::parse_fraction(text, "--memory-fraction", 0.0, 1.0);
    break;
  case 4:
    (void)kvcalc::parse_dtype(text, "--kv-dtype");
    break;
  case 5:
    (void)kvcalc::kv::parse_scale(text);
    break;
  case 6:
    (void)kvcalc::kv::parse_mla_format(text);
    break;
  case 7:
    (void)kvcalc::kv::parse_engine(text);
    break;
  case 8:
    (void)kvcalc::roofline::parse_phase(text);
    break;
  case 9:
    (void)kvcalc::roofline::parse_mla_mode(text);
    break;
  case 10:
    (void)kvcalc::sim::parse_preemption(text);
    break;
  case 11:
    (void)kvcalc::sim::parse_arrival(text);
    break;
  default: {
    kvcalc::sim::LengthDistribution d = kvcalc::sim::parse_length_distribution(text, "--prompt");
    (void)kvcalc::sim::describe(d);
    (void)d.mean();
    kvcalc::sim::Rng rng(1);
    for (int i = 0; i < 16; ++i) {
      (void)d.sample(rng);
    }
  }
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) {
    return 0;
  }
  try {
    parse_one(data[0], std::string_view(reinterpret_cast<const char*>(data + 1), size - 1));
  } catch (const kvcalc::Error&) {
  }
  return 0;
}
