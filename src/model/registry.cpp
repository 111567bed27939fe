#include <kvcalc/model/registry.hpp>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>

#include <kvcalc/core/file.hpp>
#include <kvcalc/core/spell.hpp>
#include <kvcalc/model/loader.hpp>

#include "../core/yaml_support.hpp"

namespace kvcalc::model {

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

namespace {

/// "models/deepseek-v3.yaml" → "deepseek-v3".
std::string_view file_stem(std::string_view path) {
  std::size_t slash = path.rfind('/');
  std::string_view file = slash == std::string_view::npos ? path : path.substr(slash + 1);
  return file.substr(0, file.rfind('.'));
}

} // namespace

const Model* find_builtin_model(std::string_view name) {
  // A bundled file is named after its model, so a model asked by name is parsed alone; an
  // alias needs the whole zoo.
  static std::vector<std::unique_ptr<const Model>> by_file(builtin_model_files().size());
  std::span<const EmbeddedFile> files = builtin_model_files();
  for (std::size_t i = 0; i < files.size(); ++i) {
    if (iequals(file_stem(files[i].path), name)) {
      if (!by_file[i]) {
        by_file[i] = std::make_unique<const Model>(
            parse_model_yaml(std::string(files[i].text), std::string(files[i].path)));
      }
      return by_file[i].get();
    }
  }
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
    return parse_model_document(read_text_file(path), path, diagnostics);
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

} // namespace kvcalc::model
