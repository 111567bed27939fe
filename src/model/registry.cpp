#include <kvcalc/model/registry.hpp>

#include <algorithm>
#include <filesystem>
#include <string>

#include <kvcalc/core/spell.hpp>
#include <kvcalc/model/loader.hpp>

#include "../core/yaml_support.hpp"

namespace kvcalc {

const std::vector<Model>& builtin_models() {
  static const std::vector<Model> models = [] {
    std::vector<Model> out;
    for (const auto& file : builtin_model_files()) {
      out.push_back(parse_model_yaml(std::string(file.text), std::string(file.path)));
    }
    std::sort(out.begin(), out.end(),
              [](const Model& a, const Model& b) { return a.name < b.name; });
    return out;
  }();
  return models;
}

const Model* find_builtin_model(std::string_view name) {
  for (const auto& m : builtin_models()) {
    if (iequals(m.name, name)) {
      return &m;
    }
    for (const auto& alias : m.aliases) {
      if (iequals(alias, name)) {
        return &m;
      }
    }
  }
  return nullptr;
}

std::vector<std::string> builtin_model_names() {
  std::vector<std::string> names;
  for (const auto& m : builtin_models()) {
    names.push_back(m.name);
    names.insert(names.end(), m.aliases.begin(), m.aliases.end());
  }
  return names;
}

Model load_model(std::string_view spec, Diagnostics& diagnostics) {
  std::string path(spec);
  std::error_code ec;
  if (std::filesystem::is_regular_file(path, ec)) {
    return parse_model_document(detail::read_text_file(path), path, diagnostics);
  }
  if (const Model* m = find_builtin_model(spec)) {
    return *m;
  }
  bool looks_like_path = spec.find('/') != std::string_view::npos || spec.ends_with(".yaml") ||
                         spec.ends_with(".yml") || spec.ends_with(".json");
  if (looks_like_path) {
    throw InputError("cannot open model file '" + path + "': no such file");
  }
  throw InputError("unknown model '" + path + "'" + did_you_mean(spec, builtin_model_names()) +
                   " (`kvcalc models` lists the bundled ones; a path to a kvcalc YAML or a "
                   "config.json works too)");
}

} // namespace kvcalc
