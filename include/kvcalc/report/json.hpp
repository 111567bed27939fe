#pragma once
/// A small ordered JSON value for machine output: keys keep insertion order so the output is
/// stable (docs/output-schema.md); integers stay exact 64-bit.

#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace kvcalc::report {

class Json {
public:
  using Array = std::vector<Json>;
  using Object = std::vector<std::pair<std::string, Json>>;

  Json() = default; ///< null
  Json(std::nullptr_t) {}
  Json(bool b) : m_value(b) {}
  Json(int v) : m_value(static_cast<std::int64_t>(v)) {}
  Json(std::int64_t v) : m_value(v) {}
  Json(std::uint64_t v) : m_value(v) {}
  Json(double v) : m_value(v) {}
  Json(const char* s) : m_value(std::string(s)) {}
  Json(std::string s) : m_value(std::move(s)) {}
  Json(std::string_view s) : m_value(std::string(s)) {}

  [[nodiscard]] static Json array() {
    Json j;
    j.m_value = Array{};
    return j;
  }
  [[nodiscard]] static Json object() {
    Json j;
    j.m_value = Object{};
    return j;
  }

  /// Object member, appended (as null) when missing. Turns a null value into an object.
  Json& operator[](const std::string& key);
  /// Appends to an array. Turns a null value into an array.
  Json& push_back(Json value);

  /// Serialized with `indent` spaces per level (0: one line), ending without a newline.
  [[nodiscard]] std::string dump(int indent = 2) const;

private:
  void write(std::string& out, int indent, int depth) const;
  std::variant<std::nullptr_t, bool, std::int64_t, std::uint64_t, double, std::string, Array,
               Object>
      m_value = nullptr;
};

} // namespace kvcalc::report
