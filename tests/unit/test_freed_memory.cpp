// keep_freed_memory (kernels/cpu probes) in a process of its own: it fixes the process's malloc
// thresholds and the check counts the process's page faults. Where there is nothing to check
// (a sanitizer's allocator, or a C library other than glibc) the binary says why and exits 77,
// which CTest reports as skipped, never as passed.

#include <catch2/catch.hpp>

#include "catch_session.hpp"

#include <cstddef>
#include <iostream>
#include <vector>

#include <sys/resource.h>

#include <kvcalc/kernels/cpu/probes.hpp>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KVCALC_CLANG_ASAN 1
#endif
#endif
#if !defined(KVCALC_CLANG_ASAN)
#define KVCALC_CLANG_ASAN 0
#endif

namespace {

/// Why this build cannot check keep_freed_memory, or nullptr when it can.
const char* unchecked_reason() {
#if defined(__SANITIZE_ADDRESS__) || KVCALC_CLANG_ASAN
  return "the sanitizer's allocator maps and unmaps large blocks itself";
#elif !defined(__GLIBC__)
  return "keep_freed_memory acts on glibc's malloc only";
#else
  return nullptr;
#endif
}

} // namespace

int main(int argc, char* argv[]) {
  if (const char* reason = unchecked_reason()) {
    std::cout << "kvcalc freed-memory test: " << reason << "; skipped\n";
    return 77;
  }
  return run_catch_session(argc, argv);
}

TEST_CASE("freed buffers are reused, not faulted in again", "[kernels][probes]") {
  kvcalc::kernels::keep_freed_memory();
  auto faults = [] {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_minflt;
  };
  auto touch = [](std::size_t bytes) {
    std::vector<char> block(bytes);                    // zero-filled: every page written
    asm volatile("" : : "r"(block.data()) : "memory"); // and not elided by the compiler
    return block[bytes / 2];
  };
  constexpr std::size_t k_bytes = 16 << 20; // over glibc's adaptive thresholds, under the fixed
  char kept = touch(k_bytes);
  long before = faults();
  kept = static_cast<char>(kept + touch(k_bytes));
  long after = faults();
  CHECK(kept == 0);
  // A fresh 16 MiB block faults in 4096 pages of 4 KiB.
  CHECK(after - before < 256);
}
