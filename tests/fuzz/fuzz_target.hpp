#pragma once
// The entry point every fuzz target defines, for libFuzzer and for the replay driver.

#include <cstddef>
#include <cstdint>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace kvcalc::fuzz {

/// The input as text; parsers take std::string, so embedded NULs reach them as well.
inline std::string as_text(const std::uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

} // namespace kvcalc::fuzz
