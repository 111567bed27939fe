#include <kvcalc/report/output.hpp>

#include <kvcalc/core/error.hpp>
#include <kvcalc/core/version.hpp>

namespace kvcalc::report {

namespace {

/// Text is handed on in blocks of about this size.
constexpr std::size_t k_block_bytes = 64 * 1024;
constexpr int k_indent = 2;

} // namespace

Output::Output(Format format, ByteUnits units, std::string_view command, Writer write)
    : m_format(format), m_units(units), m_write(std::move(write)) {
  if (m_format == Format::json) {
    m_buffer += "{";
    json_key("kvcalc");
    Json head = Json::object();
    head["version"] = std::string(version());
    head["schema"] = k_json_schema;
    head.write(m_buffer, k_indent, 1);
    field("command", Json(command));
  }
}

void Output::json_key(std::string_view key) {
  if (m_json_fields++ > 0) {
    m_buffer += ',';
  }
  append_json_newline(m_buffer, k_indent, 1);
  append_json_string(m_buffer, key);
  m_buffer += ": ";
}

void Output::field(std::string_view key, const Json& value) {
  if (m_format != Format::json) {
    return;
  }
  json_key(key);
  value.write(m_buffer, k_indent, 1);
  flush_if_full();
}

void Output::field(std::string_view key, const Record& object) {
  if (m_format != Format::json) {
    return;
  }
  json_key(key);
  write_json(m_buffer, object, k_indent, 1);
  flush_if_full();
}

void Output::begin_list(std::string_view key) {
  if (m_list_open) {
    throw Error("internal error: a JSON list begins inside another");
  }
  m_list_open = true;
  m_list_items = 0;
  if (m_format == Format::json) {
    json_key(key);
    m_buffer += '[';
  }
}

void Output::end_list() {
  if (!m_list_open) {
    throw Error("internal error: a JSON list ends that did not begin");
  }
  m_list_open = false;
  if (m_format == Format::json) {
    if (m_list_items > 0) {
      append_json_newline(m_buffer, k_indent, 1);
    }
    m_buffer += ']';
  }
}

Output::TableId Output::begin_table(std::string title, std::vector<ColumnRef> columns,
                                    std::string joined) {
  TableId id = m_tables.size();
  TextTable& t = m_tables.emplace_back(columns.size());
  t.title = std::move(title);
  if (for_people()) {
    Headers headers(columns);
    m_growing.push_back({id, std::move(columns), std::move(joined), std::move(headers)});
  }
  return id;
}

void Output::table(std::string title, const std::vector<const Record*>& records,
                   const std::vector<ColumnRef>& columns, std::string_view joined) {
  if (!for_people()) {
    return;
  }
  GrowingTable g{m_tables.size(), columns, std::string(joined), Headers(columns)};
  m_tables.emplace_back(columns.size()).title = std::move(title);
  for (const Record* r : records) {
    add_rows(g, *r);
  }
  name_columns(g);
}

void Output::add_rows(GrowingTable& g, const Record& record) {
  TextTable& t = m_tables[g.table];
  for_each_row(record, g.joined, [&](const Row& row) {
    g.headers.see(row, g.columns);
    for (std::size_t c = 0; c < g.columns.size(); ++c) {
      const Record::Entry* e = row.column(g.columns[c].key);
      t.add_cell(c, e ? e->cell : Cell::empty(), m_units);
    }
  });
}

void Output::name_columns(const GrowingTable& g) {
  std::vector<Column> named = g.headers.columns(g.columns);
  for (std::size_t c = 0; c < named.size(); ++c) {
    m_tables[g.table].headers[c] = std::move(named[c].header);
  }
}

void Output::table(const Table& table) {
  if (for_people()) {
    m_tables.push_back(text_table(table, m_units));
  }
}

void Output::note(TableId table, std::string line) {
  if (for_people()) {
    m_tables.at(table).notes.push_back(std::move(line));
  }
}

void Output::text_after(std::string line) {
  if (for_people()) {
    m_text_after.push_back(std::move(line));
  }
}

void Output::csv_view(std::vector<ColumnRef> columns, std::string joined) {
  if (m_format != Format::csv) {
    return;
  }
  if (m_csv_columns) {
    throw Error("internal error: a second CSV view");
  }
  for (std::size_t c = 0; c < columns.size(); ++c) {
    m_buffer += c ? "," : "";
    m_buffer += columns[c].name.empty() ? columns[c].key : columns[c].name;
  }
  m_buffer += '\n';
  m_csv_columns = std::move(columns);
  m_csv_joined = std::move(joined);
}

void Output::csv_table(const Table& table) {
  if (m_format != Format::csv) {
    return;
  }
  if (m_csv_columns) {
    throw Error("internal error: a second CSV view");
  }
  m_csv_columns.emplace();
  m_buffer += render_csv(table);
}

void Output::item(const Record& record) {
  switch (m_format) {
  case Format::json:
    if (!m_list_open) {
      throw Error("internal error: a JSON item outside a list");
    }
    m_buffer += m_list_items > 0 ? "," : "";
    append_json_newline(m_buffer, k_indent, 2);
    write_json(m_buffer, record, k_indent, 2);
    ++m_list_items;
    break;
  case Format::csv:
    if (m_csv_columns) {
      for_each_row(record, m_csv_joined, [&](const Row& row) {
        for (std::size_t c = 0; c < m_csv_columns->size(); ++c) {
          m_buffer += c ? "," : "";
          if (const Record::Entry* e = row.column((*m_csv_columns)[c].key)) {
            append_csv_field(m_buffer, e->cell);
          }
        }
        m_buffer += '\n';
      });
    }
    break;
  case Format::table:
  case Format::md:
    for (GrowingTable& g : m_growing) {
      add_rows(g, record);
    }
    break;
  }
  flush_if_full();
}

void Output::flush_if_full() {
  if (m_streaming && m_buffer.size() >= k_block_bytes) {
    m_write(m_buffer);
    m_buffer.clear();
  }
}

void Output::finish(const std::vector<std::string>& warnings) {
  if (m_list_open) {
    throw Error("internal error: a JSON list left open");
  }
  switch (m_format) {
  case Format::json: {
    Json said = Json::array();
    for (const auto& w : warnings) {
      said.push_back(w);
    }
    field("warnings", said);
    append_json_newline(m_buffer, k_indent, 0);
    m_buffer += "}\n";
    break;
  }
  case Format::csv:
    break;
  case Format::table:
  case Format::md:
    for (const GrowingTable& g : m_growing) {
      name_columns(g);
    }
    if (m_format == Format::table) {
      m_buffer += render_text(m_tables);
      for (const auto& line : m_text_after) {
        m_buffer += line + '\n';
      }
    } else {
      m_buffer += render_markdown(m_tables);
      if (!m_text_after.empty()) {
        m_buffer += "\n```\n";
        for (const auto& line : m_text_after) {
          m_buffer += line + '\n';
        }
        m_buffer += "```\n";
      }
    }
    break;
  }
  if (!m_buffer.empty()) {
    m_write(m_buffer);
    m_buffer.clear();
  }
}

} // namespace kvcalc::report
