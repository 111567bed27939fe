#include <kvcalc/report/table.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <fmt/format.h>

#include <kvcalc/core/spell.hpp>
#include <kvcalc/core/units.hpp>

namespace kvcalc::report {

std::string human_bytes(std::uint64_t bytes, ByteUnits units) {
  const double base = units == ByteUnits::iec ? 1024.0 : 1000.0;
  static constexpr std::array<const char*, 7> iec{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  static constexpr std::array<const char*, 7> si{"B", "kB", "MB", "GB", "TB", "PB", "EB"};
  const auto& names = units == ByteUnits::iec ? iec : si;
  auto value = static_cast<double>(bytes);
  std::size_t i = 0;
  while (value >= base && i + 1 < names.size()) {
    value /= base;
    ++i;
  }
  if (i == 0) {
    return fmt::format("{} B", bytes);
  }
  // Four significant digits: enough to tell 40 GiB from 40.1 GiB without hiding the unit.
  int decimals = value < 10 ? 3 : value < 100 ? 2 : value < 1000 ? 1 : 0;
  return fmt::format("{:.{}f} {}", value, decimals, names[i]);
}

std::string si_rate(double value, const std::string& unit) {
  static constexpr std::array<const char*, 7> prefixes{"", "k", "M", "G", "T", "P", "E"};
  std::size_t i = 0;
  while (std::fabs(value) >= 1000 && i + 1 < prefixes.size()) {
    value /= 1000;
    ++i;
  }
  int decimals = std::fabs(value) < 10 ? 3 : std::fabs(value) < 100 ? 2 : 1;
  return fmt::format("{:.{}f} {}{}", value, decimals, prefixes[i], unit);
}

namespace {

std::string significant(double v, int digits) {
  if (v == 0) {
    return "0";
  }
  int magnitude = static_cast<int>(std::floor(std::log10(std::fabs(v))));
  int decimals = std::max(0, digits - 1 - magnitude);
  return fmt::format("{:.{}f}", v, decimals);
}

/// Right-aligned: figures. Text, flags, context labels ("128k", "1M") and values shown as words
/// ("does not fit", "trace") read as labels; a column is right-aligned when any cell is a figure.
bool numeric(const Cell& c) {
  return c.unit != Unit::text && c.unit != Unit::flag && c.unit != Unit::tokens && c.shown.empty();
}

} // namespace

std::string format_cell(const Cell& cell, ByteUnits units) {
  if (!cell.shown.empty()) {
    return cell.shown;
  }
  if (std::holds_alternative<std::monostate>(cell.value)) {
    return "-";
  }
  if (const auto* s = std::get_if<std::string>(&cell.value)) {
    return *s;
  }
  if (const auto* b = std::get_if<bool>(&cell.value)) {
    return *b ? "yes" : "no";
  }
  if (const auto* v = std::get_if<std::uint64_t>(&cell.value)) {
    switch (cell.unit) {
    case Unit::bytes:
      return human_bytes(*v, units);
    case Unit::bytes_exact:
      return group_digits(*v) + " B";
    case Unit::tokens:
      return *v % (std::uint64_t{1} << 20) == 0 ? std::to_string(*v >> 20) + "M"
             : *v % 1024 == 0                   ? std::to_string(*v / 1024) + "k"
                                                : group_digits(*v);
    default:
      return group_digits(*v);
    }
  }
  double d = std::get<double>(cell.value);
  switch (cell.unit) {
  case Unit::bytes: // whole bytes, as counted ones are; past the range, the range's end
    return human_bytes(d >= 0x1p64 ? UINT64_MAX
                       : d >= 0    ? static_cast<std::uint64_t>(d)
                                   : 0,
                       units);
  case Unit::percent:
    return fmt::format("{}{:.1f}%", d > 0 ? "+" : "", d * 100.0);
  case Unit::ratio:
    return significant(d, 3) + "x";
  case Unit::concurrency: // cut to two decimals: 29.996 is 29.99x, never 30.0x beside 29 seqs
    return fmt::format("{:.2f}x", std::floor(d * 100.0 * (1 + 1e-12)) / 100.0);
  case Unit::flops:
    return si_rate(d, "FLOP/s");
  case Unit::bytes_per_s:
    return si_rate(d, "B/s");
  case Unit::flop:
    return si_rate(d, "FLOP");
  case Unit::share:
    return fmt::format("{:.1f}%", d * 100.0);
  case Unit::seconds:
    return d >= 1      ? fmt::format("{:.3f} s", d)
           : d >= 1e-3 ? fmt::format("{:.3f} ms", d * 1e3)
                       : fmt::format("{:.2f} µs", d * 1e6);
  default:
    return significant(d, 4);
  }
}

void TextTable::add_cell(std::size_t column, const Cell& cell, ByteUnits units) {
  cells.push_back(format_cell(cell, units));
  if (numeric(cell)) {
    figures[column] = true;
  }
}

void TextTable::add_row(const std::vector<Cell>& row, ByteUnits units) {
  for (std::size_t c = 0; c < row.size(); ++c) {
    add_cell(c, row[c], units);
  }
}

TextTable text_table(const Table& table, ByteUnits units) {
  TextTable t(table.columns.size());
  t.title = table.title;
  for (std::size_t c = 0; c < table.columns.size(); ++c) {
    t.headers[c] = table.columns[c].header;
  }
  t.cells.reserve(table.rows.size() * table.columns.size());
  for (const auto& row : table.rows) {
    t.add_row(row, units);
  }
  t.notes = table.notes;
  return t;
}

namespace {

/// Display width: UTF-8 continuation bytes take no column.
std::size_t width(const std::string& s) {
  return static_cast<std::size_t>(std::count_if(
      s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

void pad(std::string& out, const std::string& s, std::size_t w, bool right) {
  std::size_t fill = w > width(s) ? w - width(s) : 0;
  if (right) {
    out.append(fill, ' ');
  }
  out += s;
  if (!right) {
    out.append(fill, ' ');
  }
}

} // namespace

std::string render_text(const std::vector<TextTable>& tables) {
  std::string out;
  for (const auto& t : tables) {
    if (!out.empty()) {
      out += '\n';
    }
    if (!t.title.empty()) {
      out += printable(t.title) + '\n';
    }
    const std::size_t columns = t.headers.size();
    if (columns > 0) {
      // A name from a file may hold escapes: cells are shown printable.
      std::vector<std::string> shown;
      shown.reserve(t.cells.size());
      for (const auto& cell : t.cells) {
        shown.push_back(printable(cell));
      }
      std::vector<std::size_t> widths(columns);
      for (std::size_t c = 0; c < columns; ++c) {
        widths[c] = width(t.headers[c]);
      }
      for (std::size_t i = 0; i < shown.size(); ++i) {
        widths[i % columns] = std::max(widths[i % columns], width(shown[i]));
      }
      auto line = [&](const std::string* values) {
        std::size_t start = out.size();
        for (std::size_t c = 0; c < columns; ++c) {
          out += "  ";
          pad(out, values[c], widths[c], t.figures[c]);
        }
        std::size_t end = out.size();
        while (end > start && out[end - 1] == ' ') {
          --end;
        }
        out.resize(end);
        out += '\n';
      };
      line(t.headers.data());
      for (std::size_t i = 0; i < shown.size(); i += columns) {
        line(&shown[i]);
      }
    }
    for (const auto& note : t.notes) {
      out += printable(note) + '\n';
    }
  }
  return out;
}

std::string render_markdown(const std::vector<TextTable>& tables) {
  auto escape = [](const std::string& s) {
    std::string e;
    for (char c : s) {
      e += c == '|' ? std::string("\\|") : std::string(1, c);
    }
    return e;
  };
  std::string out;
  for (const auto& t : tables) {
    if (!out.empty()) {
      out += '\n';
    }
    if (!t.title.empty()) {
      out += "**" + t.title + "**\n\n";
    }
    const std::size_t columns = t.headers.size();
    if (columns > 0) {
      std::string header = "|";
      std::string rule = "|";
      for (std::size_t c = 0; c < columns; ++c) {
        header += " " + escape(t.headers[c]) + " |";
        rule += t.figures[c] ? " ---: |" : " --- |";
      }
      out += header + '\n' + rule + '\n';
      for (std::size_t i = 0; i < t.cells.size(); ++i) {
        out += (i % columns == 0 ? "| " : " ") + escape(t.cells[i]) + " |";
        if (i % columns == columns - 1) {
          out += '\n';
        }
      }
    }
    if (!t.notes.empty()) {
      out += '\n';
      for (const auto& note : t.notes) {
        out += note + "  \n";
      }
    }
  }
  return out;
}

void append_csv_text(std::string& out, std::string_view s) {
  if (s.find_first_of(",\"\n") == std::string_view::npos) {
    out += s;
    return;
  }
  out += '"';
  for (char c : s) {
    out += c;
    if (c == '"') {
      out += '"';
    }
  }
  out += '"';
}

void append_csv_field(std::string& out, const Cell& cell) {
  if (const auto* s = std::get_if<std::string>(&cell.value)) {
    append_csv_text(out, *s);
  } else if (const auto* u = std::get_if<std::uint64_t>(&cell.value)) {
    char buffer[24];
    auto result = std::to_chars(buffer, buffer + sizeof buffer, *u);
    out.append(buffer, result.ptr);
  } else if (const auto* b = std::get_if<bool>(&cell.value)) {
    out += *b ? "true" : "false";
  } else if (const auto* d = std::get_if<double>(&cell.value)) {
    char buffer[32];
    auto result = std::to_chars(buffer, buffer + sizeof buffer, *d);
    out.append(buffer, result.ptr);
  }
}

std::string render_csv(const Table& t) {
  std::string out;
  for (std::size_t c = 0; c < t.columns.size(); ++c) {
    out += c ? "," : "";
    out += t.columns[c].key;
  }
  out += '\n';
  for (const auto& row : t.rows) {
    for (std::size_t c = 0; c < row.size(); ++c) {
      out += c ? "," : "";
      append_csv_field(out, row[c]);
    }
    out += '\n';
  }
  return out;
}

std::vector<std::string> render_derivation(const Derivation& derivation) {
  std::vector<std::string> out;
  for (const DerivationLine& line : derivation.lines()) {
    std::string text;
    for (const Term& t : line) {
      switch (t.kind) {
      case Term::Kind::text:
        text += t.text;
        break;
      case Term::Kind::count:
        text += group_digits(t.count);
        break;
      case Term::Kind::bytes:
        text += group_digits(t.count) + " B";
        break;
      case Term::Kind::fraction: {
        std::string f = std::to_string(t.fraction);
        while (f.size() > 1 && f.back() == '0') {
          f.pop_back();
        }
        text += f.back() == '.' ? f + "0" : f;
        break;
      }
      }
    }
    out.push_back(std::move(text));
  }
  return out;
}

} // namespace kvcalc::report
