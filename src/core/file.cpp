#include <kvcalc/core/file.hpp>

#include <cerrno>
#include <fstream>
#include <sstream>

#include <kvcalc/core/error.hpp>

namespace kvcalc {

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw InputError("cannot open '" + path + "': no such file, or it is not readable");
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) {
    throw InputError("cannot read '" + path + "'");
  }
  return buffer.str();
}

void write_text_file(const std::string& path, const std::string& text, bool append) {
  errno = 0; // write_error reports what the open or the write sets
  std::ofstream file(path, std::ios::binary | (append ? std::ios::app : std::ios::trunc));
  if (!file || !(file << text) || !file.flush()) {
    throw write_error(path, errno);
  }
}

} // namespace kvcalc
