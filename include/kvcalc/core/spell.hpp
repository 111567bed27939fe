#pragma once
/// Did-you-mean suggestions for names and keys.

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace kvcalc {

/// Levenshtein distance, case-insensitive.
[[nodiscard]] std::size_t edit_distance(std::string_view a, std::string_view b);

/// The closest candidate to `word` when it is close enough to be a plausible typo.
[[nodiscard]] std::optional<std::string> closest_match(std::string_view word,
                                                       std::span<const std::string> candidates);

/// "; did you mean 'x'?" or "" — ready to append to an error message.
[[nodiscard]] std::string did_you_mean(std::string_view word,
                                       std::span<const std::string> candidates);

} // namespace kvcalc
