#include <kvcalc/model/registry.hpp>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>

#include <kvcalc/core/file.hpp>
#include <kvcalc/core/spell.hpp>
#include <kvcalc/model/hub.hpp>
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

/// A model name taken apart for a did-you-mean: "Meta-Llama-3.1-70B-Instruct" is family
/// "llama", version "3.1", sizes {"70b"}; "qwen3-235b-a22b" is "qwen", "3", {"235b", "a22b"}.
struct NameParts {
  std::string family;
  std::string version;
  std::vector<std::string> sizes;
};

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

/// "70b", "1.5b", "a22b", "8x7b", "560m": a parameter count.
bool is_size(std::string_view t) {
  std::size_t i = t.starts_with('a') ? 1 : 0;
  std::size_t digits = i;
  while (digits < t.size() && (is_digit(t[digits]) || t[digits] == '.' || t[digits] == 'x')) {
    ++digits;
  }
  return digits > i && digits + 1 == t.size() && is_digit(t[i]) &&
         (t.back() == 'b' || t.back() == 'm');
}

/// "3", "3.1", "v3", "v2.5": a version.
bool is_version(std::string_view t) {
  std::size_t i = t.starts_with('v') ? 1 : 0;
  return i < t.size() &&
         std::all_of(t.begin() + static_cast<std::ptrdiff_t>(i), t.end(),
                     [](char c) { return is_digit(c) || c == '.'; }) &&
         is_digit(t[i]);
}

NameParts name_parts(std::string_view name) {
  std::string lower =
      ascii_lower(name.substr(name.rfind('/') == std::string_view::npos ? 0 : name.rfind('/') + 1));
  std::vector<std::string> tokens;
  std::string token;
  for (char c : lower + "-") {
    if (c == '-' || c == '_' || c == ' ') {
      if (!token.empty()) {
        tokens.push_back(token);
      }
      token.clear();
    } else {
      token += c;
    }
  }
  NameParts parts;
  for (std::string& t : tokens) {
    if (parts.family.empty() || t == "meta") {
      // The family is the first word, its version glued on or not ("llama3", "qwen2.5").
      if (t == "meta") {
        continue;
      }
      std::size_t digit = 0;
      while (digit < t.size() && !is_digit(t[digit])) {
        ++digit;
      }
      parts.family = t.substr(0, digit);
      if (digit < t.size() && is_version(t.substr(digit))) {
        parts.version = t.substr(digit);
      }
    } else if (is_size(t)) {
      parts.sizes.push_back(t);
    } else if (parts.version.empty() && is_version(t)) {
      parts.version = t.substr(t.starts_with('v') ? 1 : 0);
    }
  }
  return parts;
}

/// How close a candidate is to what was typed, within the family: 0 when the family differs.
int family_score(const NameParts& asked, const NameParts& candidate) {
  if (asked.family.empty() || asked.family != candidate.family) {
    return 0;
  }
  int score = 1;
  if (!asked.version.empty()) {
    const std::string& v = candidate.version;
    if (v == asked.version) {
      score += 4;
    } else if (v.starts_with(asked.version + ".")) {
      score += 3; // "3" names the 3.x line
    } else {
      score -= 2;
    }
  }
  std::size_t found = 0;
  for (const auto& size : asked.sizes) {
    found +=
        static_cast<std::size_t>(std::count(candidate.sizes.begin(), candidate.sizes.end(), size));
  }
  if (!asked.sizes.empty()) {
    score += found == asked.sizes.size() ? 4 : found > 0 ? 2 : -2;
  }
  return score;
}

} // namespace

std::vector<std::string> suggest_models(std::string_view spec) {
  NameParts asked = name_parts(spec);
  int best = 2; // the family alone is no suggestion
  std::vector<std::string> out;
  for (const auto& m : builtin_models()) {
    int score = family_score(asked, name_parts(m.name));
    for (const auto& alias : m.aliases) {
      score = std::max(score, family_score(asked, name_parts(alias)));
    }
    if (score > best) {
      best = score;
      out.clear();
    }
    if (score == best) {
      out.push_back(m.name);
    }
  }
  if (out.empty()) {
    // Not a family kvcalc knows: the closest spelling.
    out = closest_matches(spec, builtin_model_names());
  } else {
    // Of the family's best, the closest spelling ("llama-3.1-8bb": llama-3.1-8b).
    std::size_t nearest = SIZE_MAX;
    for (const auto& name : out) {
      nearest = std::min(nearest, edit_distance(spec, name));
    }
    std::erase_if(out,
                  [&](const std::string& name) { return edit_distance(spec, name) > nearest; });
  }
  if (out.size() > 3) {
    out.resize(3);
  }
  return out;
}

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

namespace {

/// Files beside a cached snapshot's config.json. A file the snapshot lacks may still be in the
/// repo, downloaded or not: ModelOpt keeps a checkpoint's quantization in
/// hf_quant_config.json, so where the cache cannot tell, that is said rather than guessed.
SiblingReader snapshot_siblings(const std::filesystem::path& snapshot, Diagnostics& diagnostics) {
  return [snapshot, &diagnostics](const std::string& name) -> std::optional<std::string> {
    std::error_code ec;
    std::filesystem::path file = snapshot / name;
    if (std::filesystem::is_regular_file(file, ec)) {
      return read_text_file(file.string());
    }
    if (!known_absent(snapshot, name)) {
      std::string repo = snapshot.parent_path().parent_path().filename().string().substr(8);
      if (std::size_t dashes = repo.find("--"); dashes != std::string::npos) {
        repo.replace(dashes, 2, "/");
      }
      diagnostics.warnings.push_back(
          snapshot.string() + " holds config.json without the weights or " + name +
          ", so whether the repo has " + name +
          " is unknown; a ModelOpt checkpoint keeps its quantization there, and without it the "
          "weights are counted in the config's dtype: download it (hf download " +
          repo + " " + name + ") or give --weight-dtype");
    }
    return std::nullopt;
  };
}

} // namespace

Model load_model(std::string_view spec, Diagnostics& diagnostics) {
  std::string path(spec);
  std::error_code ec;
  auto kind = std::filesystem::status(path, ec);
  if (std::filesystem::exists(kind) && !std::filesystem::is_directory(kind)) {
    // A file, or a pipe (`<(cat model.yaml)`): read_text_file bounds what it reads.
    return parse_model_document(read_text_file(path), path, diagnostics);
  }
  if (std::filesystem::is_directory(kind)) {
    // An HF snapshot folder (a download, or the cache's snapshots/<commit>).
    std::filesystem::path config = std::filesystem::path(path) / "config.json";
    if (!std::filesystem::is_regular_file(config, ec)) {
      throw InputError("'" + path +
                       "' is a folder without a config.json: give a model's snapshot folder, "
                       "its config.json, or a kvcalc model file");
    }
    SiblingReader siblings;
    std::filesystem::path folder = std::filesystem::path(path).lexically_normal();
    if (folder.filename().empty()) {
      folder = folder.parent_path(); // "…/snapshots/<commit>/"
    }
    if (is_cached_snapshot(folder)) {
      siblings = snapshot_siblings(folder, diagnostics);
    }
    return parse_hf_config(read_text_file(config.string()), config.string(), diagnostics, siblings);
  }
  if (const Model* m = find_builtin_model(spec)) {
    return *m;
  }
  if (looks_like_repo_id(spec)) {
    if (std::optional<std::filesystem::path> snapshot = cached_snapshot(spec)) {
      std::filesystem::path config = *snapshot / "config.json";
      if (std::filesystem::is_regular_file(config, ec)) {
        return parse_hf_config(read_text_file(config.string()), config.string(), diagnostics,
                               snapshot_siblings(*snapshot, diagnostics));
      }
    }
    std::optional<HubFile> config = fetch_hub_file(spec, "config.json", false);
    SiblingReader from_hub = [&](const std::string& name) -> std::optional<std::string> {
      if (std::optional<HubFile> f = fetch_hub_file(spec, name, true)) {
        return f->text;
      }
      return std::nullopt;
    };
    return parse_hf_config(config->text, config->url, diagnostics, from_hub);
  }
  bool looks_like_path = spec.find('/') != std::string_view::npos || spec.ends_with(".yaml") ||
                         spec.ends_with(".yml") || spec.ends_with(".json");
  if (looks_like_path) {
    throw InputError("cannot open model file '" + path + "': no such file");
  }
  throw InputError("unknown model '" + path + "'" + did_you_mean(suggest_models(spec)) +
                   " (`kvcalc models` lists the bundled ones; a kvcalc YAML, a config.json, a "
                   "snapshot folder or a Hub repo id such as Qwen/Qwen3-32B works too)");
}

} // namespace kvcalc::model
