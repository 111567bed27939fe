#pragma once
/// Request traces for the simulator, read as a stream (docs/simulate.md, "Traces"): CSV with a
/// header, or JSONL with one object per line. Columns/keys: arrival_s, prompt_tokens,
/// output_tokens, and optionally prefix_id and prefix_tokens. Errors are InputErrors at
/// file:line (and column where it helps).

#include <istream>
#include <map>
#include <optional>
#include <string>

#include <kvcalc/sim/workload.hpp>

namespace kvcalc::sim {

enum class TraceFormat { csv, jsonl };

class TraceReader : public RequestSource {
public:
  /// Reads `in` (not owned; it must outlive the reader). The format is JSONL when the first
  /// line that is not blank or a # comment starts with '{', else CSV.
  TraceReader(std::istream& in, std::string file);
  std::optional<Request> next() override;
  [[nodiscard]] TraceFormat format() const { return m_format; }

private:
  bool next_line(std::string& line);
  Request parse_csv(const std::string& line);
  Request parse_jsonl(const std::string& line);
  Request check(Request r, const std::string& prefix_name, bool has_prefix_tokens);
  [[noreturn]] void fail(const std::string& message, int column = 0) const;

  std::istream& m_in;
  std::string m_file;
  TraceFormat m_format = TraceFormat::csv;
  int m_line = 0;
  std::string m_pending; ///< the first data line, read while detecting the format
  bool m_has_pending = false;
  std::vector<std::string> m_columns; ///< CSV header
  int m_arrival = -1, m_prompt = -1, m_output = -1, m_prefix_id = -1, m_prefix_tokens = -1;
  double m_last_arrival = 0;
  std::optional<double> m_first_arrival;                 ///< arrivals are given from it
  std::map<std::string, std::pair<u64, u64>> m_prefixes; ///< name → id, prefix tokens
};

} // namespace kvcalc::sim
