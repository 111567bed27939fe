// `models`: the bundled zoo, one line each.

#include <memory>

#include <kvcalc/core/units.hpp>
#include <kvcalc/kv/footprint.hpp>
#include <kvcalc/model/registry.hpp>

#include <kvcalc/report/record.hpp>

#include "command.hpp"

using namespace kvcalc::kv;

namespace kvcalc::cli {

namespace {

struct ModelsArgs {
  OutputOptions output;
};

/// One bundled model: its architecture in brief and its default cache.
Record describe_model(const Model& m) {
  Footprint f = compute_footprint(m, FootprintOptions{});
  bool mla = has_attention(m) && m.attention.kind == AttentionKind::mla;
  Record r;
  r.value("name", "name", Cell::text(m.name));
  r.value("display_name", Cell::text(m.display_name), k_json_only);
  r.strings("aliases", m.aliases);
  r.value("attention", Cell::text(attention_label(m)), k_json_only);
  r.value("attention", "attention", Cell::text(attention_detail(m)), k_tables_only);
  r.value("attention_kind",
          has_attention(m) ? Cell::text(std::string(attention_kind_name(m.attention.kind)))
                           : Cell::empty(),
          k_json_only);
  r.value("state_kind",
          m.state ? Cell::text(std::string(k_state_kinds.name(m.state->kind))) : Cell::empty(),
          k_json_only);
  r.value("layers", "layers", Cell::count(m.layers));
  r.value("heads", has_attention(m) ? Cell::count(m.attention.heads) : Cell::empty(), k_json_only);
  r.value("kv_heads", mla || !has_attention(m) ? Cell::empty() : Cell::count(m.attention.kv_heads),
          k_json_only);
  r.value("kv_dtype", "KV dtype", Cell::text(std::string(dtype_name(f.format.dtype))));
  r.value("kv_bytes_per_token", "KV/token", Cell::bytes_exact(f.bytes_per_token));
  r.value("state_bytes_per_sequence", "state/sequence",
          Cell::bytes_exact(f.state_bytes_per_sequence)
              .shown_as(f.state_bytes_per_sequence ? "" : "-"));
  r.value("max_context", "max context", m.max_context ? Cell::count(m.max_context) : Cell::empty());
  r.value("source", Cell::text(m.source), k_json_only);
  r.value("aliases", "aliases", Cell::text(words(m.aliases)), k_tables_only);
  return r;
}

int run_models(const ModelsArgs& args, std::ostream& out, std::ostream& err) {
  CommandOutput output(args.output, "models", out, err);
  std::vector<ColumnRef> columns{{"name"},
                                 {"attention"},
                                 {"layers"},
                                 {"kv_dtype"},
                                 {"kv_bytes_per_token"},
                                 {"state_bytes_per_sequence"},
                                 {"max_context"},
                                 {"aliases"}};
  Output::TableId t = output->begin_table("", columns);
  output->csv_view(columns);
  output->note(t, std::to_string(builtin_models().size()) +
                      " bundled models; KV/token at the full rate in each model's dtype (MLA as "
                      "the latent cache, a DSA indexer included), state per sequence as engines "
                      "keep it by default");
  output->begin_list("models");
  for (const Model& m : builtin_models()) {
    output->item(describe_model(m));
  }
  output->end_list();
  output.finish();
  return 0;
}

} // namespace

Command setup_models(const Options& app) {
  auto args = std::make_shared<ModelsArgs>();
  Options cmd = app.subcommand("models", "List the bundled models, one line each");
  add_output_options(cmd, args->output, ScaledBytes::no);
  return {cmd.app(),
          [args](std::ostream& out, std::ostream& err) { return run_models(*args, out, err); }};
}

} // namespace kvcalc::cli
