#include <kvcalc/report/record.hpp>

#include <kvcalc/core/error.hpp>
#include <kvcalc/report/json.hpp>

namespace kvcalc::report {

Record::Entry& Record::add(std::string key, Shown shown, Kind kind) {
  Entry& e = m_entries.emplace_back();
  e.key = std::move(key);
  e.shown = shown;
  e.kind = kind;
  return e;
}

Record& Record::value(std::string key, std::string header, Cell cell, Shown shown) {
  Entry& e = add(std::move(key), shown, Kind::value);
  e.header = std::move(header);
  e.cell = std::move(cell);
  return *this;
}

Record& Record::value(std::string key, Cell cell, Shown shown) {
  return value(std::move(key), "", std::move(cell), shown);
}

Record& Record::values(std::string key, std::vector<Cell> items, Shown shown) {
  add(std::move(key), shown, Kind::values).items = std::move(items);
  return *this;
}

Record& Record::strings(std::string key, const std::vector<std::string>& items, Shown shown) {
  std::vector<Cell> cells;
  cells.reserve(items.size());
  for (const auto& s : items) {
    cells.push_back(Cell::text(s));
  }
  return values(std::move(key), std::move(cells), shown);
}

Record& Record::object(std::string key, Shown shown) {
  Entry& e = add(std::move(key), shown, Kind::object);
  e.records = std::make_unique<std::vector<Record>>(1);
  return e.records->front();
}

std::vector<Record>& Record::list(std::string key, Shown shown) {
  Entry& e = add(std::move(key), shown, Kind::list);
  e.records = std::make_unique<std::vector<Record>>();
  return *e.records;
}

const Record::Entry* Record::find(std::string_view key) const {
  for (const auto& e : m_entries) {
    if (e.key == key) {
      return &e;
    }
  }
  return nullptr;
}

const Record::Entry* Record::column(std::string_view key) const {
  if (std::size_t dot = key.find('.'); dot != std::string_view::npos) {
    for (const auto& e : m_entries) {
      if (e.key == key.substr(0, dot) && e.kind == Kind::object) {
        return e.records->front().column(key.substr(dot + 1));
      }
    }
    return nullptr;
  }
  for (const auto& e : m_entries) {
    if (e.key == key && e.shown.tables && e.kind == Kind::value) {
      return &e;
    }
  }
  return nullptr;
}

const Record::Entry& Record::at(std::string_view key) const {
  if (const Entry* e = find(key)) {
    return *e;
  }
  throw Error("internal error: a description has no entry '" + std::string(key) + "'");
}

Cell Record::cell(std::string_view key) const {
  const Entry* e = find(key);
  return e && e->kind == Kind::value ? e->cell : Cell::empty();
}

const std::vector<Record>& Record::records(std::string_view key) const {
  const Entry& e = at(key);
  if (!e.records) {
    throw Error("internal error: description entry '" + std::string(key) + "' holds no records");
  }
  return *e.records;
}

const Record::Entry* Row::column(std::string_view key) const {
  // A joined row holds the child's entries, then the parent's whose key the child lacks: a key
  // the child has, in any kind, hides the parent's.
  if (m_parent != nullptr && m_record->find(key.substr(0, key.find('.'))) == nullptr) {
    return m_parent->column(key);
  }
  return m_record->column(key);
}

Headers::Headers(const std::vector<ColumnRef>& columns)
    : m_headers(columns.size()), m_known(columns.size(), false) {
  for (std::size_t c = 0; c < columns.size(); ++c) {
    m_headers[c] = columns[c].header;
    m_known[c] = !columns[c].header.empty();
  }
}

void Headers::see(const Row& row, const std::vector<ColumnRef>& columns) {
  for (std::size_t c = 0; c < columns.size(); ++c) {
    if (!m_known[c]) {
      if (const Record::Entry* e = row.column(columns[c].key); e && !e->header.empty()) {
        m_headers[c] = e->header;
        m_known[c] = true;
      }
    }
  }
}

std::vector<Column> Headers::columns(const std::vector<ColumnRef>& columns) const {
  std::vector<Column> out;
  out.reserve(columns.size());
  for (std::size_t c = 0; c < columns.size(); ++c) {
    out.push_back({m_headers[c], columns[c].name.empty() ? columns[c].key : columns[c].name});
  }
  return out;
}

Table table_of(const std::vector<const Record*>& records, const std::vector<ColumnRef>& columns,
               std::string_view joined) {
  Table t;
  Headers headers(columns);
  for (const Record* r : records) {
    for_each_row(*r, joined, [&](const Row& row) {
      headers.see(row, columns);
      std::vector<Cell> cells;
      cells.reserve(columns.size());
      for (const auto& c : columns) {
        const Record::Entry* e = row.column(c.key);
        cells.push_back(e ? e->cell : Cell::empty());
      }
      t.rows.push_back(std::move(cells));
    });
  }
  t.columns = headers.columns(columns);
  return t;
}

Table table_of(const std::vector<Record>& records, const std::vector<ColumnRef>& columns,
               std::string_view joined) {
  std::vector<const Record*> pointers;
  pointers.reserve(records.size());
  for (const auto& r : records) {
    pointers.push_back(&r);
  }
  return table_of(pointers, columns, joined);
}

Table fields_of(const Record& record, const std::vector<std::string>& keys, Column name_column,
                Column value_column) {
  Table t;
  t.columns = {std::move(name_column), std::move(value_column)};
  for (const auto& key : keys) {
    const Record::Entry* e = record.column(key);
    if (e && !std::holds_alternative<std::monostate>(e->cell.value)) {
      t.rows.push_back({Cell::text(e->header), e->cell});
    }
  }
  return t;
}

namespace {

void write_cell(std::string& out, const Cell& c) {
  if (const auto* s = std::get_if<std::string>(&c.value)) {
    append_json_string(out, *s);
  } else if (const auto* u = std::get_if<std::uint64_t>(&c.value)) {
    out += std::to_string(*u);
  } else if (const auto* d = std::get_if<double>(&c.value)) {
    append_json_number(out, *d);
  } else if (const auto* b = std::get_if<bool>(&c.value)) {
    out += *b ? "true" : "false";
  } else {
    out += "null";
  }
}

/// `[a, b, …]` of `items`, each written by `write`, as Json::dump lays out an array.
template <class T, class F>
void write_array(std::string& out, const std::vector<T>& items, int indent, int depth, F write) {
  out += '[';
  for (std::size_t i = 0; i < items.size(); ++i) {
    out += i ? "," : "";
    append_json_newline(out, indent, depth + 1);
    write(items[i]);
  }
  if (!items.empty()) {
    append_json_newline(out, indent, depth);
  }
  out += ']';
}

} // namespace

void write_json(std::string& out, const Record& record, int indent, int depth) {
  out += '{';
  bool any = false;
  for (const auto& e : record.entries()) {
    if (!e.shown.json) {
      continue;
    }
    out += any ? "," : "";
    any = true;
    append_json_newline(out, indent, depth + 1);
    append_json_string(out, e.key);
    out += indent > 0 ? ": " : ":";
    switch (e.kind) {
    case Record::Kind::value:
      write_cell(out, e.cell);
      break;
    case Record::Kind::values:
      write_array(out, e.items, indent, depth + 1, [&](const Cell& c) { write_cell(out, c); });
      break;
    case Record::Kind::object:
      write_json(out, e.records->front(), indent, depth + 1);
      break;
    case Record::Kind::list:
      write_array(out, *e.records, indent, depth + 1,
                  [&](const Record& r) { write_json(out, r, indent, depth + 2); });
      break;
    }
  }
  if (any) {
    append_json_newline(out, indent, depth);
  }
  out += '}';
}

std::string json_text(const Record& record, int indent) {
  std::string out;
  write_json(out, record, indent, 0);
  return out;
}

} // namespace kvcalc::report
