#include <kvcalc/core/version.hpp>

namespace kvcalc {

std::string_view version() {
  return KVCALC_VERSION;
}

bool built_with_cuda() {
  return KVCALC_WITH_CUDA != 0;
}

} // namespace kvcalc
