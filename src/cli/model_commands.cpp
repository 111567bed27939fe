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
               {"heads", "heads"},
               {"kv heads", "kv_heads"},
               {"KV dtype", "kv_dtype"},
               {"KV/token", "kv_bytes_per_token"},
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
    bool mla = m.attention.kind == AttentionKind::mla;
    std::string attention = attention_label(m);
    if (attention == "hybrid") {
      attention += " " + std::string(attention_kind_name(m.attention.kind));
    }
    t.rows.push_back(
        {Cell::text(m.name), Cell::text(attention), Cell::count(m.layers),
         Cell::count(m.attention.heads),
         mla ? Cell::text("latent") : Cell::count(m.attention.kv_heads),
         Cell::text(std::string(dtype_name(f.format.dtype))), Cell::bytes_exact(f.bytes_per_token),
         m.max_context ? Cell::count(m.max_context) : Cell::empty(), Cell::text(aliases)});
    Json mj = Json::object();
    mj["name"] = m.name;
    mj["display_name"] = m.display_name;
    mj["aliases"] = string_array(m.aliases);
    mj["attention"] = attention_label(m);
    mj["attention_kind"] = std::string(attention_kind_name(m.attention.kind));
    mj["layers"] = m.layers;
    mj["heads"] = m.attention.heads;
    mj["kv_heads"] = mla ? Json() : Json(m.attention.kv_heads);
    mj["kv_dtype"] = std::string(dtype_name(f.format.dtype));
    mj["kv_bytes_per_token"] = f.bytes_per_token;
    mj["max_context"] = m.max_context ? Json(m.max_context) : Json();
    mj["source"] = m.source;
    models.push_back(std::move(mj));
  }
  r.json["models"] = std::move(models);
  t.notes.push_back(std::to_string(builtin_models().size()) +
                    " bundled models; KV/token in each model's dtype, MLA as the latent cache");
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
