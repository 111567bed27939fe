// `footprint`: exact KV bytes of one or more models at given contexts.

#include <memory>

#include "footprints.hpp"

namespace kvcalc::cli {

namespace {

struct FootprintArgs {
  std::vector<std::string> models;
  std::vector<u64> contexts{4096, 32768, 131072};
  CacheRequest cache;
  std::optional<u64> block_size; ///< no paging when unset
  bool explain = false;
  OutputOptions output;
};

int run_footprint(const FootprintArgs& args, std::ostream& out, std::ostream& err) {
  FootprintOptions options;
  options.cache = args.cache;
  options.contexts = args.contexts;
  options.explain = args.explain;
  options.block_size = args.block_size.value_or(0);
  CommandOutput output(args.output, "footprint", out, err);
  std::vector<Entry> entries = footprint_entries(args.models, options, output.warnings);
  output->csv_view(flat_columns(false, options.block_size != 0), "contexts");
  output->stream(); // every model is loaded and sized: nothing below can fail
  output->begin_list("models");
  for (const auto& e : entries) {
    Record described = describe_footprint(e, nullptr, args.explain);
    output->item(described);
    footprint_tables(e, described, output.document());
    if (args.explain) {
      explain_lines(e, output.document());
    }
  }
  output->end_list();
  output.finish();
  return 0;
}

} // namespace

Command setup_footprint(const Options& app) {
  auto args = std::make_shared<FootprintArgs>();
  Options cmd =
      app.subcommand("footprint", "KV bytes per token, per layer kind and at each context "
                                  "length");
  cmd.option("model", args->models, k_models_help).type_name("MODEL").required();
  add_footprint_options(cmd, args->contexts, args->cache, args->block_size);
  add_explain_option(cmd, args->explain);
  add_output_options(cmd, args->output, ScaledBytes::yes);
  return {cmd.app(),
          [args](std::ostream& out, std::ostream& err) { return run_footprint(*args, out, err); }};
}

} // namespace kvcalc::cli
