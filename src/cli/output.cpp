#include <algorithm>
#include <cerrno>
#include <fstream>
#include <ostream>

#include <kvcalc/core/error.hpp>
#include <kvcalc/core/units.hpp>
#include <kvcalc/core/version.hpp>

#include "commands.hpp"

namespace kvcalc::cli {

namespace {

Format parse_format(const std::string& name) {
  if (name == "table") {
    return Format::table;
  }
  if (name == "md") {
    return Format::md;
  }
  if (name == "json") {
    return Format::json;
  }
  if (name == "csv") {
    return Format::csv;
  }
  throw InputError("unknown --format '" + name + "' (one of: table, md, json, csv)");
}

} // namespace

Json json_header(const std::string& command) {
  Json j = Json::object();
  j["kvcalc"]["version"] = std::string(version());
  j["kvcalc"]["schema"] = k_json_schema;
  j["command"] = command;
  return j;
}

void emit(const Rendered& result, const OutputOptions& options, std::ostream& out) {
  ByteUnits units = ByteUnits::iec;
  if (options.units == "si") {
    units = ByteUnits::si;
  } else if (options.units != "iec") {
    throw InputError("unknown --units '" + options.units + "' (one of: iec, si)");
  }
  std::string text;
  switch (parse_format(options.format)) {
  case Format::table:
    text = render_text(result.tables, units);
    for (const auto& line : result.text_after) {
      text += line + '\n';
    }
    break;
  case Format::md:
    text = render_markdown(result.tables, units);
    if (!result.text_after.empty()) {
      text += "\n```\n";
      for (const auto& line : result.text_after) {
        text += line + '\n';
      }
      text += "```\n";
    }
    break;
  case Format::json:
    text = result.json.dump(2) + '\n';
    break;
  case Format::csv:
    text = render_csv(result.csv);
    break;
  }
  if (options.file.empty()) {
    out << text;
    return;
  }
  write_text_file(options.file, text);
}

Json peak_flops_json(const PeakFlops& flops) {
  Json j = Json::object();
  for (const auto& field : k_peak_flops_fields) {
    const auto& value = flops.*field.value;
    j[std::string(field.name)] = value ? Json(*value) : Json();
  }
  return j;
}

Json string_array(const std::vector<std::string>& items) {
  Json j = Json::array();
  for (const auto& item : items) {
    j.push_back(item);
  }
  return j;
}

void write_text_file(const std::string& path, const std::string& text) {
  errno = 0; // write_error reports what the open or the write sets
  std::ofstream file(path, std::ios::binary);
  if (!file || !(file << text) || !file.flush()) {
    throw write_error(path, errno);
  }
}

std::string context_label(u64 tokens) {
  if (tokens % (u64{1} << 20) == 0) {
    return std::to_string(tokens >> 20) + "M";
  }
  if (tokens % 1024 == 0) {
    return std::to_string(tokens / 1024) + "k";
  }
  return group_digits(tokens);
}

std::pair<double, double> parse_efficiency(const std::string& text) {
  double bw = 1.0;
  double flops = 1.0;
  if (text.empty()) {
    return {bw, flops};
  }
  std::size_t start = 0;
  std::vector<std::string> seen;
  while (start <= text.size()) {
    std::size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma - start);
    auto eq = item.find('=');
    std::string key = item.substr(0, eq);
    if (eq == std::string::npos || (key != "bw" && key != "flops")) {
      throw InputError("invalid --efficiency '" + text +
                       "': expected bw=F and/or flops=F, e.g. bw=0.85,flops=0.7");
    }
    if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
      throw InputError("--efficiency gives " + key + " twice ('" + text + "'); give it once");
    }
    seen.push_back(key);
    double v = parse_fraction(item.substr(eq + 1), "--efficiency " + key, 0.0, 1.0);
    if (v < 0.01) {
      throw InputError("--efficiency " + key +
                       " must be at least 0.01 (1% of the datasheet), got " + item.substr(eq + 1));
    }
    (key == "bw" ? bw : flops) = v;
    if (comma == std::string::npos) {
      break;
    }
    start = comma + 1;
  }
  return {bw, flops};
}

void warn(std::ostream& err, const std::vector<std::string>& warnings) {
  std::vector<std::string> said;
  for (const auto& w : warnings) {
    if (std::find(said.begin(), said.end(), w) == said.end()) {
      err << "kvcalc: warning: " << w << '\n';
      said.push_back(w);
    }
  }
}

} // namespace kvcalc::cli
