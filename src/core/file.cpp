#include <kvcalc/core/file.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <vector>

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <kvcalc/core/error.hpp>

namespace kvcalc {

namespace {

/// A file by identity: the same device and inode is the same file, whatever path names it.
struct FileId {
  dev_t device = 0;
  ino_t inode = 0;
  std::string path; ///< as the run named it first
};

struct Inputs {
  std::mutex mutex;
  std::vector<FileId> files;
};

Inputs& inputs() {
  static Inputs all;
  return all;
}

/// The file `path` names, checked before it is opened: it exists and is not a folder.
/// `path` opened for reading and noted as an input (refuse_input_as_output), its status in `st`.
/// It must exist and not be a folder; a `bounded` read also refuses a regular file above
/// k_max_input_bytes before reading any of it.
std::ifstream open_checked(const std::string& path, bool bounded, struct stat& st) {
  if (::stat(path.c_str(), &st) != 0) {
    throw InputError("cannot open '" + path + "': no such file, or it is not readable");
  }
  if (S_ISDIR(st.st_mode)) {
    throw InputError("'" + path + "' is a folder, not a file: give the file inside it");
  }
  if (bounded && S_ISREG(st.st_mode) &&
      static_cast<std::uint64_t>(st.st_size) > k_max_input_bytes) {
    throw InputError(fmt::format("'{}' holds {:.1f} MiB, more than the {} MiB kvcalc reads from "
                                 "one input file (docs/reliability.md, \"Limits\")",
                                 path, static_cast<double>(st.st_size) / (1 << 20),
                                 k_max_input_bytes >> 20));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw InputError("cannot open '" + path + "': no such file, or it is not readable");
  }
  note_input(path);
  return in;
}

} // namespace

void note_input(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return;
  }
  Inputs& in = inputs();
  std::lock_guard<std::mutex> lock(in.mutex);
  bool known = std::any_of(in.files.begin(), in.files.end(), [&](const FileId& f) {
    return f.device == st.st_dev && f.inode == st.st_ino;
  });
  if (!known) {
    in.files.push_back({st.st_dev, st.st_ino, path});
  }
}

void refuse_input_as_output(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return; // a new file, or a device or pipe that holds nothing to lose
  }
  Inputs& in = inputs();
  std::lock_guard<std::mutex> lock(in.mutex);
  for (const FileId& f : in.files) {
    // The input's path must still name that file: an inode of a file removed since is reused.
    struct stat now {};
    bool same = f.device == st.st_dev && f.inode == st.st_ino &&
                ::stat(f.path.c_str(), &now) == 0 && now.st_dev == f.device &&
                now.st_ino == f.inode;
    if (same) {
      throw InputError(what + " would write '" + path + "', which this run reads" +
                       (f.path == path ? std::string() : " as '" + f.path + "'") +
                       ": kvcalc never writes over its input; choose another file");
    }
  }
}

std::string read_text_file(const std::string& path) {
  struct stat st {};
  std::ifstream in = open_checked(path, true, st);
  std::string text;
  if (S_ISREG(st.st_mode)) {
    text.reserve(static_cast<std::size_t>(st.st_size));
  }
  // A pipe or a device says no size: read in blocks, never past the limit.
  char block[1 << 16];
  while (in.read(block, sizeof block) || in.gcount() > 0) {
    text.append(block, static_cast<std::size_t>(in.gcount()));
    if (text.size() > k_max_input_bytes) {
      throw InputError(fmt::format("'{}' holds more than the {} MiB kvcalc reads from one input "
                                   "file (docs/reliability.md, \"Limits\")",
                                   path, k_max_input_bytes >> 20));
    }
  }
  if (in.bad()) {
    throw InputError("cannot read '" + path + "'");
  }
  return text;
}

std::ifstream open_input_file(const std::string& path) {
  struct stat st {};
  return open_checked(path, false, st);
}

OutputFile::OutputFile(std::string path, std::string what)
    : m_path(std::move(path)), m_what(std::move(what)) {
  refuse_input_as_output(m_path, m_what);
  std::error_code ec;
  auto status = std::filesystem::status(m_path, ec); // through links
  if (std::filesystem::is_directory(status)) {
    throw write_error(m_path, EISDIR);
  }
  // /dev/stdout, /dev/null, /proc/self/fd/N, a pipe: nothing to keep, nothing to rename over,
  // and the name means the descriptor, not a file to replace.
  bool in_place = m_path.starts_with("/dev/") || m_path.starts_with("/proc/") ||
                  (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status));
  std::filesystem::path target(m_path);
  if (!in_place && std::filesystem::is_symlink(target, ec)) {
    target = std::filesystem::weakly_canonical(target, ec); // write the file it points to
  }
  if (in_place) {
    errno = 0;
    m_stream.open(target, std::ios::binary);
    if (!m_stream) {
      throw write_error(m_path, errno);
    }
    return;
  }
  std::filesystem::path folder = target.parent_path();
  std::string pattern = (folder.empty() ? std::filesystem::path(".") : folder).string() + "/." +
                        target.filename().string() + ".kvcalc-XXXXXX";
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  errno = 0;
  int fd = ::mkstemp(name.data());
  if (fd < 0) {
    throw write_error(m_path, errno);
  }
  // The mode a new file gets (0666 less the umask), or the mode of the file it replaces.
  struct stat old {};
  mode_t mode = 0;
  if (::stat(target.c_str(), &old) == 0) {
    mode = old.st_mode & 07777;
  } else {
    mode_t mask = ::umask(0);
    ::umask(mask);
    mode = 0666 & ~mask;
  }
  (void)::fchmod(fd, mode);
  ::close(fd);
  m_temporary = name.data();
  m_target = target.string();
  m_stream.open(m_temporary, std::ios::binary | std::ios::trunc);
  if (!m_stream) {
    int reason = errno;
    std::remove(m_temporary.c_str());
    m_temporary.clear();
    throw write_error(m_path, reason);
  }
}

OutputFile::~OutputFile() {
  if (!m_committed && !m_temporary.empty()) {
    m_stream.close();
    std::remove(m_temporary.c_str());
  }
}

void OutputFile::commit() {
  // A write that failed already left its reason in errno; else the flush may.
  int reason = m_stream ? 0 : errno;
  if (m_stream) {
    errno = 0;
    m_stream.flush();
    reason = errno;
  }
  bool written = static_cast<bool>(m_stream);
  m_stream.close();
  if (!written || m_stream.fail()) {
    throw write_error(m_path, reason != 0 ? reason : errno);
  }
  if (m_temporary.empty()) {
    m_committed = true;
    return;
  }
  refuse_input_as_output(m_target, m_what); // an input read since the file was opened
  errno = 0;
  if (std::rename(m_temporary.c_str(), m_target.c_str()) != 0) {
    throw write_error(m_path, errno);
  }
  m_committed = true;
}

void write_text_file(const std::string& path, const std::string& text, const std::string& what,
                     WriteMode mode) {
  if (mode == WriteMode::append) {
    refuse_input_as_output(path, what);
    errno = 0; // write_error reports what the open or the write sets
    std::ofstream file(path, std::ios::binary | std::ios::app);
    if (!file || !(file << text) || !file.flush()) {
      throw write_error(path, errno);
    }
    return;
  }
  OutputFile file(path, what);
  errno = 0; // commit() reports what the write sets
  file.stream() << text;
  file.commit();
}

} // namespace kvcalc
