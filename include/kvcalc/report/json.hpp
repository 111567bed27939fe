#pragma once
/// A small ordered JSON value for machine output: keys keep insertion order so the output is
/// stable (docs/output-schema.md); integers stay exact 64-bit.

#include <cstdint>
#include <string>
#include <string_view>
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
  /// Serialized as dump() does, appended to `out` as a value nested `depth` levels deep.
  void write(std::string& out, int indent, int depth) const;

private:
  std::variant<std::nullptr_t, bool, std::int64_t, std::uint64_t, double, std::string, Array,
               Object>
      m_value = nullptr;
};

/// The serializer's pieces, for writers that stream records (record.hpp, output.hpp) in the same
/// text as Json::dump.
void append_json_string(std::string& out, std::string_view s);
/// A finite number as its shortest round-trip text; NaN and infinities as null.
void append_json_number(std::string& out, double v);
/// A line break and `indent` × `depth` spaces; nothing when `indent` is 0.
void append_json_newline(std::string& out, int indent, int depth);

} // namespace kvcalc::report
