#include <catch2/catch.hpp>

#include <algorithm>

#include <kvcalc/core/version.hpp>
#include <kvcalc/report/json.hpp>
#include <kvcalc/report/output.hpp>
#include <kvcalc/report/record.hpp>
#include <kvcalc/report/svg.hpp>
#include <kvcalc/report/table.hpp>

using namespace kvcalc;
using namespace kvcalc::report;

TEST_CASE("human bytes keep the unit and four significant digits", "[report]") {
  CHECK(human_bytes(512, ByteUnits::iec) == "512 B");
  CHECK(human_bytes(287834112, ByteUnits::iec) == "274.5 MiB");
  CHECK(human_bytes(287834112, ByteUnits::si) == "287.8 MB");
  CHECK(human_bytes(343597383680ULL, ByteUnits::iec) == "320.0 GiB");
  CHECK(human_bytes(343597383680ULL, ByteUnits::si) == "343.6 GB");
  // The LLaMA-7B cross-check: 544 tokens x 524,288 B = 285.2 MB.
  CHECK(human_bytes(544ULL * 524288ULL, ByteUnits::si) == "285.2 MB");
  CHECK(human_bytes(UINT64_MAX, ByteUnits::iec) == "16.00 EiB");
}

TEST_CASE("cells format by unit", "[report]") {
  CHECK(format_cell(Cell::bytes_exact(70272), ByteUnits::iec) == "70,272 B");
  CHECK(format_cell(Cell::count(131072), ByteUnits::iec) == "131,072");
  CHECK(format_cell(Cell::percent(-0.875), ByteUnits::iec) == "-87.5%");
  CHECK(format_cell(Cell::percent(0.25), ByteUnits::iec) == "+25.0%");
  CHECK(format_cell(Cell::ratio(28.444), ByteUnits::iec) == "28.4x");
  // An engine's concurrency is cut, not rounded: never a whole sequence more than it holds.
  CHECK(format_cell(Cell::concurrency(29.996), ByteUnits::iec) == "29.99x");
  CHECK(format_cell(Cell::concurrency(126.9), ByteUnits::iec) == "126.90x");
  CHECK(format_cell(Cell::concurrency(30.0), ByteUnits::iec) == "30.00x");
  CHECK(format_cell(Cell::concurrency(0.859), ByteUnits::iec) == "0.85x");
  CHECK(format_cell(Cell::empty(), ByteUnits::iec) == "-");
  // An estimated byte count shows the whole bytes below it, and never wraps.
  CHECK(format_cell(Cell::byte_estimate(511.9), ByteUnits::iec) == "511 B");
  CHECK(format_cell(Cell::byte_estimate(1.5 * 1024 * 1024), ByteUnits::iec) == "1.500 MiB");
  CHECK(format_cell(Cell::byte_estimate(-1), ByteUnits::iec) == "0 B");
  CHECK(format_cell(Cell::byte_estimate(1e300), ByteUnits::iec) == "16.00 EiB");
}

TEST_CASE("text tables align numbers right and text left", "[report]") {
  Table t;
  t.title = "title";
  t.columns = {{"name", "name"}, {"bytes", "bytes"}};
  t.rows = {{Cell::text("a"), Cell::bytes_exact(5)},
            {Cell::text("longer"), Cell::bytes_exact(70272)}};
  CHECK(render_text({text_table(t, ByteUnits::iec)}) == "title\n"
                                                        "  name       bytes\n"
                                                        "  a            5 B\n"
                                                        "  longer  70,272 B\n");
  CHECK(render_markdown({text_table(t, ByteUnits::iec)}) == "**title**\n\n"
                                                            "| name | bytes |\n"
                                                            "| --- | ---: |\n"
                                                            "| a | 5 B |\n"
                                                            "| longer | 70,272 B |\n");
}

TEST_CASE("CSV carries exact raw values and quotes when needed", "[report]") {
  Table t;
  t.columns = {{"name", "name"}, {"kv", "kv_bytes"}, {"r", "ratio"}};
  t.rows = {{Cell::text("a,b"), Cell::bytes(18446744073709551615ULL), Cell::ratio(0.125)}};
  CHECK(render_csv(t) == "name,kv_bytes,ratio\n\"a,b\",18446744073709551615,0.125\n");
}

TEST_CASE("JSON keeps key order and exact integers", "[report]") {
  Json j = Json::object();
  j["z"] = 1;
  j["a"] = std::uint64_t{18446744073709551615ULL};
  j["s"] = "quote \" and \\ and \n";
  j["list"].push_back(0.5);
  j["list"].push_back(Json());
  CHECK(j.dump(0) ==
        R"({"z":1,"a":18446744073709551615,"s":"quote \" and \\ and \n","list":[0.5,null]})");
  CHECK(Json::array().dump() == "[]");
}

namespace {

/// Two requests' figures as a command describes them: values for every output, a nested
/// object, a tables-only label and a JSON-only list.
std::vector<Record> two_runs() {
  std::vector<Record> rows;
  for (std::uint64_t n : {3ULL, 5ULL}) {
    Record r;
    r.value("model", "model", Cell::text(n == 3 ? "a" : "b"));
    r.value("label", "label", Cell::text("run " + std::to_string(n)), k_tables_only);
    r.strings("aliases", {"x", "y"});
    Record& ttft = r.object("ttft_s");
    ttft.value("p50", "p50", Cell::seconds(0.5 * static_cast<double>(n)));
    ttft.value("count", Cell::count(n));
    r.value("done", "done", n == 3 ? Cell::count(n) : Cell::empty().shown_as("does not fit"));
    rows.push_back(std::move(r));
  }
  return rows;
}

} // namespace

TEST_CASE("a record's JSON keeps entry order, nesting and what only JSON shows", "[report]") {
  std::vector<Record> rows = two_runs();
  CHECK(json_text(rows[0], 0) ==
        R"({"model":"a","aliases":["x","y"],"ttft_s":{"p50":1.5,"count":3},"done":3})");
  // Where a value is missing JSON says null, not the "does not fit" people read.
  CHECK(json_text(rows[1], 0) ==
        R"({"model":"b","aliases":["x","y"],"ttft_s":{"p50":2.5,"count":5},"done":null})");
}

TEST_CASE("a nested record stays fillable while its parent grows", "[report]") {
  Record r;
  auto& contexts = r.list("contexts");
  Record& totals = r.object("totals");
  for (std::uint64_t i = 0; i < 100; ++i) {
    // Entries of the parent in between: the nested list and object must not move.
    r.value("column_" + std::to_string(i), Cell::count(i), k_tables_only);
    contexts.emplace_back().value("tokens", Cell::count(i));
    totals.value("t" + std::to_string(i), Cell::count(i));
  }
  CHECK(r.records("contexts").size() == 100);
  CHECK(r.records("totals").front().entries().size() == 100);
  CHECK(json_text(r, 0).starts_with(R"({"contexts":[{"tokens":0},{"tokens":1},)"));
}

TEST_CASE("a view of records: dotted keys reach nested values, CSV names override keys",
          "[report]") {
  std::vector<Record> rows = two_runs();
  Table t = table_of(rows, {{"model"},
                            {"label"},
                            {"ttft_s.p50", "TTFT p50", "ttft_p50_s"},
                            {"aliases"},
                            {"done"},
                            {"missing"}});
  REQUIRE(t.columns.size() == 6);
  CHECK(t.columns[2].header == "TTFT p50");
  CHECK(t.columns[2].key == "ttft_p50_s");
  CHECK(t.columns[1].header == "label");
  // A JSON-only list is no column: its cells are empty, as are those of a key no row has.
  CHECK(std::holds_alternative<std::monostate>(t.rows[0][3].value));
  CHECK(std::holds_alternative<std::monostate>(t.rows[1][5].value));
  CHECK(render_csv(t) == "model,label,ttft_p50_s,aliases,done,missing\n"
                         "a,run 3,1.5,,3,\n"
                         "b,run 5,2.5,,,\n");
  std::string text = render_text({text_table(t, ByteUnits::iec)});
  CHECK(text.find("does not fit") != std::string::npos);
  CHECK(text.find("2.500 s") != std::string::npos);
}

TEST_CASE("joined rows: the child's values first, then the parent's it does not name", "[report]") {
  Record kernel;
  kernel.value("name", Cell::text("k"));
  kernel.value("time_s", Cell::seconds(3));
  kernel.object("config").value("heads", Cell::count(16));
  auto& phases = kernel.list("phases");
  for (double t : {1.0, 2.0}) {
    Record p;
    p.value("time_s", Cell::seconds(t));
    phases.push_back(std::move(p));
  }
  // A key the child holds in any kind hides the parent's, as JSON-only as it may be.
  kernel.value("note", "note", Cell::text("kernel"));
  phases.front().value("note", Cell::text("phase"), k_json_only);
  std::vector<Record> kernels;
  kernels.push_back(std::move(kernel));
  Table flat =
      table_of(kernels, {{"name"}, {"time_s"}, {"config.heads", "", "heads"}, {"note"}}, "phases");
  REQUIRE(flat.rows.size() == 2);
  // The phase's own time, not the kernel's; nested parent objects stay reachable.
  CHECK(render_csv(flat) == "name,time_s,heads,note\nk,1,16,\nk,2,16,kernel\n");
  // A record without the list gives no row.
  std::vector<Record> bare(1);
  bare.front().value("name", Cell::text("b"));
  CHECK(table_of(bare, {{"name"}}, "phases").rows.empty());
}

TEST_CASE("a record on its side: a row per field that holds a value", "[report]") {
  Record probes;
  probes.value("read", "read", Cell::bytes_per_s(1e11));
  probes.value("bf16", "FMA bf16", Cell::empty());
  probes.object("gemm").value("fp32", "GEMM fp32", Cell::flops(1e12));
  Table t = fields_of(probes, {"read", "bf16", "gemm.fp32", "gemm.fp8"}, {"probe", "probe"},
                      {"rate", "rate"});
  REQUIRE(t.rows.size() == 2);
  CHECK(format_cell(t.rows[0][0], ByteUnits::iec) == "read");
  CHECK(format_cell(t.rows[1][0], ByteUnits::iec) == "GEMM fp32");
  CHECK(format_cell(t.rows[1][1], ByteUnits::iec) == "1.000 TFLOP/s");
}

TEST_CASE("the SVG roofline has axes with units, ceilings and one marker per point",
          "[report][svg]") {
  RooflineChart c;
  c.title = "Roofline: H200";
  c.bandwidth_bytes_per_s = 4.8e12;
  c.ceilings = {{"bf16", 989.4e12}, {"fp8", 1978.9e12}};
  c.points = {{228.3, 900e12, "attention.core", PointStyle::absorbed},
              {4096, 950e12, "attention.core", PointStyle::naive},
              {1.0, 4.8e12, "norms <&>", PointStyle::other}};
  LineChart sweep;
  sweep.title = "Throughput against batch";
  sweep.x_label = "batch (sequences)";
  sweep.y_label = "tokens/s";
  sweep.series = {{"absorbed", {1, 2, 4}, {100, 190, 350}}};
  std::string svg = render_svg(c, {sweep});
  CHECK(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
  CHECK(svg.ends_with("</svg>\n"));
  CHECK(svg.find("arithmetic intensity (FLOP/byte)") != std::string::npos);
  CHECK(svg.find("attainable and achieved FLOP/s") != std::string::npos);
  CHECK(svg.find("bf16 989.4 TFLOP/s (ridge 206 FLOP/B)") != std::string::npos);
  CHECK(svg.find("memory 4.800 TB/s") != std::string::npos);
  CHECK(svg.find("norms &lt;&amp;&gt;") != std::string::npos);
  CHECK(svg.find("batch (sequences)") != std::string::npos);
  // 2 point markers + 1 square + 3 legend markers (circle, square, circle) + 3 line points.
  auto count = [&](const std::string& needle) {
    std::size_t n = 0;
    for (auto at = svg.find(needle); at != std::string::npos; at = svg.find(needle, at + 1)) {
      ++n;
    }
    return n;
  };
  CHECK(count("<circle") == 2 + 2 + 3);
  CHECK(count("<rect x=") == 1 + 1 + 2); // naive point, legend square, two panel frames
}

TEST_CASE("linear line charts: round ticks from 0, units on the ticks", "[report][svg]") {
  LineChart occupancy;
  occupancy.title = "KV-cache occupancy";
  occupancy.x_label = "time (s)";
  occupancy.y_label = "KV blocks in use (% of the pool)";
  occupancy.x_scale = AxisScale::linear;
  occupancy.y_scale = AxisScale::linear;
  occupancy.y_unit = "%";
  occupancy.markers = false;
  occupancy.series = {{"deepseek-v3", {0, 30, 61}, {0, 45.5, 97}}};
  std::string svg = render_svg({occupancy});
  CHECK(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
  CHECK(svg.find(">100%</text>") != std::string::npos); // 0, 20, …, 100 %
  CHECK(svg.find(">20%</text>") != std::string::npos);
  CHECK(svg.find(">80</text>") != std::string::npos); // 0, 20, …, 80 s
  CHECK(svg.find("<circle") == std::string::npos);
  CHECK(svg.find("deepseek-v3") != std::string::npos);
}

TEST_CASE("roofline labels: no two boxes overlap, none covers an obstacle, all inside the frame",
          "[report][svg][labels]") {
  // Twelve ops bunched on the bandwidth slope as a decode step puts them, a ceiling line and
  // its text across them.
  std::vector<std::pair<double, double>> anchors;
  std::vector<std::string> texts;
  for (int i = 0; i < 12; ++i) {
    anchors.emplace_back(400 + 6 * i, 200 - 5 * i);
    texts.push_back("attention.op_" + std::to_string(i));
  }
  std::vector<LabelBox> obstacles{{430, 150, 280, 4}, {560, 130, 150, 13}};
  for (const auto& [x, y] : anchors) {
    obstacles.push_back({x - 5, y - 5, 10, 10});
  }
  LabelBox frame{120, 50, 590, 410};
  std::vector<PlacedLabel> placed = place_labels(anchors, texts, obstacles, frame, 10);
  REQUIRE(placed.size() == anchors.size());
  for (std::size_t i = 0; i < placed.size(); ++i) {
    const LabelBox& b = placed[i].box;
    INFO("label " << i);
    CHECK(b.w == Approx(0.6 * 10 * static_cast<double>(texts[i].size())));
    CHECK(b.x >= frame.x);
    CHECK(b.x + b.w <= frame.x + frame.w);
    CHECK(b.y >= frame.y);
    CHECK(b.y + b.h <= frame.y + frame.h);
    for (const LabelBox& o : obstacles) {
      CHECK_FALSE(b.overlaps(o));
    }
    for (std::size_t j = 0; j < i; ++j) {
      CHECK_FALSE(b.overlaps(placed[j].box));
    }
  }
  // A lone point's label sits right beside it, with no leader line.
  std::vector<PlacedLabel> lone = place_labels({{300, 300}}, {"mlp"}, {}, frame, 10);
  CHECK_FALSE(lone[0].leader);
  CHECK(lone[0].box.x == Approx(307));
}

namespace {

/// What an Output writes, block by block.
struct Written {
  std::vector<std::string> blocks;
  Output::Writer writer() {
    return [this](std::string_view text) { blocks.emplace_back(text); };
  }
  [[nodiscard]] std::string all() const {
    std::string text;
    for (const auto& b : blocks) {
      text += b;
    }
    return text;
  }
};

} // namespace

TEST_CASE("JSON output: the header, fields and list in order, as Json::dump lays them out",
          "[report][output]") {
  Written w;
  Output out(Format::json, ByteUnits::iec, "roofline", w.writer());
  out.field("baseline", Json("a"));
  out.begin_list("models");
  for (Record& r : two_runs()) {
    out.item(r);
  }
  out.end_list();
  out.begin_list("empty");
  out.end_list();
  out.finish({"careful"});
  // The same document built as one tree.
  Json tree = Json::object();
  tree["kvcalc"]["version"] = std::string(version());
  tree["kvcalc"]["schema"] = k_json_schema;
  tree["command"] = "roofline";
  tree["baseline"] = "a";
  for (std::uint64_t n : {3ULL, 5ULL}) {
    Json run = Json::object();
    run["model"] = n == 3 ? "a" : "b";
    run["aliases"].push_back("x");
    run["aliases"].push_back("y");
    run["ttft_s"]["p50"] = 0.5 * static_cast<double>(n);
    run["ttft_s"]["count"] = n;
    run["done"] = n == 3 ? Json(n) : Json();
    tree["models"].push_back(std::move(run));
  }
  tree["empty"] = Json::array();
  tree["warnings"].push_back("careful");
  CHECK(w.all() == tree.dump(2) + "\n");
  // A small document leaves in one block, at the end.
  CHECK(w.blocks.size() == 1);
}

TEST_CASE("CSV output: rows leave in blocks once the result stands, joined on a list",
          "[report][output]") {
  Written w;
  Output out(Format::csv, ByteUnits::iec, "footprint", w.writer());
  out.csv_view({{"model"}, {"tokens", "", "context_tokens"}}, "contexts");
  out.begin_list("models");
  const std::uint64_t rows = 20000;
  Record model;
  model.value("model", "model", Cell::text("m"));
  auto& contexts = model.list("contexts");
  for (std::uint64_t i = 0; i < rows; ++i) {
    contexts.emplace_back().value("tokens", Cell::count(i));
  }
  out.item(model);
  // About 8 bytes a row, well past one block: still kept, as the command has not said its
  // result stands; a failure now would write nothing.
  CHECK(w.blocks.empty());
  out.stream();
  out.item(model);
  CHECK_FALSE(w.blocks.empty());
  out.end_list();
  out.finish({});
  std::string text = w.all();
  CHECK(text.starts_with("model,context_tokens\nm,0\nm,1\n"));
  CHECK(text.ends_with("m,19999\n"));
  CHECK(static_cast<std::uint64_t>(std::count(text.begin(), text.end(), '\n')) == 2 * rows + 1);
}

TEST_CASE("table output: a growing table takes its headers from the first row holding a key, "
          "whole tables and text follow in order",
          "[report][output]") {
  Written w;
  Output out(Format::table, ByteUnits::iec, "simulate", w.writer());
  Output::TableId t = out.begin_table("Runs", {{"model"}, {"ttft_s.p50", "TTFT"}, {"done"}});
  out.begin_list("runs");
  for (Record& r : two_runs()) {
    out.item(r);
  }
  out.end_list();
  out.note(t, "a note");
  Table after;
  after.columns = {{"x", "x"}};
  after.rows = {{Cell::count(1234)}};
  out.table(after);
  out.text_after("explained");
  out.finish({"said elsewhere"});
  CHECK(w.all() == "Runs\n"
                   "  model     TTFT          done\n"
                   "  a      1.500 s             3\n"
                   "  b      2.500 s  does not fit\n"
                   "a note\n"
                   "\n"
                   "      x\n"
                   "  1,234\n"
                   "explained\n");
}

TEST_CASE("Markdown output: the same tables, and text after them fenced", "[report][output]") {
  Written w;
  Output out(Format::md, ByteUnits::iec, "footprint", w.writer());
  Output::TableId t = out.begin_table("", {{"model"}, {"done"}});
  out.begin_list("runs");
  for (Record& r : two_runs()) {
    out.item(r);
  }
  out.end_list();
  out.note(t, "a | b");
  out.text_after("line");
  out.finish({});
  CHECK(w.all() == "| model | done |\n"
                   "| --- | ---: |\n"
                   "| a | 3 |\n"
                   "| b | does not fit |\n"
                   "\n"
                   "a | b  \n"
                   "\n```\nline\n```\n");
}

TEST_CASE("a column's header comes from the first row that heads it, not from one that only "
          "says why it has no figure",
          "[report]") {
  std::vector<Record> rows(2);
  rows[0].value("time_s", Cell::empty().shown_as("n/a"));
  rows[1].value("time_s", "step", Cell::seconds(1));
  Table t = table_of(rows, {{"time_s"}});
  CHECK(t.columns[0].header == "step");
  CHECK(format_cell(t.rows[0][0], ByteUnits::iec) == "n/a");
}
