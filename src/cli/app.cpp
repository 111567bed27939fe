#include <kvcalc/cli/app.hpp>

#include <algorithm>
#include <ostream>

#include <CLI/CLI.hpp>

#include <kvcalc/core/error.hpp>
#include <kvcalc/core/spell.hpp>
#include <kvcalc/core/version.hpp>

#include "command.hpp"

namespace kvcalc::cli {

namespace {

/// The commands, in the order help lists them.
using Setup = cli::Command (*)(const cli::Options&);
constexpr Setup k_setups[] = {cli::setup_footprint, cli::setup_compare,    cli::setup_capacity,
                              cli::setup_roofline,  cli::setup_simulate,   cli::setup_measure,
                              cli::setup_plan,      cli::setup_gpus,       cli::setup_models,
                              cli::setup_import,    cli::setup_completion, cli::setup_man};

/// What serving engines call kvcalc's options. An alias means the same and is read as the kvcalc
/// flag (docs/cli.md, "Engine spellings"); a near one differs in meaning, and typing it draws
/// a hint to the kvcalc flag instead.
struct EngineSpelling {
  std::string_view engine_flag;
  std::string_view kvcalc_flag;
  bool alias = true;
};
constexpr EngineSpelling k_engine_spellings[] = {
    {"--tensor-parallel-size", "--tp"},
    {"--tp-size", "--tp"},
    {"--pipeline-parallel-size", "--pp"},
    {"--pp-size", "--pp"},
    {"--decode-context-parallel-size", "--dcp"},
    {"--kv-cache-dtype", "--kv-dtype"},
    {"--max-num-seqs", "--max-seqs"},
    {"--max-running-requests", "--max-seqs"},
    {"--max-num-batched-tokens", "--max-batched-tokens"},
    {"--kv-cache-memory-bytes", "--kv-cache-memory"},
    {"--page-size", "--block-size"},
    {"--enable-dp-attention", "--dp-attention"},
    {"--context-length", "--max-model-len"},
    {"--max-seq-len", "--max-model-len"},
    {"--chunked-prefill-size", "--max-batched-tokens", false},
    {"--quantization", "--weight-dtype", false},
};

/// The long flags of a command, help excluded: "--context", ...
std::vector<std::string> flags_of(const CLI::App* cmd) {
  std::vector<std::string> out;
  for (const CLI::Option* o : cmd->get_options()) {
    for (const auto& l : o->get_lnames()) {
      if (l != "help" && !o->get_group().empty()) {
        out.push_back("--" + l);
      }
    }
  }
  return out;
}

/// An error for what a command did not expect: an unknown flag (with the closest one, or the
/// kvcalc name of an engine's flag) or an argument too many.
[[noreturn]] void refuse_extras(const CLI::App* cmd, const std::vector<std::string>& extras) {
  const std::string& first = extras.front();
  std::string usage = " (kvcalc " + cmd->get_name() + " --help lists its options)";
  if (!first.starts_with("-")) {
    throw InputError("kvcalc " + cmd->get_name() + " does not take '" + first + "'" + usage);
  }
  std::string flag = first.substr(0, first.find('='));
  std::vector<std::string> flags = flags_of(cmd);
  for (const auto& s : k_engine_spellings) {
    if (flag == s.engine_flag &&
        std::find(flags.begin(), flags.end(), s.kvcalc_flag) != flags.end()) {
      throw InputError("unknown option " + flag + ": its nearest in kvcalc " + cmd->get_name() +
                       " is " + std::string(s.kvcalc_flag) + ", which differs in meaning (" +
                       "docs/cli.md, \"Engine spellings\")" + usage);
    }
  }
  throw InputError("unknown option " + flag + did_you_mean(flag, flags) + usage);
}

/// The command line with each engine alias the command has a kvcalc flag for read as that flag
/// ("--kv-cache-dtype=fp8" → "--kv-dtype=fp8"); everything else as typed.
std::vector<std::string> with_engine_aliases(int argc, const char* const* argv,
                                             const CLI::App& app) {
  std::vector<std::string> args(argv, argv + argc);
  if (argc < 2) {
    return args;
  }
  const CLI::App* cmd = nullptr;
  for (const CLI::App* c : app.get_subcommands({})) {
    if (c->get_name() == args[1]) {
      cmd = c;
    }
  }
  if (cmd == nullptr) {
    return args;
  }
  std::vector<std::string> flags = flags_of(cmd);
  for (std::size_t i = 2; i < args.size(); ++i) {
    if (args[i] == "--") {
      break;
    }
    std::size_t eq = args[i].find('=');
    std::string flag = args[i].substr(0, eq);
    for (const auto& s : k_engine_spellings) {
      if (s.alias && flag == s.engine_flag &&
          std::find(flags.begin(), flags.end(), s.kvcalc_flag) != flags.end()) {
        args[i] = std::string(s.kvcalc_flag) +
                  (eq == std::string::npos ? std::string() : args[i].substr(eq));
      }
    }
  }
  return args;
}

/// The command a mistyped first word was probably meant to be.
void check_command_name(int argc, const char* const* argv, const CLI::App& app) {
  if (argc < 2) {
    throw InputError("a command is required (kvcalc --help lists them)");
  }
  if (std::string_view(argv[1]).starts_with("-")) {
    return;
  }
  std::vector<std::string> names;
  for (const CLI::App* c : app.get_subcommands({})) {
    names.push_back(c->get_name());
  }
  if (std::find(names.begin(), names.end(), argv[1]) == names.end()) {
    throw InputError("unknown command '" + std::string(argv[1]) + "'" +
                     did_you_mean(argv[1], names) + " (kvcalc --help lists the commands)");
  }
}

} // namespace

int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App app{"kvcalc: KV-cache footprint, engine capacity, roofline, serving simulation and "
               "measured ceilings for LLM attention (MHA, MQA, GQA, MLA, sliding-window and "
               "hybrid layers)",
               "kvcalc"};
  app.set_version_flag(
      "--version", std::string("kvcalc ") + std::string(version()) +
                       " (CUDA support: " + (built_with_cuda() ? "built in" : "not built") + ")");
  app.require_subcommand(1);
  app.footer("Exit codes: 0 ok, 1 error, 2 bad input or usage, 3 a plan requirement failed, 4 "
             "the deployment does not fit.\n"
             "MODEL is a bundled name (`kvcalc models`), a kvcalc YAML file, a HuggingFace "
             "config.json or snapshot folder, or a Hub repo id (Qwen/Qwen3-32B).");
  std::vector<cli::Command> commands;
  for (Setup setup : k_setups) {
    commands.push_back(setup(cli::Options(&app)));
    commands.back().app->allow_extras();
  }
  check_command_name(argc, argv, app);
  std::vector<std::string> args = with_engine_aliases(argc, argv, app);
  std::vector<const char*> arg_pointers;
  for (const auto& a : args) {
    arg_pointers.push_back(a.c_str());
  }

  try {
    app.parse(static_cast<int>(arg_pointers.size()), arg_pointers.data());
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {
      return app.exit(e, out, err);
    }
    std::vector<CLI::App*> chosen = app.get_subcommands();
    std::string help =
        chosen.empty() ? "kvcalc --help" : "kvcalc " + chosen.front()->get_name() + " --help";
    throw InputError(std::string(e.what()) + " (" + help + " for usage)");
  }
  for (const cli::Command& c : commands) {
    if (c.app->parsed()) {
      std::vector<std::string> extras = c.app->remaining();
      if (!extras.empty()) {
        refuse_extras(c.app, extras);
      }
      return c.run(out, err);
    }
  }
  throw InputError("a command is required (kvcalc --help lists them)");
}

} // namespace kvcalc::cli
