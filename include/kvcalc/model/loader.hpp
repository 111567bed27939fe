#pragma once
/// Loading model descriptions: kvcalc YAML, HuggingFace config.json, or a built-in name.

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <kvcalc/model/model.hpp>

namespace kvcalc::model {

/// Warnings for people (which reading of an ambiguous config was taken). The CLI prints them
/// on stderr.
struct Diagnostics {
  std::vector<std::string> warnings;
};

/// A kvcalc model description (docs/model-format.md). `file` names the source in errors.
[[nodiscard]] Model parse_model_yaml(const std::string& text, const std::string& file);

/// A file beside a config.json by name ("hf_quant_config.json"), nullopt when there is none.
using SiblingReader = std::function<std::optional<std::string>(const std::string& name)>;

/// A HuggingFace config.json (or its YAML equivalent), nested text_config included. Files
/// beside it (ModelOpt's hf_quant_config.json) come from `siblings`, else from the folder of
/// `file`.
[[nodiscard]] Model parse_hf_config(const std::string& text, const std::string& file,
                                    Diagnostics& diagnostics, const SiblingReader& siblings = {});

/// Either of the two, told apart by content.
[[nodiscard]] Model parse_model_document(const std::string& text, const std::string& file,
                                         Diagnostics& diagnostics);

/// `spec` is a path to a model file, a folder holding a config.json (an HF snapshot), the name
/// or alias of a built-in model (any case), or a HuggingFace repo id (`Qwen/Qwen3-32B`: the
/// local HF cache, else the Hub; model/hub.hpp). Unknown names get a did-you-mean.
[[nodiscard]] Model load_model(std::string_view spec, Diagnostics& diagnostics);

/// The kvcalc YAML that describes `m`; parse_model_yaml of it gives back `m`.
[[nodiscard]] std::string model_to_yaml(const Model& m);

} // namespace kvcalc::model
