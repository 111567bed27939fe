#pragma once
/// Loading model descriptions: kvcalc YAML, HuggingFace config.json, or a built-in name.

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

/// A HuggingFace config.json (or its YAML equivalent), nested text_config included.
[[nodiscard]] Model parse_hf_config(const std::string& text, const std::string& file,
                                    Diagnostics& diagnostics);

/// Either of the two, told apart by content.
[[nodiscard]] Model parse_model_document(const std::string& text, const std::string& file,
                                         Diagnostics& diagnostics);

/// `spec` is a path to a model file or the name or alias of a built-in model (any case).
/// Unknown names get a did-you-mean.
[[nodiscard]] Model load_model(std::string_view spec, Diagnostics& diagnostics);

/// The kvcalc YAML that describes `m`; parse_model_yaml of it gives back `m`.
[[nodiscard]] std::string model_to_yaml(const Model& m);

} // namespace kvcalc::model
