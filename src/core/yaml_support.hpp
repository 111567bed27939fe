#pragma once
// Typed, located reads from yaml-cpp nodes, shared by every file kvcalc reads (model YAML,
// config.json, GPU catalog, plans).

#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <yaml-cpp/yaml.h>

#include <kvcalc/core/checked.hpp>
#include <kvcalc/core/error.hpp>

namespace kvcalc::detail {

/// Parses YAML (or JSON) text; syntax errors become InputError at file:line:col.
YAML::Node parse_yaml(const std::string& text, const std::string& file);

/// The most values one YAML or JSON file may hold, 500,000, counted before parsing by the
/// separators between them (`,` `:` `-` and line ends) and again after, with what aliases
/// repeat. yaml-cpp takes about 950 bytes per value (a config.json with a 10^6-element array
/// takes 950 MB and 4.8 s to parse), so the limit bounds a parse near 500 MB; the largest real
/// file, a quantization file listing every expert of DeepSeek-V3 (61 layers × 256 experts × 3
/// projections, a few values each), would hold about 200,000.
inline constexpr std::size_t k_max_yaml_values = 500'000;

SourceLocation location_of(const YAML::Node& node, const std::string& file);

/// The text of a scalar node; a list, a map or an empty node is an InputError at the node that
/// says `what` must be a single value ("a key", "an alias").
std::string scalar_of(const YAML::Node& node, const std::string& file, std::string_view what);

/// Where each key path of one document was found, for located validation errors.
class LocationMap {
public:
  /// `format_doc`: the document that describes the file's keys, named in unknown-key errors.
  LocationMap(std::string file, SourceLocation root,
              std::string format_doc = "docs/model-format.md")
      : m_file(std::move(file)), m_root(std::move(root)), m_format_doc(std::move(format_doc)) {}
  void add(std::string path, SourceLocation where) { m_where[std::move(path)] = std::move(where); }
  /// The key's location, else its nearest recorded parent's, else the document's.
  [[nodiscard]] SourceLocation find(std::string_view path) const;
  [[nodiscard]] const std::string& file() const { return m_file; }
  [[nodiscard]] const std::string& format_doc() const { return m_format_doc; }
  [[nodiscard]] Locator locator() const;

private:
  std::string m_file;
  SourceLocation m_root;
  std::string m_format_doc;
  std::map<std::string, SourceLocation, std::less<>> m_where;
};

/// The smallest rate a device file may give, per second: 1e6 (a megabyte or a megaFLOP).
inline constexpr double k_min_device_rate = 1e6;
/// The largest: 1e18 per second, a thousand times the fastest GPU's fp4 rate. Above it a number
/// is a slip (an exponent too many), and the times it gives round to nothing.
inline constexpr double k_max_device_rate = 1e18;

/// Reads the keys of one YAML map, with the errors of docs/model-format.md.
class MapReader {
public:
  /// `path` is the key path of this map ("" for the root, "attention" for a nested map).
  MapReader(YAML::Node map, std::string path, std::shared_ptr<LocationMap> locations);

  /// Every key of the map must be one of `keys`; an unknown one is an error with a did-you-mean.
  void allow_only(std::span<const std::string_view> keys) const;
  void allow_only(std::initializer_list<std::string_view> keys) const {
    allow_only(std::span<const std::string_view>(keys.begin(), keys.size()));
  }

  /// True when the key is present and not null.
  [[nodiscard]] bool has(std::string_view key) const;
  [[nodiscard]] YAML::Node node(std::string_view key) const;
  [[nodiscard]] SourceLocation where(std::string_view key) const;
  [[nodiscard]] std::string path_of(std::string_view key) const;

  /// A non-negative integer; missing or null keys give nullopt.
  [[nodiscard]] std::optional<u64> count(std::string_view key) const;
  /// A non-negative integer that must be present; `meaning` explains the key in the error.
  [[nodiscard]] u64 required_count(std::string_view key, std::string_view meaning) const;
  /// A finite, non-negative real number ("3.35e12", "900e9", "0.9"); nullopt when absent.
  [[nodiscard]] std::optional<double> number(std::string_view key) const;
  /// A device's rate per second (bytes or FLOP): a number of at least k_min_device_rate, since
  /// anything smaller is a unit slip ("4.8" for 4.8 TB/s), not a device; nullopt when absent.
  [[nodiscard]] std::optional<double> device_rate(std::string_view key) const;
  [[nodiscard]] std::optional<std::string> text(std::string_view key) const;
  [[nodiscard]] std::string required_text(std::string_view key, std::string_view meaning) const;
  [[nodiscard]] std::optional<bool> flag(std::string_view key) const;
  /// A nested map, or nullopt when absent or null.
  [[nodiscard]] std::optional<MapReader> map(std::string_view key) const;

  /// The present text of `key` parsed by `parse`, whose InputError moves to the value's location.
  template <class F> auto parsed(std::string_view key, F&& parse) const {
    try {
      return parse(*text(key));
    } catch (const InputError& e) {
      throw InputError(where(key), e.what());
    }
  }

  [[noreturn]] void fail(std::string_view key, const std::string& message) const;
  /// Reports `key` missing from this map; `meaning` explains the key.
  [[noreturn]] void missing(std::string_view key, std::string_view meaning) const;
  [[nodiscard]] const std::shared_ptr<LocationMap>& locations() const { return m_locations; }
  [[nodiscard]] const YAML::Node& yaml() const { return m_map; }

private:
  YAML::Node m_map;
  std::string m_path;
  std::shared_ptr<LocationMap> m_locations;
};

} // namespace kvcalc::detail
