#include <kvcalc/report/record.hpp>

#include <kvcalc/core/error.hpp>

namespace kvcalc::report {

Record& Record::value(std::string key, std::string header, Cell cell, Shown shown) {
  Entry e;
  e.key = std::move(key);
  e.header = std::move(header);
  e.shown = shown;
  e.cell = std::move(cell);
  m_entries.push_back(std::move(e));
  return *this;
}

Record& Record::value(std::string key, Cell cell, Shown shown) {
  return value(std::move(key), "", std::move(cell), shown);
}

Record& Record::values(std::string key, std::vector<Cell> items, Shown shown) {
  Entry e;
  e.key = std::move(key);
  e.shown = shown;
  e.kind = Kind::values;
  e.items = std::move(items);
  m_entries.push_back(std::move(e));
  return *this;
}

Record& Record::strings(std::string key, const std::vector<std::string>& items, Shown shown) {
  std::vector<Cell> cells;
  for (const auto& s : items) {
    cells.push_back(Cell::text(s));
  }
  return values(std::move(key), std::move(cells), shown);
}

Record& Record::object(std::string key, Shown shown) {
  Entry e;
  e.key = std::move(key);
  e.shown = shown;
  e.kind = Kind::object;
  e.records.emplace_back();
  m_entries.push_back(std::move(e));
  return m_entries.back().records.front();
}

std::vector<Record>& Record::list(std::string key, Shown shown) {
  Entry e;
  e.key = std::move(key);
  e.shown = shown;
  e.kind = Kind::list;
  m_entries.push_back(std::move(e));
  return m_entries.back().records;
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
        return e.records.front().column(key.substr(dot + 1));
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
  return at(key).records;
}

namespace {

Json cell_json(const Cell& c) {
  if (const auto* s = std::get_if<std::string>(&c.value)) {
    return Json(*s);
  }
  if (const auto* u = std::get_if<std::uint64_t>(&c.value)) {
    return Json(*u);
  }
  if (const auto* d = std::get_if<double>(&c.value)) {
    return Json(*d);
  }
  if (const auto* b = std::get_if<bool>(&c.value)) {
    return Json(*b);
  }
  return Json();
}

} // namespace

Json Record::json() const {
  Json j = Json::object();
  for (const auto& e : m_entries) {
    if (!e.shown.json) {
      continue;
    }
    switch (e.kind) {
    case Kind::value:
      j[e.key] = cell_json(e.cell);
      break;
    case Kind::values: {
      Json items = Json::array();
      for (const auto& c : e.items) {
        items.push_back(cell_json(c));
      }
      j[e.key] = std::move(items);
      break;
    }
    case Kind::object:
      j[e.key] = e.records.front().json();
      break;
    case Kind::list:
      j[e.key] = json_of(e.records);
      break;
    }
  }
  return j;
}

std::vector<Record> joined(const Record& parent, std::string_view key) {
  std::vector<Record> out;
  for (const Record& child : parent.records(key)) {
    Record row = child;
    for (const auto& e : parent.entries()) {
      if (e.key != key && !child.find(e.key)) {
        row.m_entries.push_back(e);
      }
    }
    out.push_back(std::move(row));
  }
  return out;
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

Json json_of(const std::vector<Record>& rows) {
  Json list = Json::array();
  for (const auto& r : rows) {
    list.push_back(r.json());
  }
  return list;
}

Table table_of(const std::vector<const Record*>& rows, const std::vector<ColumnRef>& columns) {
  Table t;
  for (const auto& c : columns) {
    std::string header = c.header;
    for (const Record* r : rows) {
      const Record::Entry* e = r->column(c.key);
      if (header.empty() && e) {
        header = e->header;
        break;
      }
    }
    t.columns.push_back({header, c.name.empty() ? c.key : c.name});
  }
  for (const Record* r : rows) {
    std::vector<Cell> row;
    for (const auto& c : columns) {
      const Record::Entry* e = r->column(c.key);
      row.push_back(e ? e->cell : Cell::empty());
    }
    t.rows.push_back(std::move(row));
  }
  return t;
}

Table table_of(const std::vector<Record>& rows, const std::vector<ColumnRef>& columns) {
  std::vector<const Record*> pointers;
  for (const auto& r : rows) {
    pointers.push_back(&r);
  }
  return table_of(pointers, columns);
}

} // namespace kvcalc::report
