#pragma once
/// The arithmetic behind a result, kept as data: lines of words and typed numbers that a
/// renderer turns into text (`--explain`). A computation records it only when asked.

#include <string>
#include <utility>
#include <vector>

#include <kvcalc/core/checked.hpp>

namespace kvcalc {

/// One piece of a derivation line.
struct Term {
  enum class Kind {
    text,     ///< words, printed as they are
    count,    ///< an exact integer: 4,096
    bytes,    ///< an exact byte count: 4,096 B
    fraction, ///< a real number as given: 0.9
  };
  Kind kind = Kind::text;
  std::string text;
  u64 count = 0;
  double fraction = 0;

  Term(const char* words) : text(words) {} // NOLINT(google-explicit-constructor): reads as prose
  Term(std::string words) : text(std::move(words)) {} // NOLINT(google-explicit-constructor)
  Term(std::string_view words) : text(words) {}       // NOLINT(google-explicit-constructor)

private:
  Term(Kind k, u64 n, double x) : kind(k), count(n), fraction(x) {}
  friend Term num(u64 n);
  friend Term bytes(u64 n);
  friend Term frac(double x);
};

/// An exact integer in a derivation.
[[nodiscard]] inline Term num(u64 n) {
  return {Term::Kind::count, n, 0};
}
/// An exact byte count in a derivation.
[[nodiscard]] inline Term bytes(u64 n) {
  return {Term::Kind::bytes, n, 0};
}
/// A real number in a derivation (a memory fraction).
[[nodiscard]] inline Term frac(double x) {
  return {Term::Kind::fraction, 0, x};
}

using DerivationLine = std::vector<Term>;

class Derivation {
public:
  explicit Derivation(bool enabled = false) : m_enabled(enabled) {}

  /// Whether lines are recorded; build costly terms only when it is true.
  [[nodiscard]] bool enabled() const { return m_enabled; }

  template <class... Parts> void add(Parts&&... parts) {
    if (m_enabled) {
      m_lines.push_back(DerivationLine{Term(std::forward<Parts>(parts))...});
    }
  }
  void add_line(DerivationLine line) {
    if (m_enabled) {
      m_lines.push_back(std::move(line));
    }
  }
  void append(const Derivation& other) {
    if (m_enabled) {
      m_lines.insert(m_lines.end(), other.m_lines.begin(), other.m_lines.end());
    }
  }

  [[nodiscard]] const std::vector<DerivationLine>& lines() const { return m_lines; }

private:
  bool m_enabled = false;
  std::vector<DerivationLine> m_lines;
};

} // namespace kvcalc
