#pragma once
/// Data files compiled into the binary (cmake/embed_files.cmake), so kvcalc finds its bundled
/// models and GPU catalog from any directory.

#include <span>
#include <string_view>

namespace kvcalc {

struct EmbeddedFile {
  std::string_view path; ///< as in the source tree, e.g. "models/deepseek-v3.yaml"
  std::string_view text;
};

} // namespace kvcalc
