#include <algorithm>
#include <cerrno>
#include <chrono>
#include <ostream>
#include <unordered_set>

#include <unistd.h>

#include <kvcalc/core/error.hpp>
#include <kvcalc/core/file.hpp>
#include <kvcalc/core/spell.hpp>
#include <kvcalc/core/units.hpp>
#include <kvcalc/core/version.hpp>
#include <kvcalc/model/loader.hpp>

#include "command.hpp"

namespace kvcalc::cli {

std::vector<std::string> say_warnings(std::ostream& err, const std::vector<std::string>& warnings) {
  std::vector<std::string> said;
  std::unordered_set<std::string_view> seen;
  for (const auto& w : warnings) {
    if (seen.insert(w).second) {
      err << "kvcalc: warning: " << printable(w) << '\n';
      said.push_back(w);
    }
  }
  return said;
}

CommandOutput::CommandOutput(const OutputOptions& options, std::string_view command,
                             std::ostream& out, std::ostream& err)
    : m_out(out), m_err(err), m_path(options.file),
      m_document(options.format, options.units, command, [this](std::string_view text) {
        if (m_path.empty()) {
          m_out << text;
          return;
        }
        if (!m_file) {
          m_file.emplace(m_path, "-o");
          errno = 0; // commit() reports what the writes set
        }
        m_file->stream() << text;
      }) {
}

void CommandOutput::finish() {
  m_document.finish(say_warnings(m_err, warnings));
  if (!m_path.empty()) {
    if (!m_file) {
      m_file.emplace(m_path, "-o");
    }
    m_file->commit();
  }
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
