#include <kvcalc/cli/app.hpp>

#include <ostream>

#include <CLI/CLI.hpp>

#include <kvcalc/core/error.hpp>
#include <kvcalc/core/version.hpp>

#include "commands.hpp"

namespace kvcalc {

namespace {

void add_output_options(CLI::App* cmd, cli::OutputOptions& o) {
  cmd->add_option("--format", o.format, "Output format: table, md, json or csv")
      ->check(CLI::IsMember({"table", "md", "json", "csv"}))
      ->capture_default_str();
  cmd->add_option("--units", o.units,
                  "Byte units for people: iec (KiB, MiB, GiB: powers of 1024) or si (kB, MB, "
                  "GB: powers of 1000); JSON and CSV always carry exact bytes")
      ->check(CLI::IsMember({"iec", "si"}))
      ->capture_default_str();
  cmd->add_option("-o,--output", o.file, "Write the output to FILE instead of stdout")
      ->type_name("FILE");
}

void add_footprint_options(CLI::App* cmd, cli::FootprintArgs& a) {
  cmd->add_option("--context", a.contexts,
                  "Context lengths in tokens, comma-separated: 4096, 4k (= 4,096), 128k "
                  "(= 131,072), 1M (= 1,048,576)")
      ->type_name("TOKENS,...")
      ->capture_default_str();
  cmd->add_option("--kv-dtype", a.cache.kv_dtype,
                  "KV cache element type: fp32, fp16, bf16, fp8 (= fp8_e4m3), fp8_e5m2, int8, "
                  "int4, nvfp4 [default: the model's dtype]")
      ->type_name("DTYPE");
  cmd->add_option("--kv-scale", a.cache.kv_scale,
                  "Scale metadata of a quantized cache: none, tensor (one per layer: no bytes "
                  "per token), token-head (one per token per head), group:G (one per G "
                  "elements) [default: fp8 tensor, int8 token-head, int4 group:32, nvfp4 "
                  "group:16]")
      ->type_name("SCALE");
  cmd->add_option("--kv-scale-dtype", a.cache.kv_scale_dtype,
                  "Type of each scale: fp32, fp16, bf16, fp8_e4m3 [default: fp32; int4 fp16; "
                  "nvfp4 fp8_e4m3]")
      ->type_name("DTYPE");
  cmd->add_option("--mla-cache", a.cache.mla_cache,
                  "MLA cache layout: latent (d_c + d_R per token per layer), expanded (per-head "
                  "K and V, as HF eager code), fp8_ds_mla (656 B per token per layer at "
                  "DeepSeek dims)")
      ->check(CLI::IsMember({"latent", "expanded", "fp8_ds_mla"}))
      ->capture_default_str();
  cmd->add_option("--block-size", a.cache.block_size,
                  "Page size in tokens: round each layer's tokens up to whole blocks and report "
                  "the waste [default: no paging]")
      ->type_name("TOKENS");
  cmd->add_flag("--explain", a.explain, "Print the derivation of every number, term by term");
  add_output_options(cmd, a.output);
}

} // namespace

int run_cli(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App app{"kvcalc: exact KV-cache footprint of LLM attention architectures (MHA, MQA, GQA, "
               "MLA, sliding-window and hybrid layers)",
               "kvcalc"};
  app.set_version_flag(
      "--version", std::string("kvcalc ") + std::string(version()) +
                       " (CUDA support: " + (built_with_cuda() ? "built in" : "not built") + ")");
  app.require_subcommand(1);
  app.footer("Exit codes: 0 ok, 1 error, 2 bad input or usage, 3 a plan requirement failed.\n"
             "MODEL is a bundled name (`kvcalc models`), a kvcalc YAML file, or a HuggingFace "
             "config.json.");

  cli::FootprintArgs footprint;
  auto* footprint_cmd = app.add_subcommand(
      "footprint", "KV bytes per token, per layer kind and at each context length");
  footprint_cmd->add_option("model", footprint.models, "MODEL: name, kvcalc YAML or config.json")
      ->type_name("MODEL")
      ->required();
  add_footprint_options(footprint_cmd, footprint);

  cli::FootprintArgs compare;
  auto* compare_cmd = app.add_subcommand(
      "compare", "Models side by side: KV per token and per layer, ratio to a baseline");
  compare_cmd->add_option("models", compare.models, "MODEL names, YAML files or config.json")
      ->type_name("MODEL")
      ->required();
  compare_cmd
      ->add_option("--baseline", compare.baseline,
                   "The model ratios are taken against [default: the first]")
      ->type_name("MODEL");
  add_footprint_options(compare_cmd, compare);

  cli::ModelsArgs models;
  auto* models_cmd = app.add_subcommand("models", "List the bundled models, one line each");
  add_output_options(models_cmd, models.output);

  cli::ImportArgs import;
  auto* import_cmd =
      app.add_subcommand("import", "Convert a HuggingFace config.json into a kvcalc model YAML");
  import_cmd->add_option("config", import.config, "Path to config.json")
      ->type_name("CONFIG")
      ->required();
  import_cmd
      ->add_option("--name", import.name,
                   "Registry name to give the model [default: from _name_or_path or the "
                   "file's folder]")
      ->type_name("NAME");
  import_cmd->add_option("-o,--output", import.file, "Write the YAML to FILE instead of stdout")
      ->type_name("FILE");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {
      return app.exit(e, out, err);
    }
    throw InputError(std::string(e.what()) + " (run 'kvcalc --help' for usage)");
  }

  if (footprint_cmd->parsed()) {
    return cli::run_footprint(footprint, false, out, err);
  }
  if (compare_cmd->parsed()) {
    return cli::run_footprint(compare, true, out, err);
  }
  if (models_cmd->parsed()) {
    return cli::run_models(models, out, err);
  }
  return cli::run_import(import, out, err);
}

} // namespace kvcalc
