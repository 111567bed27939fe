// Fuzz target: the kvcalc model YAML reader (docs/model-format.md), and its writer: a model
// that parses must write back as YAML that parses to the same model.

#include "fuzz_target.hpp"

#include <cstdlib>

#include <kvcalc/core/error.hpp>
#include <kvcalc/model/loader.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  kvcalc::model::Model model;
  try {
    model = kvcalc::model::parse_model_yaml(kvcalc::fuzz::as_text(data, size), "fuzz.yaml");
  } catch (const kvcalc::Error&) {
    return 0;
  }
  // Outside the try: an error reading back kvcalc's own output is a finding.
  std::string yaml = kvcalc::model::model_to_yaml(model);
  if (kvcalc::model::model_to_yaml(kvcalc::model::parse_model_yaml(yaml, "fuzz-roundtrip.yaml")) !=
      yaml) {
    std::abort();
  }
  return 0;
}
