// `import`: a HuggingFace config.json as a kvcalc model YAML.

#include <memory>
#include <ostream>

#include <kvcalc/core/file.hpp>
#include <kvcalc/core/units.hpp>
#include <kvcalc/core/version.hpp>
#include <kvcalc/kv/footprint.hpp>
#include <kvcalc/model/loader.hpp>

#include "command.hpp"

using namespace kvcalc::kv;

namespace kvcalc::cli {

namespace {

struct ImportArgs {
  std::string config;
  std::string name; ///< overrides the registry name derived from the config
  std::string file; ///< -o; empty: stdout
};

int run_import(const ImportArgs& args, std::ostream& out, std::ostream& err) {
  Diagnostics diagnostics;
  Model m = load_model(args.config, diagnostics);
  if (!args.name.empty()) {
    m.name = args.name;
    validate_model(m, [](std::string_view) { return SourceLocation{"--name", 0, 0}; });
  }
  (void)say_warnings(err, diagnostics.warnings);
  Footprint f = compute_footprint(m, {});
  std::string yaml =
      "# Written by `kvcalc import " + args.config + "` (kvcalc " + std::string(version()) +
      "); see docs/model-format.md.\n# KV cache: " + group_digits(f.bytes_per_token) +
      " B per token in " + describe(f.format) + "\n" + model_to_yaml(m);
  if (args.file.empty()) {
    out << yaml;
    return 0;
  }
  write_text_file(args.file, yaml, "-o");
  err << "kvcalc: wrote " << args.file << " (" << m.name << ")\n";
  return 0;
}

} // namespace

Command setup_import(const Options& app) {
  auto args = std::make_shared<ImportArgs>();
  Options cmd =
      app.subcommand("import", "Convert a HuggingFace config.json into a kvcalc model YAML");
  cmd.option("config", args->config, "Path to config.json").type_name("CONFIG").required();
  cmd.option("--name", args->name,
             "Registry name to give the model [default: from _name_or_path or the file's "
             "folder]")
      .type_name("NAME")
      .group(k_group_model);
  cmd.option("-o,--output", args->file, "Write the YAML to FILE instead of stdout")
      .type_name("FILE")
      .group(k_group_output);
  return {cmd.app(),
          [args](std::ostream& out, std::ostream& err) { return run_import(*args, out, err); }};
}

} // namespace kvcalc::cli
