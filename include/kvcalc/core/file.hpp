#pragma once
/// Reading and writing the user's files (docs/reliability.md, "Files"):
/// - a read takes a regular file or a pipe, never a folder, and at most k_max_input_bytes;
/// - every file read is remembered, and no output may be one of them;
/// - an output is written to a temporary beside it and renamed over it only when complete, so
///   a failed or interrupted run leaves the old file as it was.

#include <cstdint>
#include <fstream>
#include <string>

namespace kvcalc {

/// The most bytes one input file may hold: 16 MiB, as the Hub client. A config.json is tens of
/// kilobytes; a quantization file that lists every layer's tensors, single megabytes.
inline constexpr std::uint64_t k_max_input_bytes = 16ULL << 20;

/// Reads a file whole; a missing, unreadable or oversized file, or a folder, is an InputError
/// naming it. The file is remembered as an input (note_input).
[[nodiscard]] std::string read_text_file(const std::string& path);

/// Opens `path` for reading as a stream (a trace), with read_text_file's checks but no size
/// limit: the reader streams it. The file is remembered as an input.
[[nodiscard]] std::ifstream open_input_file(const std::string& path);

/// Remembers `path` as a file this run reads, so no output replaces it.
void note_input(const std::string& path);

/// An InputError when `path` is a file this run has read (the same file by device and inode,
/// whatever the spelling): `what` names the option that writes it.
void refuse_input_as_output(const std::string& path, const std::string& what);

/// An output file: written to a temporary in the target's folder, renamed over `path` by
/// commit(). Destroyed without commit(), it removes the temporary and leaves `path` untouched.
class OutputFile {
public:
  /// `what` names the output in errors ("--timeline"). Throws an InputError when `path` is an
  /// input of this run, an Error when its folder cannot take the temporary.
  OutputFile(std::string path, std::string what);
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  /// The stream to write to; a write error is found by commit().
  [[nodiscard]] std::ostream& stream() { return m_stream; }
  /// Flushes, checks, and renames the temporary over the target.
  void commit();
  [[nodiscard]] const std::string& path() const { return m_path; }

private:
  std::string m_path;
  std::string m_what;
  std::string m_target;    ///< the file renamed over: `path`, or the file its link names
  std::string m_temporary; ///< empty when written in place (a device or a pipe)
  std::ofstream m_stream;
  bool m_committed = false;
};

/// Writes `text` to `path` through an OutputFile, or appends it (an append never truncates, so
/// it writes in place); `what` names the option in errors. An unwritable path (a missing
/// folder, a full disk) is an Error naming it and why, and an input of this run an InputError.
enum class WriteMode { replace, append };
void write_text_file(const std::string& path, const std::string& text, const std::string& what,
                     WriteMode mode = WriteMode::replace);

} // namespace kvcalc
