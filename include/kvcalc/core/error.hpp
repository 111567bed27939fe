#pragma once
/// Error types shared by every module. Library code throws; only `main` maps them to exit codes.

#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace kvcalc {

/// Process exit codes (docs/cli.md).
enum class ExitCode : int {
  ok = 0,           ///< success
  error = 1,        ///< an internal or environment error (I/O, unexpected state)
  bad_input = 2,    ///< bad command line, model file, or value
  plan_failed = 3,  ///< a capacity-plan requirement failed
  does_not_fit = 4, ///< the deployment cannot hold the model (or one request of its length)
};

/// Where in an input file something was found. Lines and columns count from 1; 0 means unknown.
struct SourceLocation {
  std::string file;
  int line = 0;
  int column = 0;

  /// "file:line:col", "file:line", "file", or "" when nothing is known.
  [[nodiscard]] std::string str() const;
};

/// Maps a schema key path ("attention.heads") to where it was written; unknown paths may map
/// to the file alone.
using Locator = std::function<SourceLocation(std::string_view key_path)>;

/// Base of every kvcalc error.
class Error : public std::runtime_error {
public:
  explicit Error(const std::string& message, ExitCode code = ExitCode::error)
      : std::runtime_error(message), m_code(code) {}
  [[nodiscard]] ExitCode code() const noexcept { return m_code; }

private:
  ExitCode m_code;
};

/// Input the user can fix: a model file, a flag value, a config.json. Exit code 2.
class InputError : public Error {
public:
  explicit InputError(const std::string& message) : Error(message, ExitCode::bad_input) {}
  InputError(const SourceLocation& where, const std::string& message)
      : Error(prefix(where) + message, ExitCode::bad_input) {}

private:
  static std::string prefix(const SourceLocation& where);
};

/// A deployment that cannot hold the model, or one request of the length asked: the engine
/// would refuse to start. Exit code 4.
class DoesNotFit : public Error {
public:
  explicit DoesNotFit(const std::string& message) : Error(message, ExitCode::does_not_fit) {}
};

/// A size computation that does not fit in 64 bits. It is bad input: no real model gets there.
class OverflowError : public InputError {
public:
  using InputError::InputError;
};

/// The error for a file that could not be written, with the system's reason (`reason`: the
/// errno of the failed open, write or flush, read by the caller at once; 0 when unknown) and
/// what to check: "cannot write 'out/x.json': No such file or directory; check that its folder
/// exists".
[[nodiscard]] Error write_error(const std::string& path, int reason);

} // namespace kvcalc
