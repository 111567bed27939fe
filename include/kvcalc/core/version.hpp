#pragma once
/// Build identity, for --version and the JSON header.

#include <string_view>

namespace kvcalc {

[[nodiscard]] std::string_view version();
/// True when the CUDA kernels were compiled in.
[[nodiscard]] bool built_with_cuda();
/// Bumped when a field of the JSON output changes meaning or disappears (docs/output-schema.md).
inline constexpr int k_json_schema = 5;

} // namespace kvcalc
