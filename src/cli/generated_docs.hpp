#pragma once
// Documents generated from the command-line definition itself, so they cannot drift from it:
// the bash completion script and the man page (`kvcalc completion bash`, `kvcalc man`).

#include <string>

namespace CLI {
class App;
}

namespace kvcalc::cli {

/// A bash completion script: commands, each command's options, the allowed values of options
/// that have a fixed set, bundled model names for MODEL arguments, GPU names for --gpu, files
/// for FILE options.
[[nodiscard]] std::string bash_completion(CLI::App& app);
/// The zsh completion (`#compdef kvcalc`, one _arguments spec per command).
[[nodiscard]] std::string zsh_completion(CLI::App& app);
/// The fish completion (`complete -c kvcalc` lines).
[[nodiscard]] std::string fish_completion(CLI::App& app);

/// A man page (roff, section 1): every command with its arguments and options, their defaults
/// and values, the exit codes.
[[nodiscard]] std::string man_page(CLI::App& app);

/// The options of every command as Markdown tables, one section per command and a table per
/// help group (option, values, default, meaning): the tables of docs/cli.md.
[[nodiscard]] std::string options_markdown(CLI::App& app);

} // namespace kvcalc::cli
