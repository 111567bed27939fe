#include <kvcalc/core/error.hpp>

namespace kvcalc {

std::string SourceLocation::str() const {
  if (file.empty()) {
    return {};
  }
  std::string out = file;
  if (line > 0) {
    out += ':';
    out += std::to_string(line);
    if (column > 0) {
      out += ':';
      out += std::to_string(column);
    }
  }
  return out;
}

std::string InputError::prefix(const SourceLocation& where) {
  std::string location = where.str();
  return location.empty() ? std::string{} : location + ": ";
}

} // namespace kvcalc
