// Fuzz target: GPU catalogs (`--gpu-file`, docs/gpu-catalog.md).

#include "fuzz_target.hpp"

#include <kvcalc/core/error.hpp>
#include <kvcalc/device/gpu.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    (void)kvcalc::device::parse_gpu_catalog(kvcalc::fuzz::as_text(data, size), "fuzz.yaml");
  } catch (const kvcalc::Error&) {
  }
  return 0;
}
