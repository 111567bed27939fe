#include <kvcalc/core/error.hpp>

#include <cerrno>
#include <cstring>

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

Error write_error(const std::string& path) {
  const int reason = errno;
  return Error("cannot write '" + path + "'" +
               (reason != 0 ? std::string(": ") + std::strerror(reason) : std::string()) +
               "; check that its folder exists and is writable");
}

} // namespace kvcalc
