#include <exception>
#include <iostream>
#include <new>

#include <kvcalc/cli/app.hpp>
#include <kvcalc/core/error.hpp>

int main(int argc, char** argv) {
  try {
    return kvcalc::run_cli(argc, argv, std::cout, std::cerr);
  } catch (const kvcalc::Error& e) {
    std::cout.flush();
    std::cerr << "kvcalc: error: " << e.what() << '\n';
    return static_cast<int>(e.code());
  } catch (const std::bad_alloc&) {
    std::cout.flush();
    std::cerr << "kvcalc: error: out of memory: ask for less (shorter contexts, fewer sequences, "
                 "heads or requests), or run where there is more memory\n";
    return static_cast<int>(kvcalc::ExitCode::error);
  } catch (const std::exception& e) {
    std::cout.flush();
    std::cerr << "kvcalc: internal error: " << e.what() << '\n';
    return static_cast<int>(kvcalc::ExitCode::error);
  }
}
