// `models` (the bundled zoo) and `import` (config.json → kvcalc YAML).

#include <fstream>
#include <ostream>

#include <kvcalc/core/units.hpp>
#include <kvcalc/core/version.hpp>
#include <kvcalc/kv/footprint.hpp>
#include <kvcalc/model/loader.hpp>
#include <kvcalc/model/registry.hpp>

#include "commands.hpp"

namespace kvcalc::cli {

int run_models(const ModelsArgs& args, std::ostream& out, std::ostream& /*err*/) {
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
  emit(r, args.output, out);
  return 0;
}

int run_import(const ImportArgs& args, std::ostream& out, std::ostream& err) {
  Diagnostics diagnostics;
  Model m = load_model(args.config, diagnostics);
  if (!args.name.empty()) {
    m.name = args.name;
    validate_model(m, [](std::string_view) { return SourceLocation{"--name", 0, 0}; });
  }
  warn(err, diagnostics.warnings);
  Footprint f = compute_footprint(m, {});
  std::string yaml =
      "# Written by `kvcalc import " + args.config + "` (kvcalc " + std::string(version()) +
      "); see docs/model-format.md.\n# KV cache: " + group_digits(f.bytes_per_token) +
      " B per token in " + describe(f.format) + "\n" + model_to_yaml(m);
  if (args.file.empty()) {
    out << yaml;
    return 0;
  }
  write_text_file(args.file, yaml);
  err << "kvcalc: wrote " << args.file << " (" << m.name << ")\n";
  return 0;
}

} // namespace kvcalc::cli
