#include <kvcalc/report/json.hpp>

#include <charconv>
#include <cmath>
#include <stdexcept>

namespace kvcalc::report {

Json& Json::operator[](const std::string& key) {
  if (std::holds_alternative<std::nullptr_t>(m_value)) {
    m_value = Object{};
  }
  auto& object = std::get<Object>(m_value);
  for (auto& [k, v] : object) {
    if (k == key) {
      return v;
    }
  }
  object.emplace_back(key, Json{});
  return object.back().second;
}

Json& Json::push_back(Json value) {
  if (std::holds_alternative<std::nullptr_t>(m_value)) {
    m_value = Array{};
  }
  auto& array = std::get<Array>(m_value);
  array.push_back(std::move(value));
  return array.back();
}

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  std::size_t plain = 0; // the start of the run of characters that go as they are
  for (std::size_t i = 0; i < s.size(); ++i) {
    auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c != '"' && c != '\\') {
      continue;
    }
    out.append(s.substr(plain, i - plain));
    plain = i + 1;
    switch (c) {
    case '"':
      out += "\\\"";
      break;
    case '\\':
      out += "\\\\";
      break;
    case '\n':
      out += "\\n";
      break;
    case '\t':
      out += "\\t";
      break;
    case '\r':
      out += "\\r";
      break;
    default: {
      static const char* hex = "0123456789abcdef";
      out += "\\u00";
      out += hex[(c >> 4) & 0xF];
      out += hex[c & 0xF];
    }
    }
  }
  out.append(s.substr(plain));
  out += '"';
}

void append_json_newline(std::string& out, int indent, int depth) {
  if (indent > 0) {
    out += '\n';
    out.append(static_cast<std::size_t>(indent * depth), ' ');
  }
}

void append_json_number(std::string& out, double v) {
  if (!std::isfinite(v)) {
    out += "null";
    return;
  }
  char buffer[32];
  auto result = std::to_chars(buffer, buffer + sizeof buffer, v);
  out.append(buffer, result.ptr);
}

void Json::write(std::string& out, int indent, int depth) const {
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::nullptr_t>) {
          out += "null";
        } else if constexpr (std::is_same_v<T, bool>) {
          out += v ? "true" : "false";
        } else if constexpr (std::is_same_v<T, std::int64_t> || std::is_same_v<T, std::uint64_t>) {
          out += std::to_string(v);
        } else if constexpr (std::is_same_v<T, double>) {
          append_json_number(out, v);
        } else if constexpr (std::is_same_v<T, std::string>) {
          append_json_string(out, v);
        } else if constexpr (std::is_same_v<T, Array>) {
          out += '[';
          for (std::size_t i = 0; i < v.size(); ++i) {
            out += i ? "," : "";
            append_json_newline(out, indent, depth + 1);
            v[i].write(out, indent, depth + 1);
          }
          if (!v.empty()) {
            append_json_newline(out, indent, depth);
          }
          out += ']';
        } else {
          out += '{';
          for (std::size_t i = 0; i < v.size(); ++i) {
            out += i ? "," : "";
            append_json_newline(out, indent, depth + 1);
            append_json_string(out, v[i].first);
            out += indent > 0 ? ": " : ":";
            v[i].second.write(out, indent, depth + 1);
          }
          if (!v.empty()) {
            append_json_newline(out, indent, depth);
          }
          out += '}';
        }
      },
      m_value);
}

std::string Json::dump(int indent) const {
  std::string out;
  write(out, indent, 0);
  return out;
}

} // namespace kvcalc::report
