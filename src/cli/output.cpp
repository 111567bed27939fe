#include <algorithm>
#include <chrono>
#include <ostream>

#include <unistd.h>

#include <kvcalc/core/error.hpp>
#include <kvcalc/core/file.hpp>
#include <kvcalc/core/spell.hpp>
#include <kvcalc/core/units.hpp>
#include <kvcalc/core/version.hpp>
#include <kvcalc/model/loader.hpp>

#include "command.hpp"

namespace kvcalc::cli {

Json json_header(const std::string& command) {
  Json j = Json::object();
  j["kvcalc"]["version"] = std::string(version());
  j["kvcalc"]["schema"] = k_json_schema;
  j["command"] = command;
  return j;
}

std::vector<std::string> say_warnings(std::ostream& err, const std::vector<std::string>& warnings) {
  std::vector<std::string> said;
  for (const auto& w : warnings) {
    if (std::find(said.begin(), said.end(), w) == said.end()) {
      err << "kvcalc: warning: " << printable(w) << '\n';
      said.push_back(w);
    }
  }
  return said;
}

Progress::Progress(std::ostream& err, std::size_t total)
    : Progress(err, total, isatty(2) != 0, [start = std::chrono::steady_clock::now()] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      }) {
}

Progress::Progress(std::ostream& err, std::size_t total, bool terminal,
                   std::function<double()> seconds_since_start)
    : m_err(err), m_total(total), m_terminal(terminal), m_elapsed(std::move(seconds_since_start)) {
}

void Progress::step(const std::string& what) {
  ++m_done;
  if (m_terminal && m_elapsed() >= 1.0) {
    m_err << "kvcalc: [" << m_done << "/" << m_total << "] " << what << '\n';
  }
}

void emit(Rendered& result, const OutputOptions& options, std::ostream& out, std::ostream& err) {
  std::vector<std::string> said = say_warnings(err, result.warnings);
  std::string text;
  switch (options.format) {
  case Format::table:
    text = render_text(result.tables, options.units);
    for (const auto& line : result.text_after) {
      text += line + '\n';
    }
    break;
  case Format::md:
    text = render_markdown(result.tables, options.units);
    if (!result.text_after.empty()) {
      text += "\n```\n";
      for (const auto& line : result.text_after) {
        text += line + '\n';
      }
      text += "```\n";
    }
    break;
  case Format::json:
    result.json["warnings"] = Json::array();
    for (const auto& w : said) {
      result.json["warnings"].push_back(w);
    }
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
  write_text_file(options.file, text, "-o");
}

void describe_peak_flops(report::Record& into, const PeakFlops& flops,
                         const std::string& header_prefix, report::Shown shown) {
  for (const auto& field : k_peak_flops_fields) {
    const auto& value = flops.*field.value;
    into.value(std::string(field.name), header_prefix + std::string(field.name),
               value ? Cell::flops(*value) : Cell::empty(), shown);
  }
}

std::string words(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& item : items) {
    out += (out.empty() ? "" : " ") + item;
  }
  return out;
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

std::string attention_detail(const Model& m) {
  std::string state = m.state ? std::string(k_state_kinds.name(m.state->kind)) : "";
  if (!has_attention(m)) {
    return "ssm " + state;
  }
  const Attention& a = m.attention;
  std::string kind(attention_kind_name(a.kind));
  if (a.kind == AttentionKind::gqa) {
    kind += "-" + std::to_string(a.kv_heads);
  }
  if (m.indexer) {
    kind += " dsa";
  }
  if (attention_label(m) == "hybrid") {
    return "hybrid " + kind + (state.empty() ? "" : " + " + state);
  }
  return m.layer_types.front() == LayerType::sliding ? kind + " sliding" : kind;
}

std::vector<Model> load_models(const std::vector<std::string>& specs,
                               std::vector<std::string>& warnings) {
  Diagnostics diagnostics;
  std::vector<Model> models;
  for (const auto& spec : specs) {
    models.push_back(load_model(spec, diagnostics));
  }
  warnings.insert(warnings.end(), diagnostics.warnings.begin(), diagnostics.warnings.end());
  return models;
}

} // namespace kvcalc::cli
