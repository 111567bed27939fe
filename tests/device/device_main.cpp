// Device tests: run only where a CUDA GPU is visible; elsewhere the binary says so and exits
// with 77, which CTest reports as skipped (never as passed).

#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <iostream>

#include <kvcalc/kernels/cuda/cuda_kernels.hpp>

int main(int argc, char* argv[]) {
  if (kvcalc::kernels::cuda::device_count() == 0) {
    std::cout << "kvcalc device tests: no CUDA device visible; skipped\n";
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
