#pragma once
/// The command line. The only module that knows CLI11; `main` calls run() and maps the
/// exceptions it throws to exit codes.

#include <iosfwd>

namespace kvcalc::cli {

/// Parses argv and runs one command, writing data to `out` and messages for people to `err`.
/// Returns the exit code of a command that finished; throws kvcalc::Error on failure.
int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

} // namespace kvcalc::cli
