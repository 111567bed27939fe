#pragma once
/// One command's result, written as it is described. Every format reads the same records
/// (record.hpp): JSON and CSV write each record when it is given and keep nothing of it; tables
/// for people keep only their formatted cells, which they need to size their columns, and are
/// written at the end. Text leaves in blocks, once the command says its result stands
/// (`stream()`): a command that fails before then writes nothing, however much it described.

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <kvcalc/report/json.hpp>
#include <kvcalc/report/record.hpp>
#include <kvcalc/report/table.hpp>

namespace kvcalc::report {

enum class Format { table, md, json, csv };

class Output {
public:
  /// Takes each block of text, in order.
  using Writer = std::function<void(std::string_view)>;
  /// The JSON document starts {"kvcalc": {"version", "schema"}, "command": `command`.
  Output(Format format, ByteUnits units, std::string_view command, Writer write);
  Output(const Output&) = delete;
  Output& operator=(const Output&) = delete;

  [[nodiscard]] Format format() const { return m_format; }
  /// Tables, their notes and text after them are written: table and md.
  [[nodiscard]] bool for_people() const {
    return m_format == Format::table || m_format == Format::md;
  }

  // The JSON document: its fields and lists in the order given.
  void field(std::string_view key, const Json& value);
  void field(std::string_view key, const Record& object);
  /// Starts list `key`: item() adds to it until end_list().
  void begin_list(std::string_view key);
  void end_list();

  // Tables for people, written in the order they are added.
  using TableId = std::size_t;
  /// A table that takes rows from every item(): those for_each_row gives with `joined`.
  TableId begin_table(std::string title, std::vector<ColumnRef> columns, std::string joined = "");
  /// A whole table, of the rows `records` give.
  void table(std::string title, const std::vector<const Record*>& records,
             const std::vector<ColumnRef>& columns, std::string_view joined = {});
  void table(const Table& table);
  /// A line below a table.
  void note(TableId table, std::string line);
  /// A line after every table (--explain).
  void text_after(std::string line);

  // The flat CSV table, declared once.
  /// Rows from every item(): those for_each_row gives with `joined`.
  void csv_view(std::vector<ColumnRef> columns, std::string joined = "");
  void csv_table(const Table& table);

  /// One result: an item of the open JSON list, rows of the tables begun and of the CSV view.
  void item(const Record& record);

  /// From now on text leaves in blocks as it is written: the command's result stands (a sweep
  /// has priced one combination, say), so a later failure of one of its combinations cannot
  /// fail the command. Until then it is all kept.
  void stream() { m_streaming = true; }

  /// Ends the document: the JSON's `warnings`, the tables and the text after them, then the
  /// last block.
  void finish(const std::vector<std::string>& warnings);

private:
  struct GrowingTable {
    TableId table;
    std::vector<ColumnRef> columns;
    std::string joined;
    Headers headers;
  };
  /// The rows `record` gives table `g`, formatted.
  void add_rows(GrowingTable& g, const Record& record);
  /// Table `g`'s headers, once its rows are in.
  void name_columns(const GrowingTable& g);
  void json_key(std::string_view key);
  void flush_if_full();

  Format m_format;
  ByteUnits m_units;
  Writer m_write;
  std::string m_buffer;
  bool m_streaming = false;
  std::size_t m_json_fields = 0; ///< fields of the JSON document written
  bool m_list_open = false;
  std::size_t m_list_items = 0;
  std::vector<TextTable> m_tables;
  std::vector<GrowingTable> m_growing;
  std::vector<std::string> m_text_after;
  std::optional<std::vector<ColumnRef>> m_csv_columns;
  std::string m_csv_joined;
};

} // namespace kvcalc::report
