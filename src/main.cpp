#include <cerrno>
#include <cstring>
#include <exception>
#include <iostream>
#include <new>
#include <string>

#include <kvcalc/cli/app.hpp>
#include <kvcalc/core/error.hpp>
#include <kvcalc/core/spell.hpp>

namespace {

/// The exit code once everything is written: a report that did not reach standard output (a
/// full disk, say) is an error, not a success.
int after_output(int code) {
  errno = 0;
  std::cout.flush();
  if (std::cout) {
    return code;
  }
  // errno says why when this flush failed; a stream that failed earlier, part-way through a
  // long report, no longer knows.
  const int reason = errno;
  std::cerr << "kvcalc: error: cannot write to standard output"
            << (reason != 0 ? std::string(": ") + std::strerror(reason)
                            : std::string(" (it stopped taking the report part-way)"))
            << '\n';
  return static_cast<int>(kvcalc::ExitCode::error);
}

} // namespace

int main(int argc, char** argv) {
  try {
    return after_output(kvcalc::cli::run_cli(argc, argv, std::cout, std::cerr));
  } catch (const kvcalc::Error& e) {
    std::cout.flush();
    std::cerr << "kvcalc: error: " << kvcalc::printable(e.what()) << '\n';
    return static_cast<int>(e.code());
  } catch (const std::bad_alloc&) {
    std::cout.flush();
    std::cerr << "kvcalc: error: out of memory: ask for less (shorter contexts, fewer sequences, "
                 "heads or requests), or run where there is more memory\n";
    return static_cast<int>(kvcalc::ExitCode::error);
  } catch (const std::exception& e) {
    std::cout.flush();
    std::cerr << "kvcalc: internal error: " << kvcalc::printable(e.what()) << '\n';
    return static_cast<int>(kvcalc::ExitCode::error);
  }
}
