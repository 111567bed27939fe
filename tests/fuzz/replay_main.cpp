// Replays fuzz inputs without libFuzzer: every file named on the command line, or every file
// of every folder named, goes through the target's LLVMFuzzerTestOneInput once. CTest runs it
// over each target's corpus and its regressions, so every finding stays a test under GCC and
// under the sanitizer build.

#include "fuzz_target.hpp"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

namespace fs = std::filesystem;

namespace {

std::vector<std::uint8_t> read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw std::runtime_error("cannot open " + path.string());
  }
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

} // namespace

int main(int argc, char** argv) {
  try {
    std::vector<fs::path> inputs;
    for (int i = 1; i < argc; ++i) {
      fs::path arg(argv[i]);
      if (fs::is_directory(arg)) {
        for (const auto& entry : fs::directory_iterator(arg)) {
          if (entry.is_regular_file()) {
            inputs.push_back(entry.path());
          }
        }
      } else if (fs::exists(arg)) {
        inputs.push_back(arg);
      } else {
        std::fprintf(stderr, "replay: no such file or folder: %s\n", argv[i]);
        return 1;
      }
    }
    std::sort(inputs.begin(), inputs.end());
    for (const fs::path& input : inputs) {
      std::vector<std::uint8_t> data = read_file(input);
      std::fprintf(stderr, "replay: %s (%zu bytes)\n", input.string().c_str(), data.size());
      LLVMFuzzerTestOneInput(data.data(), data.size());
    }
    std::fprintf(stderr, "replay: %zu inputs, no crash\n", inputs.size());
    return inputs.empty() ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "replay: uncaught exception: %s\n", e.what());
    return 1;
  }
}
