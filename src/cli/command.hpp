#pragma once
// What every command shares: its entry in the application, what it produced, and how that is
// emitted. Each command lives in its own file with `setup_<command>`, which declares its
// options (typed, with their defaults) and returns how to run it.

#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include <kvcalc/core/file.hpp>
#include <kvcalc/device/gpu.hpp>
#include <kvcalc/model/model.hpp>
#include <kvcalc/report/json.hpp>
#include <kvcalc/report/record.hpp>
#include <kvcalc/report/table.hpp>

#include "options.hpp"

namespace kvcalc::cli {

/// A subcommand and how to run it once the command line is read: returns the exit code.
struct Command {
  CLI::App* app = nullptr;
  std::function<int(std::ostream& out, std::ostream& err)> run;
};

Command setup_footprint(const Options& app);
Command setup_compare(const Options& app);
Command setup_capacity(const Options& app);
Command setup_roofline(const Options& app);
Command setup_simulate(const Options& app);
Command setup_measure(const Options& app);
Command setup_plan(const Options& app);
Command setup_gpus(const Options& app);
Command setup_models(const Options& app);
Command setup_import(const Options& app);
/// `completion` and `man`: documents generated from `app` itself.
Command setup_completion(const Options& app);
Command setup_man(const Options& app);

/// Where a command's result goes, as `options` ask: the document (report::Output) written to
/// `out` or to the -o file as it grows, and the warnings for people, said on `err` when it ends
/// and listed in the JSON.
class CommandOutput {
public:
  CommandOutput(const OutputOptions& options, std::string_view command, std::ostream& out,
                std::ostream& err);
  CommandOutput(const CommandOutput&) = delete;
  CommandOutput& operator=(const CommandOutput&) = delete;

  report::Output* operator->() { return &m_document; }
  report::Output& document() { return m_document; }
  /// Warnings for people, in the order found; each is said once.
  std::vector<std::string> warnings;
  /// Says the warnings, ends the document and puts the -o file in place.
  void finish();

private:
  std::ostream& m_out;
  std::ostream& m_err;
  std::string m_path;
  std::optional<OutputFile> m_file; ///< -o, opened when the first text arrives
  report::Output m_document;
};

/// Says each warning once on `err` ("kvcalc: warning: ..."); returns them, each once.
std::vector<std::string> say_warnings(std::ostream& err, const std::vector<std::string>& warnings);

/// "kvcalc: [n/N] what" on stderr for someone watching a terminal: silent when stderr is not
/// one, and until the work has run for a second (a quick command prints none).
class Progress {
public:
  Progress(std::ostream& err, std::size_t total);
  Progress(std::ostream& err, std::size_t total, bool terminal,
           std::function<double()> seconds_since_start);
  /// Step n + 1 of N begins: `what` it is.
  void step(const std::string& what);

private:
  std::ostream& m_err;
  std::size_t m_total;
  std::size_t m_done = 0;
  bool m_terminal;
  std::function<double()> m_elapsed;
};
/// Fills `into` with one value per dtype of `flops` ("fp32", "tf32", …; empty where unset),
/// each headed `header_prefix` and the dtype ("GEMM bf16"), shown as `shown` says.
void describe_peak_flops(report::Record& into, const PeakFlops& flops,
                         const std::string& header_prefix, report::Shown shown);
/// "a b c": a list of names as one cell's words (aliases in a table).
std::string words(const std::vector<std::string>& items);
/// Short label for a context: "128k" when a whole number of k, "1M", else the grouped count.
std::string context_label(u64 tokens);
/// "gqa-8", "mla dsa", "hybrid gqa-2 + gated_deltanet", "ssm mamba2": a model's attention and
/// state in a few words.
std::string attention_detail(const Model& m);
/// The models named on the command line, loaded (bundled names, YAML files, config.json).
std::vector<Model> load_models(const std::vector<std::string>& specs,
                               std::vector<std::string>& warnings);
/// The help line of a command's MODEL positional.
inline constexpr const char* k_models_help =
    "MODEL names, kvcalc YAML files, config.json files or folders, or Hub repo ids";

} // namespace kvcalc::cli
