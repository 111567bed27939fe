#pragma once
// Options and entry points of each command; app.cpp binds them to CLI11.

#include <iosfwd>
#include <string>
#include <vector>

#include <kvcalc/report/json.hpp>
#include <kvcalc/report/table.hpp>

namespace kvcalc::cli {

enum class Format { table, md, json, csv };

struct OutputOptions {
  std::string format = "table";
  std::string units = "iec";
  std::string file; ///< -o; empty: stdout
};

struct CacheOptions {
  std::string kv_dtype;       ///< empty: the model's dtype
  std::string kv_scale;       ///< empty: the dtype's default
  std::string kv_scale_dtype; ///< empty: the dtype's default
  std::string mla_cache = "latent";
  std::string block_size; ///< empty: no paging
};

struct FootprintArgs {
  std::vector<std::string> models;
  std::string contexts = "4k,32k,128k";
  std::string baseline; ///< compare only; empty: the first model
  bool explain = false;
  CacheOptions cache;
  OutputOptions output;
};

struct ModelsArgs {
  OutputOptions output;
};

struct ImportArgs {
  std::string config;
  std::string name; ///< overrides the registry name derived from the config
  std::string file; ///< -o; empty: stdout
};

/// What a command produced: human tables, the JSON document, and the flat CSV table.
struct Rendered {
  std::vector<Table> tables;
  Json json;
  Table csv;
  std::vector<std::string> text_after; ///< plain lines after the tables (--explain), for people
};

void emit(const Rendered& result, const OutputOptions& options, std::ostream& out);
/// Prints warnings as "kvcalc: warning: ..." lines.
void warn(std::ostream& err, const std::vector<std::string>& warnings);
/// {"kvcalc": {"version", "schema"}, "command": name}
Json json_header(const std::string& command);

int run_footprint(const FootprintArgs& args, bool compare, std::ostream& out, std::ostream& err);
int run_models(const ModelsArgs& args, std::ostream& out, std::ostream& err);
int run_import(const ImportArgs& args, std::ostream& out, std::ostream& err);

} // namespace kvcalc::cli
