#pragma once
/// Neutral results: typed cells with a unit hint. Commands build these, and the renderers here
/// alone turn them into text (docs/ARCHITECTURE.md); notes and warnings format their own figures.

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <kvcalc/core/derivation.hpp>

namespace kvcalc::report {

enum class Unit {
  text,
  count,       ///< an exact integer, digits grouped for people
  bytes,       ///< humanized for people (274.5 MiB), exact in CSV
  bytes_exact, ///< exact with grouping for people (70,272 B)
  ratio,       ///< a dimensionless factor (0.125x)
  concurrency, ///< requests an engine holds at once, two decimals cut, not rounded (29.99x)
  percent,     ///< a fraction shown as a signed percentage (-87.5%); stored as a fraction
  number,      ///< a real number, four significant digits
  flops,       ///< FLOP/s, SI prefixes (989.4 TFLOP/s)
  bytes_per_s, ///< bytes per second, SI prefixes (3.350 TB/s)
  flop,        ///< a FLOP count, SI prefixes (8.908 TFLOP)
  share,       ///< a fraction shown as an unsigned percentage (90.8%)
  seconds,     ///< a duration: 1.234 s, 12.345 ms, 56.78 µs
  tokens,      ///< a token count shown short for people (4k, 1M, else grouped), exact in CSV
  flag,        ///< true or false (yes / no for people)
};

/// How people-facing bytes are scaled.
enum class ByteUnits { iec, si };

struct Cell {
  std::variant<std::monostate, std::string, std::uint64_t, double, bool> value;
  Unit unit = Unit::text;
  std::string shown; ///< what people see instead, when set ("does not fit"); CSV and JSON keep
                     ///< the value

  static Cell empty() { return {}; }
  static Cell text(std::string s) { return {std::move(s), Unit::text, {}}; }
  static Cell count(std::uint64_t v) { return {v, Unit::count, {}}; }
  static Cell bytes(std::uint64_t v) { return {v, Unit::bytes, {}}; }
  static Cell bytes_exact(std::uint64_t v) { return {v, Unit::bytes_exact, {}}; }
  /// Bytes a model estimates (a roofline op's traffic): kept as computed, shown as whole bytes.
  static Cell byte_estimate(double v) { return {v, Unit::bytes, {}}; }
  static Cell ratio(double v) { return {v, Unit::ratio, {}}; }
  /// An engine's "maximum concurrency": never shown above the whole sequences it holds.
  static Cell concurrency(double v) { return {v, Unit::concurrency, {}}; }
  static Cell percent(double fraction) { return {fraction, Unit::percent, {}}; }
  static Cell number(double v) { return {v, Unit::number, {}}; }
  static Cell flops(double v) { return {v, Unit::flops, {}}; }
  static Cell bytes_per_s(double v) { return {v, Unit::bytes_per_s, {}}; }
  static Cell flop(double v) { return {v, Unit::flop, {}}; }
  static Cell share(double fraction) { return {fraction, Unit::share, {}}; }
  static Cell seconds(double s) { return {s, Unit::seconds, {}}; }
  static Cell tokens(std::uint64_t v) { return {v, Unit::tokens, {}}; }
  static Cell flag(bool b) { return {b, Unit::flag, {}}; }
  /// This cell, shown to people as `text`.
  [[nodiscard]] Cell shown_as(std::string text) const {
    Cell c = *this;
    c.shown = std::move(text);
    return c;
  }
};

struct Column {
  std::string header; ///< for people
  std::string key;    ///< snake_case with the unit in the name, for CSV
};

struct Table {
  std::string title; ///< a line above the table; may be empty
  std::vector<Column> columns;
  std::vector<std::vector<Cell>> rows;
  std::vector<std::string> notes; ///< lines below the table
};

/// 287834112 → "274.5 MiB" (iec) or "287.8 MB" (si); below 1 KiB/kB: "512 B".
[[nodiscard]] std::string human_bytes(std::uint64_t bytes, ByteUnits units);

/// 3.35e12 → "3.350 T" (four significant digits and an SI prefix; `unit` appended).
[[nodiscard]] std::string si_rate(double value, const std::string& unit);

/// One cell as people read it.
[[nodiscard]] std::string format_cell(const Cell& cell, ByteUnits units);

/// A table as people read it, every cell formatted: what a table that grows row by row keeps
/// (report/output.hpp).
struct TextTable {
  std::string title;
  std::vector<std::string> headers; ///< one per column
  std::vector<bool> figures;        ///< per column: some cell is a figure (right-aligned)
  std::vector<std::string> cells;   ///< row after row, headers.size() each
  std::vector<std::string> notes;

  /// An empty table of `columns` columns (their headers may come later).
  explicit TextTable(std::size_t columns = 0) : headers(columns), figures(columns, false) {}
  /// Appends one row's cells, formatted.
  void add_row(const std::vector<Cell>& row, ByteUnits units);
  /// Appends the next cell of the row being added: column `column`.
  void add_cell(std::size_t column, const Cell& cell, ByteUnits units);
};

/// A table formatted for people.
[[nodiscard]] TextTable text_table(const Table& table, ByteUnits units);

/// Aligned plain-text tables separated by blank lines.
[[nodiscard]] std::string render_text(const std::vector<TextTable>& tables);

/// GitHub-flavoured Markdown tables.
[[nodiscard]] std::string render_markdown(const std::vector<TextTable>& tables);

/// A derivation's lines as people read them: counts with grouped digits (4,096), bytes with
/// "B" (4,096 B), fractions as given (0.9).
[[nodiscard]] std::vector<std::string> render_derivation(const Derivation& derivation);

/// RFC 4180 CSV of one table: header of column keys, exact raw values.
[[nodiscard]] std::string render_csv(const Table& table);
/// One CSV field: a cell's exact raw value, quoted where it must be (empty for no value).
void append_csv_field(std::string& out, const Cell& cell);
/// One CSV field of text, quoted where it must be.
void append_csv_text(std::string& out, std::string_view text);

} // namespace kvcalc::report
