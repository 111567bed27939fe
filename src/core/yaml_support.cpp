#include "yaml_support.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include <kvcalc/core/spell.hpp>
#include <kvcalc/core/units.hpp>

#include <yaml-cpp/depthguard.h>

namespace kvcalc::detail {

namespace {

/// The line (1-based) where a second YAML document starts, 0 when there is none. A line that
/// begins with `---` is always a document marker, so no scalar can hide one; a first `---`
/// before any content opens the first document. yaml-cpp's LoadAll is not used: it loops
/// forever on some malformed input.
std::size_t second_document_line(const std::string& text) {
  bool content = false;
  bool second = false;
  std::size_t second_line = 0;
  std::size_t line = 0;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t end = text.find('\n', start);
    std::string_view l(text.data() + start, (end == std::string::npos ? text.size() : end) - start);
    ++line;
    bool marker =
        l.starts_with("---") && (l.size() == 3 || l[3] == ' ' || l[3] == '\t' || l[3] == '\r');
    std::string_view rest = marker ? l.substr(3) : l;
    std::size_t first = rest.find_first_not_of(" \t\r");
    bool has_content = first != std::string_view::npos && rest[first] != '#' &&
                       !(rest.starts_with("%") && !marker);
    if (marker && content && !second) {
      second = true;
      second_line = line;
    }
    if (has_content && !(l.starts_with("...") && !marker)) {
      if (second) {
        return second_line;
      }
      content = true;
    }
    if (end == std::string::npos) {
      break;
    }
    start = end + 1;
  }
  return 0;
}

} // namespace

/// Values of `node`, what aliases repeat counted each time, up to `limit` + 1.
std::size_t expanded_values(const YAML::Node& node, std::size_t limit) {
  std::size_t seen = 0;
  std::vector<YAML::Node> stack{node};
  while (!stack.empty() && seen <= limit) {
    YAML::Node n = stack.back();
    stack.pop_back();
    ++seen;
    if (n.IsSequence()) {
      for (const YAML::Node& child : n) {
        stack.push_back(child);
      }
    } else if (n.IsMap()) {
      for (const auto& kv : n) {
        ++seen;
        stack.push_back(kv.second);
      }
    }
  }
  return seen;
}

namespace {

/// `text` with old-Mac line ends (CR alone, a line break in YAML 1.2, which yaml-cpp does not
/// take) as LF; CR LF stays.
std::string unix_line_ends(const std::string& text) {
  std::string out = text;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i] == '\r' && (i + 1 == out.size() || out[i + 1] != '\n')) {
      out[i] = '\n';
    }
  }
  return out;
}

} // namespace

YAML::Node parse_yaml(const std::string& raw, const std::string& file) {
  const std::string text = raw.find('\r') == std::string::npos ? raw : unix_line_ends(raw);
  std::size_t separators =
      static_cast<std::size_t>(std::count_if(text.begin(), text.end(), [](char c) {
        return c == ',' || c == ':' || c == '-' || c == '\n';
      }));
  if (separators > k_max_yaml_values) {
    throw InputError(SourceLocation{file, 0, 0},
                     "holds more than " + group_digits(k_max_yaml_values) +
                         " values, more than kvcalc reads from one file (docs/reliability.md, "
                         "\"Limits\"); remove the lists kvcalc does not need");
  }
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::DeepRecursion& e) {
    throw InputError(SourceLocation{file, e.mark.line + 1, e.mark.column + 1},
                     "nested more than " + std::to_string(e.depth() - 1) +
                         " levels deep, more than kvcalc's YAML reader follows; no model, plan "
                         "or catalog needs more than a few");
  } catch (const YAML::ParserException& e) {
    throw InputError(SourceLocation{file, e.mark.line + 1, e.mark.column + 1},
                     "syntax error: " + e.msg);
  } catch (const YAML::Exception& e) {
    throw InputError(SourceLocation{file, 0, 0}, "cannot parse: " + e.msg);
  }
  if (expanded_values(root, k_max_yaml_values) > k_max_yaml_values) {
    throw InputError(SourceLocation{file, 0, 0},
                     "expands to more than " + group_digits(k_max_yaml_values) +
                         " values: its aliases (*name) repeat what they name; write the values "
                         "out, or fewer");
  }
  if (std::size_t line = second_document_line(text); line > 0) {
    throw InputError(
        SourceLocation{file, static_cast<int>(std::min<std::size_t>(line, 1 << 30)), 1},
        "a second YAML document ('---'): kvcalc reads one document per file; put "
        "each in its own file");
  }
  return root;
}

SourceLocation location_of(const YAML::Node& node, const std::string& file) {
  YAML::Mark mark = node.Mark();
  if (mark.is_null()) {
    return {file, 0, 0};
  }
  return {file, mark.line + 1, mark.column + 1};
}

std::string scalar_of(const YAML::Node& node, const std::string& file, std::string_view what) {
  if (!node.IsScalar()) {
    std::string got = node.IsSequence() ? "a list" : node.IsMap() ? "a map" : "nothing";
    throw InputError(location_of(node, file),
                     std::string(what) + " must be a single value, got " + got);
  }
  return node.Scalar();
}

SourceLocation LocationMap::find(std::string_view path) const {
  std::string key(path);
  while (true) {
    if (auto it = m_where.find(key); it != m_where.end()) {
      return it->second;
    }
    auto dot = key.rfind('.');
    if (dot == std::string::npos) {
      return m_root;
    }
    key.resize(dot);
  }
}

Locator LocationMap::locator() const {
  return [this](std::string_view path) { return find(path); };
}

MapReader::MapReader(YAML::Node map, std::string path, std::shared_ptr<LocationMap> locations)
    : m_map(std::move(map)), m_path(std::move(path)), m_locations(std::move(locations)) {
  if (!m_map.IsMap()) {
    std::string what = m_path.empty() ? "the document" : "'" + m_path + "'";
    throw InputError(location_of(m_map, m_locations->file()),
                     what + " must be a map of key: value pairs");
  }
  // A key given twice is an error: readers disagree on which one counts (yaml-cpp's lookup
  // takes the first, Python's json and transformers the last), so either would be a silent
  // guess.
  std::map<std::string, SourceLocation, std::less<>> first_seen;
  for (const auto& entry : m_map) {
    auto key = scalar_of(entry.first, m_locations->file(), "a key");
    SourceLocation at = location_of(entry.first, m_locations->file());
    if (auto it = first_seen.find(key); it != first_seen.end()) {
      std::string where_text = m_path.empty() ? "" : " in '" + m_path + "'";
      std::string first =
          it->second.line > 0 ? " (first at line " + std::to_string(it->second.line) + ")" : "";
      throw InputError(at, "duplicate key '" + key + "'" + where_text + first +
                               ": tools disagree on which one counts; keep one");
    }
    first_seen.emplace(key, at);
    m_locations->add(path_of(key), location_of(entry.second, m_locations->file()));
  }
}

std::string MapReader::path_of(std::string_view key) const {
  return m_path.empty() ? std::string(key) : m_path + "." + std::string(key);
}

void MapReader::allow_only(std::span<const std::string_view> keys) const {
  std::vector<std::string> allowed(keys.begin(), keys.end());
  for (const auto& entry : m_map) {
    auto key = scalar_of(entry.first, m_locations->file(), "a key");
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      std::string message = "unknown key '" + key + "'";
      std::string hint = did_you_mean(key, allowed);
      if (hint.empty()) {
        message += m_path.empty() ? " at the top level" : " in '" + m_path + "'";
        message += " (see " + m_locations->format_doc() + ")";
      }
      throw InputError(location_of(entry.first, m_locations->file()), message + hint);
    }
  }
}

bool MapReader::has(std::string_view key) const {
  YAML::Node n = m_map[std::string(key)];
  return n.IsDefined() && !n.IsNull();
}

YAML::Node MapReader::node(std::string_view key) const {
  return m_map[std::string(key)];
}

SourceLocation MapReader::where(std::string_view key) const {
  YAML::Node n = node(key);
  if (n.IsDefined()) {
    return location_of(n, m_locations->file());
  }
  return location_of(m_map, m_locations->file());
}

void MapReader::missing(std::string_view key, std::string_view meaning) const {
  std::string where_text = m_path.empty() ? "" : " in '" + m_path + "'";
  throw InputError(location_of(m_map, m_locations->file()),
                   "missing required key '" + std::string(key) + "'" + where_text + " (" +
                       std::string(meaning) + ")");
}

void MapReader::fail(std::string_view key, const std::string& message) const {
  throw InputError(where(key), message);
}

std::optional<u64> MapReader::count(std::string_view key) const {
  if (!has(key)) {
    return std::nullopt;
  }
  YAML::Node n = node(key);
  std::string name = path_of(key);
  if (!n.IsScalar()) {
    fail(key, "'" + name + "' must be an integer, got a " + (n.IsSequence() ? "list" : "map"));
  }
  const std::string& s = n.Scalar();
  std::string_view digits = s;
  if (!digits.empty() && digits.front() == '-') {
    fail(key, "'" + name + "' must not be negative, got " + s);
  }
  // JSON writers sometimes emit integral floats ("4096.0"); accept only those.
  if (auto dot = digits.find('.');
      dot != std::string_view::npos &&
      digits.find_first_not_of('0', dot + 1) == std::string_view::npos) {
    digits = digits.substr(0, dot);
  }
  if (digits.empty() || !std::all_of(digits.begin(), digits.end(), [](char c) {
        return std::isdigit(static_cast<unsigned char>(c)) != 0;
      })) {
    fail(key, "'" + name + "' must be a whole number, got '" + s + "'");
  }
  u64 value = 0;
  for (char c : digits) {
    auto d = static_cast<u64>(c - '0');
    if (value > (UINT64_MAX - d) / 10) {
      fail(key, "'" + name + "' = " + s + " does not fit in 64 bits");
    }
    value = value * 10 + d;
  }
  return value;
}

u64 MapReader::required_count(std::string_view key, std::string_view meaning) const {
  auto value = count(key);
  if (!value) {
    missing(key, meaning);
  }
  return *value;
}

std::optional<double> MapReader::number(std::string_view key) const {
  auto value = text(key);
  if (!value) {
    return std::nullopt;
  }
  const std::string& s = *value;
  char* end = nullptr;
  double d = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(d)) {
    fail(key, "'" + path_of(key) + "' must be a number, got '" + s + "'");
  }
  if (d < 0) {
    fail(key, "'" + path_of(key) + "' must not be negative, got " + s);
  }
  return d;
}

std::optional<double> MapReader::device_rate(std::string_view key) const {
  auto value = number(key);
  if (value && *value < k_min_device_rate) {
    fail(key, "'" + path_of(key) + "' = " + *text(key) +
                  " is not a device's rate: the unit is per second (bytes or FLOP), so an H200 "
                  "reads 4.8e12 B/s and computes 989e12 bf16 FLOP/s; kvcalc takes at least 1e6 "
                  "(leave a dtype the device lacks out)");
  }
  if (value && *value > k_max_device_rate) {
    fail(key, "'" + path_of(key) + "' = " + *text(key) +
                  " is beyond any device: kvcalc takes at most 1e18 per second (an H200 reads "
                  "4.8e12 B/s and computes 989e12 bf16 FLOP/s)");
  }
  return value;
}

std::optional<std::string> MapReader::text(std::string_view key) const {
  if (!has(key)) {
    return std::nullopt;
  }
  YAML::Node n = node(key);
  if (!n.IsScalar()) {
    fail(key, "'" + path_of(key) + "' must be a string");
  }
  return n.Scalar();
}

std::string MapReader::required_text(std::string_view key, std::string_view meaning) const {
  auto value = text(key);
  if (!value) {
    missing(key, meaning);
  }
  return *value;
}

std::optional<bool> MapReader::flag(std::string_view key) const {
  auto value = text(key);
  if (!value) {
    return std::nullopt;
  }
  if (*value == "true" || *value == "True") {
    return true;
  }
  if (*value == "false" || *value == "False") {
    return false;
  }
  fail(key, "'" + path_of(key) + "' must be true or false, got '" + *value + "'");
}

std::optional<MapReader> MapReader::map(std::string_view key) const {
  if (!has(key)) {
    return std::nullopt;
  }
  return MapReader(node(key), path_of(key), m_locations);
}

} // namespace kvcalc::detail
