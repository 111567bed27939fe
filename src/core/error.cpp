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

Error write_error(const std::string& path, int reason) {
  std::string message = "cannot write '" + path + "'";
  if (reason == 0) {
    return Error(message);
  }
  message += std::string(": ") + std::strerror(reason);
  switch (reason) {
  case ENOENT:
  case ENOTDIR:
    return Error(message + "; check that its folder exists");
  case EACCES:
  case EPERM:
  case EROFS:
    return Error(message + "; check that you may write there");
  case ENOSPC:
  case EDQUOT:
    return Error(message + "; free some space, or write elsewhere");
  case EISDIR:
    return Error(message + "; give a file name, not a folder");
  default:
    return Error(message);
  }
}

} // namespace kvcalc
