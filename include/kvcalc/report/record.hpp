#pragma once
/// The one description of a result: ordered records whose entries carry a key (JSON and CSV), a
/// header (tables) and a typed value (a Cell: raw value and unit). JSON takes its keys and
/// nesting from the records; a table or the CSV takes the columns a view names by key. Every
/// format therefore shows the same numbers, and no renderer computes one.

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <kvcalc/report/table.hpp>

namespace kvcalc::report {

/// Which outputs an entry appears in.
struct Shown {
  bool json = true;
  bool tables = true; ///< tables and CSV views may name it
};
inline constexpr Shown k_everywhere{true, true};
inline constexpr Shown k_json_only{true, false};
inline constexpr Shown k_tables_only{false, true};

/// Records move and are never copied: a command describes a result once, hands the record to
/// its output, and drops it.
class Record {
public:
  enum class Kind { value, values, object, list };
  struct Entry {
    std::string key;
    std::string header; ///< for people; empty where no table shows it
    Shown shown;
    Kind kind = Kind::value;
    Cell cell;               ///< a value
    std::vector<Cell> items; ///< values (JSON an array)
    /// An object (one record) or a list. Held apart so that a reference to it stays valid while
    /// the parent grows.
    std::unique_ptr<std::vector<Record>> records;
  };

  Record() = default;
  Record(Record&&) noexcept = default;
  Record& operator=(Record&&) noexcept = default;
  Record(const Record&) = delete;
  Record& operator=(const Record&) = delete;
  ~Record() = default;

  /// A value with its column header.
  Record& value(std::string key, std::string header, Cell cell, Shown shown = k_everywhere);
  /// A value no table heads: JSON, and CSV views that name it.
  Record& value(std::string key, Cell cell, Shown shown = k_everywhere);
  /// A list of values (JSON an array).
  Record& values(std::string key, std::vector<Cell> items, Shown shown = k_json_only);
  /// A list of strings (JSON an array).
  Record& strings(std::string key, const std::vector<std::string>& items,
                  Shown shown = k_json_only);
  /// A nested record (JSON an object), returned to be filled; the reference stays valid while
  /// entries are added to this record.
  Record& object(std::string key, Shown shown = k_json_only);
  /// A nested list of records (JSON an array), returned to be filled; valid as object()'s.
  std::vector<Record>& list(std::string key, Shown shown = k_json_only);

  /// Room for `entries` entries, so that a record of known size grows in one allocation.
  void reserve(std::size_t entries) { m_entries.reserve(entries); }

  /// The entry of `key` (an internal error when it is missing).
  [[nodiscard]] const Entry& at(std::string_view key) const;
  [[nodiscard]] const Entry* find(std::string_view key) const;
  /// The value entry of `key` that tables show (an entry may share its key with a JSON-only one:
  /// aliases as a list for machines, as words for people). A dotted key ("ttft_s.p50") reaches
  /// into nested objects.
  [[nodiscard]] const Entry* column(std::string_view key) const;
  /// The cell of value `key`, or an empty one.
  [[nodiscard]] Cell cell(std::string_view key) const;
  /// The records of object or list `key` (an internal error when it is missing).
  [[nodiscard]] const std::vector<Record>& records(std::string_view key) const;
  [[nodiscard]] const std::vector<Entry>& entries() const { return m_entries; }

private:
  Entry& add(std::string key, Shown shown, Kind kind);
  std::vector<Entry> m_entries;
};

/// A column of a view: the key of a value entry (dotted into nested objects), a header for
/// people when the record's own header does not suit ("" keeps it), and the column's name in CSV
/// when it is not the key ("" keeps it: a flat CSV names "ttft_s.p50" ttft_p50_s).
struct ColumnRef {
  std::string key;
  std::string header = "";
  std::string name = "";
};

/// One row of a view: a record, and the parent whose values it lacks (joined rows).
class Row {
public:
  explicit Row(const Record& record, const Record* parent = nullptr)
      : m_record(&record), m_parent(parent) {}
  /// The value entry column `key` shows in this row, or none.
  [[nodiscard]] const Record::Entry* column(std::string_view key) const;

private:
  const Record* m_record;
  const Record* m_parent;
};

/// Calls `each(row)` for every row a view takes from `record`: the record itself, or, when
/// `joined` names one of its lists, one row per record of that list, holding the child's values
/// and then the parent's that the child does not name (a model's fields on each of its contexts).
/// A record without that list gives no row.
template <class F> void for_each_row(const Record& record, std::string_view joined, F&& each) {
  if (joined.empty()) {
    each(Row(record));
    return;
  }
  if (const Record::Entry* list = record.find(joined); list && list->records) {
    for (const Record& child : *list->records) {
      each(Row(child, &record));
    }
  }
}

/// The header of each column: its own, else that of the first row whose entry has one (a row
/// that says why it has no figures need not head them).
/// Filled row by row as a table grows (report/output.hpp), or at once by table_of.
class Headers {
public:
  explicit Headers(const std::vector<ColumnRef>& columns);
  void see(const Row& row, const std::vector<ColumnRef>& columns);
  [[nodiscard]] std::vector<Column> columns(const std::vector<ColumnRef>& columns) const;

private:
  std::vector<std::string> m_headers;
  std::vector<bool> m_known;
};

/// A table of the rows each of `records` gives (for_each_row), one column per `columns` entry; a
/// row without the key shows an empty cell.
[[nodiscard]] Table table_of(const std::vector<Record>& records,
                             const std::vector<ColumnRef>& columns, std::string_view joined = {});
[[nodiscard]] Table table_of(const std::vector<const Record*>& records,
                             const std::vector<ColumnRef>& columns, std::string_view joined = {});

/// A table of one record turned on its side: a row per key of `keys` (dotted into nested objects)
/// that holds a value, its header beside its cell (a device's probes, a rate per row).
[[nodiscard]] Table fields_of(const Record& record, const std::vector<std::string>& keys,
                              Column name_column, Column value_column);

/// The JSON text of a record's entries shown in JSON, in their order, with `indent` spaces a
/// level (0: one line), starting at nesting `depth`; appended to `out`.
void write_json(std::string& out, const Record& record, int indent = 2, int depth = 0);
/// The JSON text of a record.
[[nodiscard]] std::string json_text(const Record& record, int indent = 2);

} // namespace kvcalc::report
