#pragma once
/// Parsing of token counts and lists as users type them, and digit grouping for exact integers.

#include <string>
#include <string_view>
#include <vector>

#include <kvcalc/core/checked.hpp>

namespace kvcalc {

/// A token count: a plain integer ("32768"), or with a binary suffix: "4k" = 4,096,
/// "128k" = 131,072, "1M" = 1,048,576 (k and m in either case). A fraction is accepted when the
/// result is a whole number ("1.5k" = 1,536). Zero and negative counts are errors. `what`
/// names the option in error messages ("--context").
[[nodiscard]] u64 parse_count(std::string_view text, std::string_view what);

/// A comma-separated list of parse_count values, in the order given.
[[nodiscard]] std::vector<u64> parse_count_list(std::string_view text, std::string_view what);

/// A byte size: plain bytes ("4096") or with a unit: B, KiB, MiB, GiB, TiB (powers of 1024),
/// kB, MB, GB, TB (powers of 1000), in any case for the letters after the first; fractions
/// allowed ("3.81GiB" = 4,090,956,349 B, rounded down to whole bytes). Negative or empty
/// values are errors naming `what`.
[[nodiscard]] u64 parse_bytes(std::string_view text, std::string_view what);

/// A real number in [low, high] ("0.9"); errors name `what`.
[[nodiscard]] double parse_fraction(std::string_view text, std::string_view what, double low,
                                    double high);

/// `s` without leading and trailing whitespace.
[[nodiscard]] std::string_view trim(std::string_view s);

/// 70272 → "70,272".
[[nodiscard]] std::string group_digits(u64 value);

} // namespace kvcalc
