// Fuzz target: device profiles as `kvcalc measure` writes them (docs/device-profile.md), and
// the ceilings derived from one for a bundled GPU.

#include "fuzz_target.hpp"

#include <kvcalc/core/error.hpp>
#include <kvcalc/roofline/roofline.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    kvcalc::device::DeviceProfile profile =
        kvcalc::device::parse_device_profile(kvcalc::fuzz::as_text(data, size), "fuzz.yaml");
    (void)kvcalc::roofline::device_rates(kvcalc::device::builtin_gpus().front(), profile);
  } catch (const kvcalc::Error&) {
  }
  return 0;
}
