#pragma once
/// Overflow-checked unsigned arithmetic for sizes. Every product of sizes in kvcalc goes through
/// these: a result that does not fit in 64 bits is an OverflowError, never a wrapped number.

#include <cstdint>
#include <string_view>

#include <kvcalc/core/error.hpp>

namespace kvcalc {

using u64 = std::uint64_t;

[[noreturn]] void throw_overflow(std::string_view what);

/// a × b; `what` names the quantity for the error message.
inline u64 checked_mul(u64 a, u64 b, std::string_view what = "size") {
  u64 out = 0;
  if (__builtin_mul_overflow(a, b, &out)) {
    throw_overflow(what);
  }
  return out;
}

/// a + b; `what` names the quantity for the error message.
inline u64 checked_add(u64 a, u64 b, std::string_view what = "size") {
  u64 out = 0;
  if (__builtin_add_overflow(a, b, &out)) {
    throw_overflow(what);
  }
  return out;
}

/// ⌈a / b⌉ for b > 0, without the overflow of (a + b − 1) / b.
constexpr u64 ceil_div(u64 a, u64 b) {
  return a / b + (a % b != 0 ? 1 : 0);
}

} // namespace kvcalc
