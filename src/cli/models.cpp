// `models`: the bundled zoo, one line each.

#include <memory>

#include <kvcalc/core/units.hpp>
#include <kvcalc/kv/footprint.hpp>
#include <kvcalc/model/registry.hpp>

#include "command.hpp"

namespace kvcalc::cli {

namespace {

struct ModelsArgs {
  OutputOptions output;
};

int run_models(const ModelsArgs& args, std::ostream& out, std::ostream& err) {
  Rendered r;
  r.json = json_header("models");
  Table t;
  t.columns = {{"name", "name"},
               {"attention", "attention"},
               {"layers", "layers"},
               {"KV dtype", "kv_dtype"},
               {"KV/token", "kv_bytes_per_token"},
               {"state/sequence", "state_bytes_per_sequence"},
               {"max context", "max_context"},
               {"aliases", "aliases"}};
  Json models = Json::array();
  for (const Model& m : builtin_models()) {
    FootprintOptions options;
    Footprint f = compute_footprint(m, options);
    std::string aliases;
    for (const auto& a : m.aliases) {
      aliases += (aliases.empty() ? "" : " ") + a;
    }
    bool mla = has_attention(m) && m.attention.kind == AttentionKind::mla;
    t.rows.push_back(
        {Cell::text(m.name), Cell::text(attention_detail(m)), Cell::count(m.layers),
         Cell::text(std::string(dtype_name(f.format.dtype))), Cell::bytes_exact(f.bytes_per_token),
         f.state_bytes_per_sequence ? Cell::bytes_exact(f.state_bytes_per_sequence) : Cell::empty(),
         m.max_context ? Cell::count(m.max_context) : Cell::empty(), Cell::text(aliases)});
    Json mj = Json::object();
    mj["name"] = m.name;
    mj["display_name"] = m.display_name;
    mj["aliases"] = string_array(m.aliases);
    mj["attention"] = attention_label(m);
    mj["attention_kind"] =
        has_attention(m) ? Json(std::string(attention_kind_name(m.attention.kind))) : Json();
    mj["state_kind"] = m.state ? Json(std::string(k_state_kinds.name(m.state->kind))) : Json();
    mj["layers"] = m.layers;
    mj["heads"] = has_attention(m) ? Json(m.attention.heads) : Json();
    mj["kv_heads"] = mla || !has_attention(m) ? Json() : Json(m.attention.kv_heads);
    mj["kv_dtype"] = std::string(dtype_name(f.format.dtype));
    mj["kv_bytes_per_token"] = f.bytes_per_token;
    mj["state_bytes_per_sequence"] = f.state_bytes_per_sequence;
    mj["max_context"] = m.max_context ? Json(m.max_context) : Json();
    mj["source"] = m.source;
    models.push_back(std::move(mj));
  }
  r.json["models"] = std::move(models);
  t.notes.push_back(
      std::to_string(builtin_models().size()) +
      " bundled models; KV/token at the full rate in each model's dtype (MLA as the latent "
      "cache, a DSA indexer included), state per sequence as engines keep it by "
      "default");
  r.csv = t;
  r.tables.push_back(std::move(t));
  emit(r, args.output, out, err);
  return 0;
}

} // namespace

Command setup_models(CLI::App& app) {
  auto args = std::make_shared<ModelsArgs>();
  CLI::App* cmd = app.add_subcommand("models", "List the bundled models, one line each");
  add_output_options(cmd, args->output, ScaledBytes::no);
  return {cmd,
          [args](std::ostream& out, std::ostream& err) { return run_models(*args, out, err); }};
}

} // namespace kvcalc::cli
