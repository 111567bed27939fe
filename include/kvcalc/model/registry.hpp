#pragma once
/// The bundled model zoo (models/*.yaml), compiled into the binary.

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <kvcalc/core/embedded.hpp>
#include <kvcalc/model/model.hpp>

namespace kvcalc::model {

/// models/*.yaml as they are in the source tree; generated at build time.
[[nodiscard]] std::span<const EmbeddedFile> builtin_model_files();

/// Every bundled model, parsed once, sorted by name.
[[nodiscard]] const std::vector<Model>& builtin_models();

/// The bundled model with this name or alias (case-insensitive), or nullptr.
[[nodiscard]] const Model* find_builtin_model(std::string_view name);

/// Names and aliases, for suggestions.
[[nodiscard]] std::vector<std::string> builtin_model_names();

/// The bundled models closest to `spec`, at most three: those of its family first (llama3-70b →
/// llama-3.1-70b, llama-3.3-70b: same line of versions, same size), else the closest spelling.
[[nodiscard]] std::vector<std::string> suggest_models(std::string_view spec);

} // namespace kvcalc::model
