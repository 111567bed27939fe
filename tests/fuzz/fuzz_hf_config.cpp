// Fuzz target: HuggingFace config.json import, and telling it from kvcalc YAML.

#include "fuzz_target.hpp"

#include <kvcalc/core/error.hpp>
#include <kvcalc/model/loader.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string text = kvcalc::fuzz::as_text(data, size);
  try {
    kvcalc::model::Diagnostics diagnostics;
    (void)kvcalc::model::parse_hf_config(text, "fuzz.json", diagnostics);
  } catch (const kvcalc::Error&) {
  }
  try {
    kvcalc::model::Diagnostics diagnostics;
    (void)kvcalc::model::parse_model_document(text, "fuzz.json", diagnostics);
  } catch (const kvcalc::Error&) {
  }
  return 0;
}
