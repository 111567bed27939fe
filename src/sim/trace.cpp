#include <kvcalc/sim/trace.hpp>

#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include <kvcalc/core/error.hpp>
#include <kvcalc/core/spell.hpp>
#include <kvcalc/core/units.hpp>

namespace kvcalc::sim {

namespace {

const std::vector<std::string> k_trace_keys{"arrival_s", "prompt_tokens", "output_tokens",
                                            "prefix_id", "prefix_tokens"};

bool blank_or_comment(std::string_view line) {
  std::string_view t = trim(line);
  return t.empty() || t.front() == '#';
}

/// One field of a line and the column (1-based) where it starts.
struct Field {
  std::string_view text;
  int column = 0;
};

std::vector<Field> split_csv(std::string_view line) {
  std::vector<Field> out;
  std::size_t start = 0;
  while (true) {
    std::size_t at = line.find(',', start);
    std::string_view raw = line.substr(start, at - start);
    std::string_view text = trim(raw);
    if (text.size() >= 2 && text.front() == '"' && text.back() == '"') {
      text = text.substr(1, text.size() - 2);
    }
    out.push_back({text, static_cast<int>(start) + 1});
    if (at == std::string_view::npos) {
      return out;
    }
    start = at + 1;
  }
}

/// A flat JSON object: string keys, values that are numbers, strings or null.
struct JsonField {
  std::string key;
  std::string value; ///< the number's text, or the string's contents
  bool is_string = false;
  bool is_null = false;
  int column = 0; ///< of the value
};

} // namespace

TraceReader::TraceReader(std::istream& in, std::string file) : m_in(in), m_file(std::move(file)) {
  std::string line;
  while (next_line(line)) {
    if (blank_or_comment(line)) {
      continue;
    }
    if (trim(line).front() == '{') {
      m_format = TraceFormat::jsonl;
      m_pending = line;
      m_has_pending = true;
      return;
    }
    // CSV: this is the header.
    auto fields = split_csv(line);
    for (const Field& f : fields) {
      std::string name(f.text);
      int index = static_cast<int>(m_columns.size());
      m_columns.push_back(name);
      int* slot = name == "arrival_s"       ? &m_arrival
                  : name == "prompt_tokens" ? &m_prompt
                  : name == "output_tokens" ? &m_output
                  : name == "prefix_id"     ? &m_prefix_id
                  : name == "prefix_tokens" ? &m_prefix_tokens
                                            : nullptr;
      if (slot == nullptr) {
        fail("unknown column '" + name + "'" + did_you_mean(name, k_trace_keys) +
                 " (columns: arrival_s, prompt_tokens, output_tokens, and optionally prefix_id, "
                 "prefix_tokens)",
             f.column);
      }
      if (*slot >= 0) {
        fail("column '" + name + "' appears twice", f.column);
      }
      *slot = index;
    }
    for (auto [slot, name] :
         {std::pair{m_arrival, "arrival_s"}, std::pair{m_prompt, "prompt_tokens"},
          std::pair{m_output, "output_tokens"}}) {
      if (slot < 0) {
        fail(std::string("missing column '") + name +
             "' in the header (columns: arrival_s, prompt_tokens, output_tokens, and optionally "
             "prefix_id, prefix_tokens)");
      }
    }
    if ((m_prefix_id >= 0) != (m_prefix_tokens >= 0)) {
      fail("prefix_id and prefix_tokens come together: a shared prefix needs its length");
    }
    return;
  }
  if (m_line == 0 && m_in.bad()) {
    throw InputError("cannot read '" + m_file + "'");
  }
  fail("empty trace: expected a CSV header (arrival_s,prompt_tokens,output_tokens) or JSONL "
       "objects");
}

bool TraceReader::next_line(std::string& line) {
  if (!std::getline(m_in, line)) {
    return false;
  }
  ++m_line;
  if (!line.empty() && line.back() == '\r') {
    line.pop_back();
  }
  // A UTF-8 byte-order mark, as spreadsheet programs write at the start of a "CSV UTF-8" file.
  if (m_line == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) {
    line.erase(0, 3);
  }
  return true;
}

void TraceReader::fail(const std::string& message, int column) const {
  throw InputError(SourceLocation{m_file, m_line, column}, message);
}

std::optional<Request> TraceReader::next() {
  std::string line;
  while (true) {
    if (m_has_pending) {
      line = std::move(m_pending);
      m_has_pending = false;
    } else if (!next_line(line)) {
      if (m_in.bad()) {
        throw InputError("cannot read '" + m_file + "'");
      }
      return std::nullopt;
    }
    if (!blank_or_comment(line)) {
      break;
    }
  }
  return m_format == TraceFormat::csv ? parse_csv(line) : parse_jsonl(line);
}

namespace {

double read_real(std::string_view text, const std::string& name, auto&& fail, int column) {
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v)) {
    fail(name + " must be a number of seconds, got '" + std::string(text) + "'", column);
  }
  if (v < 0) {
    fail(name + " must not be negative, got " + std::string(text), column);
  }
  return v;
}

u64 read_tokens(std::string_view text, const std::string& name, auto&& fail, int column) {
  if (!text.empty() && text.front() == '-') {
    fail(name + " must not be negative, got " + std::string(text), column);
  }
  u64 v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    fail(name + " must be a whole number of tokens, got '" + std::string(text) + "'", column);
  }
  if (static_cast<double>(v) > k_max_request_tokens) {
    fail(name + " " + std::string(text) + " is over 2^32 tokens, beyond any model's context",
         column);
  }
  return v;
}

} // namespace

Request TraceReader::parse_csv(const std::string& line) {
  auto fields = split_csv(line);
  if (fields.size() != m_columns.size()) {
    fail(fmt::format("expected {} fields as in the header, got {}", m_columns.size(),
                     fields.size()));
  }
  auto failer = [this](const std::string& m, int c) { fail(m, c); };
  Request r;
  r.arrival_s = read_real(fields[static_cast<std::size_t>(m_arrival)].text, "arrival_s", failer,
                          fields[static_cast<std::size_t>(m_arrival)].column);
  const Field& prompt = fields[static_cast<std::size_t>(m_prompt)];
  r.prompt_tokens = read_tokens(prompt.text, "prompt_tokens", failer, prompt.column);
  const Field& output = fields[static_cast<std::size_t>(m_output)];
  r.output_tokens = read_tokens(output.text, "output_tokens", failer, output.column);
  std::string prefix_name;
  bool has_tokens = false;
  if (m_prefix_id >= 0) {
    prefix_name = std::string(fields[static_cast<std::size_t>(m_prefix_id)].text);
    const Field& pt = fields[static_cast<std::size_t>(m_prefix_tokens)];
    if (!pt.text.empty()) {
      r.prefix_tokens = read_tokens(pt.text, "prefix_tokens", failer, pt.column);
      has_tokens = true;
    }
  }
  return check(r, prefix_name, has_tokens);
}

Request TraceReader::parse_jsonl(const std::string& line) {
  std::vector<JsonField> fields;
  std::size_t i = 0;
  auto col = [&] { return static_cast<int>(i) + 1; };
  auto skip = [&] {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) {
      ++i;
    }
  };
  auto expect = [&](char c, const char* what) {
    skip();
    if (i >= line.size() || line[i] != c) {
      fail(std::string("expected ") + what + " in this JSON object", col());
    }
    ++i;
  };
  auto read_string = [&] {
    expect('"', "a string");
    std::string s;
    while (i < line.size() && line[i] != '"') {
      if (line[i] == '\\' && i + 1 < line.size()) {
        ++i;
      }
      s += line[i++];
    }
    if (i >= line.size()) {
      fail("unterminated string", col());
    }
    ++i;
    return s;
  };
  expect('{', "'{'");
  skip();
  if (i < line.size() && line[i] == '}') {
    ++i;
  } else {
    while (true) {
      skip();
      JsonField f;
      int key_column = col();
      f.key = read_string();
      if (std::any_of(fields.begin(), fields.end(),
                      [&](const JsonField& g) { return g.key == f.key; })) {
        fail("duplicate key '" + f.key + "' in this JSON object; keep one", key_column);
      }
      if (std::find(k_trace_keys.begin(), k_trace_keys.end(), f.key) == k_trace_keys.end()) {
        fail("unknown key '" + f.key + "'" + did_you_mean(f.key, k_trace_keys) +
                 " (keys: arrival_s, prompt_tokens, output_tokens, and optionally prefix_id, "
                 "prefix_tokens)",
             key_column);
      }
      expect(':', "':'");
      skip();
      f.column = col();
      if (i < line.size() && line[i] == '"') {
        f.value = read_string();
        f.is_string = true;
      } else {
        std::size_t start = i;
        while (i < line.size() && line[i] != ',' && line[i] != '}' && line[i] != ' ') {
          ++i;
        }
        f.value = line.substr(start, i - start);
        f.is_null = f.value == "null";
      }
      fields.push_back(std::move(f));
      skip();
      if (i < line.size() && line[i] == ',') {
        ++i;
        continue;
      }
      expect('}', "',' or '}'");
      break;
    }
  }
  skip();
  if (i != line.size()) {
    fail("unexpected text after the object", col());
  }
  auto failer = [this](const std::string& m, int c) { fail(m, c); };
  auto find = [&](const char* key) -> const JsonField* {
    for (const auto& f : fields) {
      if (f.key == key) {
        return &f;
      }
    }
    return nullptr;
  };
  auto required = [&](const char* key) -> const JsonField& {
    const JsonField* f = find(key);
    if (f == nullptr || f->is_null) {
      fail(std::string("missing key '") + key + "'");
    }
    if (f->is_string) {
      fail(std::string(key) + " must be a number, got a string", f->column);
    }
    return *f;
  };
  Request r;
  const JsonField& arrival = required("arrival_s");
  const JsonField& prompt = required("prompt_tokens");
  const JsonField& output = required("output_tokens");
  r.arrival_s = read_real(arrival.value, "arrival_s", failer, arrival.column);
  r.prompt_tokens = read_tokens(prompt.value, "prompt_tokens", failer, prompt.column);
  r.output_tokens = read_tokens(output.value, "output_tokens", failer, output.column);
  std::string prefix_name;
  bool has_tokens = false;
  if (const JsonField* p = find("prefix_id"); p != nullptr && !p->is_null) {
    prefix_name = p->value;
  }
  if (const JsonField* p = find("prefix_tokens"); p != nullptr && !p->is_null) {
    r.prefix_tokens = read_tokens(p->value, "prefix_tokens", failer, p->column);
    has_tokens = true;
  }
  return check(r, prefix_name, has_tokens);
}

Request TraceReader::check(Request r, const std::string& prefix_name, bool has_prefix_tokens) {
  if (r.prompt_tokens == 0) {
    fail("prompt_tokens must be at least 1");
  }
  if (r.output_tokens == 0) {
    fail("output_tokens must be at least 1");
  }
  if (r.arrival_s < m_last_arrival) {
    fail(fmt::format("arrival_s {:g} is before the previous request's {:g}; sort the trace by "
                     "arrival time",
                     r.arrival_s, m_last_arrival));
  }
  m_last_arrival = r.arrival_s;
  // Times run from the first arrival: a trace of Unix timestamps (1.7e9 s) would otherwise
  // leave the clock's double a quarter of a microsecond of resolution, and latencies, which are
  // differences of such times, would lose their last digits.
  if (!m_first_arrival) {
    m_first_arrival = r.arrival_s;
  }
  r.arrival_s -= *m_first_arrival;
  if (r.arrival_s > k_max_arrival_s) {
    fail(fmt::format("arrival_s {:g} is {:g} s after the first arrival, over 1e9 s (31 years)",
                     r.arrival_s + *m_first_arrival, r.arrival_s));
  }
  if (prefix_name.empty()) {
    if (has_prefix_tokens && r.prefix_tokens > 0) {
      fail("prefix_tokens without a prefix_id");
    }
    r.prefix_tokens = 0;
    return r;
  }
  if (!has_prefix_tokens || r.prefix_tokens == 0) {
    fail("prefix_id '" + prefix_name + "' needs prefix_tokens of at least 1");
  }
  if (r.prefix_tokens > r.prompt_tokens) {
    fail(
        fmt::format("prefix_tokens {} exceeds prompt_tokens {}", r.prefix_tokens, r.prompt_tokens));
  }
  auto [it, added] = m_prefixes.try_emplace(prefix_name, m_prefixes.size() + 1, r.prefix_tokens);
  if (!added && it->second.second != r.prefix_tokens) {
    fail(fmt::format("prefix '{}' has {} tokens here but {} before; one prefix id, one length",
                     prefix_name, r.prefix_tokens, it->second.second));
  }
  r.prefix_id = it->second.first;
  return r;
}

} // namespace kvcalc::sim
