#pragma once
/// One table of names per enum: printing, parsing, the "(one of: ...)" text and did-you-mean
/// all read it, so a name is written once. A value may have several entries: the first is its
/// name, the others aliases that parse to it.

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <kvcalc/core/error.hpp>
#include <kvcalc/core/spell.hpp>

namespace kvcalc {

template <class E> struct Named {
  E value;
  std::string_view name;
};

template <class E, std::size_t N> class NameTable {
public:
  /// `what` names the kind of value in errors ("layer type", "state kind").
  constexpr NameTable(std::string_view what, std::array<Named<E>, N> entries)
      : m_what(what), m_entries(entries) {}

  [[nodiscard]] constexpr std::string_view name(E value) const {
    for (const auto& e : m_entries) {
      if (e.value == value) {
        return e.name;
      }
    }
    return "?";
  }

  [[nodiscard]] constexpr std::optional<E> find(std::string_view text) const {
    for (const auto& e : m_entries) {
      if (e.name == text) {
        return e.value;
      }
    }
    return std::nullopt;
  }

  /// The value named `text` in any case ("vLLM" is vllm): what the command line accepts.
  [[nodiscard]] std::optional<E> find_any_case(std::string_view text) const {
    for (const auto& e : m_entries) {
      if (iequals(e.name, text)) {
        return e.value;
      }
    }
    return std::nullopt;
  }

  /// "a, b, c": the canonical names.
  [[nodiscard]] std::string list() const {
    std::string out;
    for (const auto& n : names()) {
      out += (out.empty() ? "" : ", ") + n;
    }
    return out;
  }

  /// The canonical names: the first entry of each value (later ones are aliases).
  [[nodiscard]] std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : m_entries) {
      if (name(e.value) == e.name) {
        out.emplace_back(e.name);
      }
    }
    return out;
  }

  /// Every name, aliases included.
  [[nodiscard]] std::vector<std::string> all_names() const {
    std::vector<std::string> out;
    for (const auto& e : m_entries) {
      out.emplace_back(e.name);
    }
    return out;
  }

  /// "unknown <what> 'x'; did you mean 'y'? (one of: a, b, c)".
  [[nodiscard]] std::string unknown(std::string_view text) const {
    return "unknown " + std::string(m_what) + " '" + std::string(text) + "'" +
           did_you_mean(text, all_names()) + " (one of: " + list() + ")";
  }

  /// The value named `text`; an InputError with a did-you-mean otherwise.
  [[nodiscard]] E parse(std::string_view text) const {
    if (auto value = find(text)) {
      return *value;
    }
    throw InputError(unknown(text));
  }

  [[nodiscard]] constexpr const std::array<Named<E>, N>& entries() const { return m_entries; }

private:
  std::string_view m_what;
  std::array<Named<E>, N> m_entries;
};

} // namespace kvcalc
