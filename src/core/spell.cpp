#include <kvcalc/core/spell.hpp>

#include <algorithm>
#include <vector>

namespace kvcalc {

namespace {
char lower(char c) {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}
} // namespace

std::string printable(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  constexpr char k_hex[] = "0123456789abcdef";
  for (char c : s) {
    auto u = static_cast<unsigned char>(c);
    if ((u < 0x20 && c != '\n' && c != '\t') || u == 0x7f) {
      out += "\\x";
      out += k_hex[u >> 4];
      out += k_hex[u & 0xf];
    } else {
      out += c;
    }
  }
  return out;
}

std::string ascii_lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), lower);
  return out;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(),
                                            [](char x, char y) { return lower(x) == lower(y); });
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) {
    row[j] = j;
  }
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t above = row[j];
      std::size_t substitute = diagonal + (lower(a[i - 1]) == lower(b[j - 1]) ? 0 : 1);
      row[j] = std::min({above + 1, row[j - 1] + 1, substitute});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::vector<std::string> closest_matches(std::string_view word,
                                         std::span<const std::string> candidates) {
  // A typo changes at most about a third of a word; anything further is a different word.
  std::size_t budget = std::max<std::size_t>(2, word.size() / 3);
  std::vector<std::string> best;
  std::size_t best_distance = budget + 1;
  for (const auto& candidate : candidates) {
    std::size_t d = edit_distance(word, candidate);
    if (d < best_distance) {
      best_distance = d;
      best.clear();
    }
    if (d == best_distance && std::find(best.begin(), best.end(), candidate) == best.end()) {
      best.push_back(candidate);
    }
  }
  return best;
}

std::optional<std::string> closest_match(std::string_view word,
                                         std::span<const std::string> candidates) {
  auto matches = closest_matches(word, candidates);
  return matches.empty() ? std::nullopt : std::optional<std::string>(matches.front());
}

std::string did_you_mean(std::string_view word, std::span<const std::string> candidates) {
  return did_you_mean(closest_matches(word, candidates));
}

std::string did_you_mean(std::span<const std::string> matches) {
  if (matches.empty()) {
    return {};
  }
  std::string out = "; did you mean ";
  for (std::size_t i = 0; i < matches.size() && i < 3; ++i) {
    out += (i == 0 ? "" : i + 1 == std::min<std::size_t>(matches.size(), 3) ? " or " : ", ");
    out += "'" + matches[i] + "'";
  }
  return out + "?";
}

} // namespace kvcalc
