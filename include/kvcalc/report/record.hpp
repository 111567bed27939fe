#pragma once
/// The one description of a result: ordered records whose entries carry a key (JSON and CSV), a
/// header (tables) and a typed value (a Cell: raw value and unit). JSON takes its keys and
/// nesting from the records; a table or the CSV takes the columns a view names by key. Every
/// format therefore shows the same numbers, and no renderer computes one.

#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include <kvcalc/report/json.hpp>
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

class Record {
public:
  enum class Kind { value, values, object, list };
  struct Entry {
    std::string key;
    std::string header; ///< for people; empty where no table shows it
    Shown shown;
    Kind kind = Kind::value;
    Cell cell;                   ///< a value
    std::vector<Cell> items;     ///< values (JSON an array)
    std::vector<Record> records; ///< an object (one record) or a list
  };

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

  /// The entry of `key` (an internal error when it is missing).
  [[nodiscard]] const Entry& at(std::string_view key) const;
  [[nodiscard]] const Entry* find(std::string_view key) const;
  /// The value entry of `key` that tables show (an entry may share its key with a JSON-only one:
  /// aliases as a list for machines, as words for people). A dotted key ("ttft_s.p50") reaches
  /// into nested objects.
  [[nodiscard]] const Entry* column(std::string_view key) const;
  /// The cell of value `key`, or an empty one.
  [[nodiscard]] Cell cell(std::string_view key) const;
  [[nodiscard]] const std::vector<Record>& records(std::string_view key) const;
  [[nodiscard]] const std::deque<Entry>& entries() const { return m_entries; }

  /// The JSON object of the entries shown in JSON, in their order.
  [[nodiscard]] Json json() const;

private:
  friend std::vector<Record> joined(const Record& parent, std::string_view key);
  std::deque<Entry> m_entries; ///< a deque: adding an entry moves none of the others
};

/// A column of a view: the key of a value entry (dotted into nested objects), a header for
/// people when the record's own header does not suit ("" keeps it), and the column's name in CSV
/// when it is not the key ("" keeps it: a flat CSV names "ttft_s.p50" ttft_p50_s).
struct ColumnRef {
  std::string key;
  std::string header = "";
  std::string name = "";
};

/// A table of `rows`, one row per record, one column per `columns` entry; a row without the key
/// shows an empty cell. Headers come from the first row that has the key.
[[nodiscard]] Table table_of(const std::vector<Record>& rows,
                             const std::vector<ColumnRef>& columns);
[[nodiscard]] Table table_of(const std::vector<const Record*>& rows,
                             const std::vector<ColumnRef>& columns);

/// A table of one record turned on its side: a row per key of `keys` (dotted into nested objects)
/// that holds a value, its header beside its cell (a device's probes, a rate per row).
[[nodiscard]] Table fields_of(const Record& record, const std::vector<std::string>& keys,
                              Column name_column, Column value_column);

/// One record per record of `parent`'s list `key`, holding the child's entries and then the
/// parent's that the child does not name: the rows of a flat CSV (a model's fields on each of
/// its contexts, a kernel's on each of its phases).
[[nodiscard]] std::vector<Record> joined(const Record& parent, std::string_view key);

/// A JSON array of records.
[[nodiscard]] Json json_of(const std::vector<Record>& rows);

} // namespace kvcalc::report
