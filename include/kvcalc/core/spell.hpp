#pragma once
/// Did-you-mean suggestions for names and keys.

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kvcalc {

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
[[nodiscard]] std::string did_you_mean(std::string_view word,
                                       std::span<const std::string> candidates);

} // namespace kvcalc
