#pragma once
/// Matching names and keys: ASCII case folding and did-you-mean suggestions.

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvcalc {

/// `s` with ASCII letters lowered; every other byte (UTF-8 included) as it is.
[[nodiscard]] std::string ascii_lower(std::string_view s);

/// `s` safe to show on a terminal: control characters other than newline and tab (an escape
/// sequence in a key of a hostile file, a NUL) become "\x1b"-style escapes; UTF-8 stays.
[[nodiscard]] std::string printable(std::string_view s);

/// Whether `a` and `b` are equal but for the case of ASCII letters.
[[nodiscard]] bool iequals(std::string_view a, std::string_view b);

/// Levenshtein distance, case-insensitive.
[[nodiscard]] std::size_t edit_distance(std::string_view a, std::string_view b);

/// The candidates closest to `word` (ties kept, in candidate order) when close enough to be a
/// plausible typo; empty when none is.
[[nodiscard]] std::vector<std::string> closest_matches(std::string_view word,
                                                       std::span<const std::string> candidates);

/// The first of closest_matches, if any.
[[nodiscard]] std::optional<std::string> closest_match(std::string_view word,
                                                       std::span<const std::string> candidates);

/// "; did you mean 'x'?", "; did you mean 'x' or 'y'?" or "" — to append to an error message.
/// "; did you mean 'a', 'b' or 'c'?" for the first three of `matches`; "" for none.
[[nodiscard]] std::string did_you_mean(std::span<const std::string> matches);

[[nodiscard]] std::string did_you_mean(std::string_view word,
                                       std::span<const std::string> candidates);

} // namespace kvcalc
