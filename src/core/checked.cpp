#include <kvcalc/core/checked.hpp>

#include <string>

namespace kvcalc {

void throw_overflow(std::string_view what) {
  throw OverflowError(std::string(what) +
                      " does not fit in 64 bits; check the sizes in the model and the context "
                      "length for absurd values");
}

} // namespace kvcalc
