#include <kvcalc/core/checked.hpp>

#include <string>

namespace kvcalc {

void throw_overflow(std::string_view what) {
  throw OverflowError(std::string(what) +
                      " does not fit in 64 bits: one of this run's sizes (of the model, the "
                      "GPU, the deployment or the workload) is far beyond any real one");
}

} // namespace kvcalc
