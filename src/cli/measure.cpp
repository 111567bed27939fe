// `measure`: probes and MLA decode kernels on this machine; writes a device profile.

#include <algorithm>
#include <functional>
#include <memory>
#include <optional>
#include <ostream>
#include <unistd.h>

#include <fmt/format.h>

#include <kvcalc/core/error.hpp>
#include <kvcalc/core/file.hpp>
#include <kvcalc/core/spell.hpp>
#include <kvcalc/core/units.hpp>
#include <kvcalc/measure/measure.hpp>
#include <kvcalc/report/record.hpp>

#include "command.hpp"

using namespace kvcalc::measure;

namespace kvcalc::cli {

namespace {

struct MeasureArgs {
  std::string backend = "auto";
  std::string profile; ///< the device profile YAML
  std::string heads;   ///< empty: the backend's defaults
  std::string batch;
  std::string context;
  u64 query = 1;
  bool quick = false;
  OutputOptions output;
};

MeasureOptions measure_options(const MeasureArgs& args, std::string_view backend,
                               std::ostream& err) {
  MeasureOptions o;
  o.quick = args.quick;
  // Defaults sized to the backend: a CPU takes seconds for what a GPU does in microseconds,
  // and on a GPU the memory-bound (16 heads) and compute-bound (128 heads) points.
  bool gpu = backend == "cuda";
  std::string heads = gpu ? (args.quick ? "16" : "16,128") : (args.quick ? "1,8" : "1,16");
  std::string batch = gpu ? (args.quick ? "32" : "128") : (args.quick ? "2" : "4");
  std::string context = gpu ? (args.quick ? "2k" : "4k") : (args.quick ? "1k" : "2k");
  o.heads = parse_count_list(args.heads.empty() ? heads : args.heads, "--heads");
  o.batches = parse_count_list(args.batch.empty() ? batch : args.batch, "--batch");
  o.contexts = parse_count_list(args.context.empty() ? context : args.context, "--context");
  o.query = args.query;
  if (isatty(2) != 0) {
    o.progress = [&err](const std::string& what) { err << "kvcalc: " << what << '\n'; };
  }
  return o;
}

/// How far a figure's runs disagree: "3.1%", "41.0% !" beyond the bound, "1 run"; a number in
/// CSV.
Cell spread_cell(const Spread& s) {
  Cell c = Cell::share(relative_spread(s));
  if (s.runs < 2) {
    return c.shown_as("1 run");
  }
  return disagrees(s) ? c.shown_as(fmt::format("{:.1f}% !", relative_spread(s) * 100)) : c;
}

/// A figure's runs in JSON: {median, min, max, runs, spread, disagree}.
void describe_spread(Record& into, const Spread& s, const std::function<Cell(double)>& cell) {
  into.value("median", cell(s.median));
  into.value("min", cell(s.min));
  into.value("max", cell(s.max));
  into.value("runs", Cell::count(s.runs));
  into.value("spread", Cell::number(relative_spread(s)));
  into.value("disagree", Cell::flag(disagrees(s)));
}

Record describe_probes(const ProbeResults& p) {
  Record r;
  r.value("bandwidth_bytes_per_s", Cell::bytes_per_s(p.bandwidth_bytes_per_s));
  r.value("read_bytes_per_s", Cell::bytes_per_s(p.read_bytes_per_s.median));
  r.value("copy_bytes_per_s", Cell::bytes_per_s(p.copy_bytes_per_s.median));
  r.value("triad_bytes_per_s", Cell::bytes_per_s(p.triad_bytes_per_s.median));
  r.value("fma_fp32_flops_per_s", Cell::flops(p.fma_flops_per_s.median));
  r.value("fma_bf16_flops_per_s",
          p.fma_bf16_flops_per_s ? Cell::flops(p.fma_bf16_flops_per_s->median) : Cell::empty());
  describe_peak_flops(r.object("flops_per_s"), p.gemm_flops_per_s(), "GEMM ", k_everywhere);
  auto& levels = r.list("memory_levels");
  for (const MemoryLevel& level : p.levels) {
    Record& l = levels.emplace_back();
    l.value("name", Cell::text(level.name));
    l.value("capacity_bytes",
            level.capacity_bytes > 0 ? Cell::byte_estimate(level.capacity_bytes) : Cell::empty());
    l.value("shared", Cell::flag(level.shared));
    l.value("working_set_bytes", Cell::byte_estimate(level.working_set_bytes));
    l.value("read_bytes_per_s", Cell::bytes_per_s(level.read_bytes_per_s.median));
  }
  Record& spreads = r.object("spread");
  for (const auto& [key, figure] : p.figures()) {
    bool bytes = key.ends_with("bytes_per_s");
    describe_spread(spreads.object(key), figure,
                    [bytes](double v) { return bytes ? Cell::bytes_per_s(v) : Cell::flops(v); });
  }
  return r;
}

/// The probe table's rows: each figure, its median and how far its runs disagree.
std::vector<Record> probe_rows(const ProbeResults& p) {
  std::vector<Record> rows;
  auto row = [&](const std::string& label, Cell rate, const std::optional<Spread>& s) {
    Record& r = rows.emplace_back();
    r.value("probe", "probe", Cell::text(label));
    r.value("rate", "rate (median)", std::move(rate));
    r.value("spread", "spread", s ? spread_cell(*s) : Cell::empty());
  };
  // A level by the array its probe read, and what the level holds.
  auto format_bytes = [](double v) {
    return human_bytes(static_cast<std::uint64_t>(v), ByteUnits::iec);
  };
  for (std::size_t i = 0; i + 1 < p.levels.size(); ++i) {
    const MemoryLevel& level = p.levels[i];
    row(fmt::format("read {} ({} of {}{})", level.name, format_bytes(level.working_set_bytes),
                    format_bytes(level.capacity_bytes), level.shared ? "" : ", private"),
        Cell::bytes_per_s(level.read_bytes_per_s.median), level.read_bytes_per_s);
  }
  row(p.levels.empty() ? std::string("read")
                       : fmt::format("read {} ({})", p.levels.back().name,
                                     format_bytes(p.levels.back().working_set_bytes)),
      Cell::bytes_per_s(p.read_bytes_per_s.median), p.read_bytes_per_s);
  row("copy (read + write)", Cell::bytes_per_s(p.copy_bytes_per_s.median), p.copy_bytes_per_s);
  row("triad (2 reads + write)", Cell::bytes_per_s(p.triad_bytes_per_s.median),
      p.triad_bytes_per_s);
  row("bandwidth ceiling (read)", Cell::bytes_per_s(p.bandwidth_bytes_per_s), std::nullopt);
  row("FMA loop fp32", Cell::flops(p.fma_flops_per_s.median), p.fma_flops_per_s);
  if (p.fma_bf16_flops_per_s) {
    row("FMA loop bf16 pairs", Cell::flops(p.fma_bf16_flops_per_s->median), p.fma_bf16_flops_per_s);
  }
  for (const auto& [label, rate] :
       {std::pair{"GEMM fp32", p.gemm.fp32},
        std::pair{"GEMM fp32, the naive kernel's shape", p.kernel_gemm_fp32},
        std::pair{"GEMM fp16", p.gemm.fp16}, std::pair{"GEMM bf16", p.gemm.bf16}}) {
    if (rate) {
      row(label, Cell::flops(rate->median), rate);
    }
  }
  for (const RowsRate& page : p.absorbed_page_flops_per_s) {
    row(fmt::format("absorbed kernel's page, {} {} (cached)", page.rows,
                    page.rows == 1 ? "row" : "rows"),
        Cell::flops(page.flops_per_s.median), page.flops_per_s);
  }
  return rows;
}

/// The figures whose runs disagree beyond the bound, by name.
std::vector<std::string> disagreeing(const MeasureResult& m) {
  std::vector<std::string> out;
  for (const auto& [key, figure] : m.probes.figures()) {
    if (disagrees(figure)) {
      out.push_back(fmt::format("{} {:.0f}%", key, relative_spread(figure) * 100));
    }
  }
  for (const KernelMeasurement& k : m.kernels) {
    if (disagrees(k.time_s)) {
      out.push_back(fmt::format("{} (heads {}, batch {}, context {}) {:.0f}%", k.name,
                                k.config.heads, k.config.batch, k.config.context,
                                relative_spread(k.time_s) * 100));
    }
  }
  return out;
}

Record describe_kernel(const KernelMeasurement& k) {
  Record r;
  r.value("name", "kernel", Cell::text(k.name));
  Record& config = r.object("config");
  config.value("heads", "heads", Cell::count(k.config.heads));
  config.value("batch", "batch", Cell::count(k.config.batch));
  config.value("context", "context", Cell::count(k.config.context));
  config.value("query", "query", Cell::count(k.config.query));
  r.value("time_s", "time", Cell::seconds(k.time_s.median));
  r.value("time_spread", "spread", spread_cell(k.time_s), k_tables_only);
  describe_spread(r.object("time_spread_s", k_json_only), k.time_s,
                  [](double v) { return Cell::seconds(v); });
  r.value("flops", Cell::flop(k.cost.flops));
  r.value("bytes", Cell::byte_estimate(k.cost.bytes));
  r.value("achieved_bytes_per_s", "achieved B/s", Cell::bytes_per_s(k.achieved_bytes_per_s));
  r.value("achieved_flops_per_s", "achieved FLOP/s", Cell::flops(k.achieved_flops_per_s));
  r.value("working_set_bytes", Cell::byte_estimate(k.working_set_bytes));
  r.value("memory_level", "inputs in", Cell::text(k.memory_level));
  r.value("memory_bytes_per_s", Cell::bytes_per_s(k.memory_bytes_per_s));
  r.value("memory_time_s", Cell::seconds(k.memory_time_s));
  r.value("compute_time_s", Cell::seconds(k.compute_time_s));
  r.value("bound", "bound", Cell::text(k.bound));
  r.value("predicted_time_s", "predicted", Cell::seconds(k.predicted_time_s));
  r.value("roofline_fraction", "of roofline", Cell::share(k.roofline_fraction));
  r.value("max_abs_error", "max |err|", Cell::number(k.max_abs_error));
  r.value("cos_diff", "cos diff", Cell::number(k.cos_diff));
  if (!k.phases.empty()) {
    Record& by_name = r.object("phases_s");
    auto& rows = r.list("phases", k_tables_only);
    double sum = 0;
    for (const KernelPhase& phase : k.phases) {
      sum += phase.time_s;
    }
    for (const KernelPhase& phase : k.phases) {
      by_name.value(phase.name, Cell::seconds(phase.time_s));
      Record& row = rows.emplace_back();
      row.value("phase", "phase", Cell::text(phase.name));
      row.value("time_s", "time", Cell::seconds(phase.time_s));
      row.value("share", "share", Cell::share(sum > 0 ? phase.time_s / sum : 0));
    }
  }
  return r;
}

/// Measured against predicted naive/absorbed ratio, configuration by configuration.
std::vector<std::string> ratio_notes(const MeasureResult& m) {
  std::vector<std::string> notes;
  for (std::size_t i = 0; i + 1 < m.kernels.size(); i += 2) {
    const KernelMeasurement& a = m.kernels[i];
    const KernelMeasurement& n = m.kernels[i + 1];
    double measured = n.time_s.median / a.time_s.median;
    double predicted = n.predicted_time_s / a.predicted_time_s;
    notes.push_back(fmt::format(
        "heads {}, batch {}, context {}: naive/absorbed measured {:.2f}x, predicted {:.2f}x "
        "({:+.0f}%)",
        a.config.heads, a.config.batch, a.config.context, measured, predicted,
        (measured / predicted - 1) * 100));
  }
  return notes;
}

/// One timed call of the efficiency sweeps.
Record describe_sweep_call(const char* kind, const std::string& dtype, const std::string& shape,
                           double flops, double bytes, const Spread& time) {
  Record r;
  r.value("kind", "sweep", Cell::text(kind));
  r.value("dtype", "dtype", dtype.empty() ? Cell::empty() : Cell::text(dtype));
  r.value("shape", "shape", Cell::text(shape));
  r.value("flops", "FLOPs", flops > 0 ? Cell::flop(flops) : Cell::empty());
  r.value("bytes", "bytes", Cell::byte_estimate(bytes));
  r.value("time_s", "time", Cell::seconds(time.median));
  r.value("time_spread", "spread", spread_cell(time), k_tables_only);
  return r;
}

/// The curves a profile of this measurement carries, each class measured or where it came
/// from.
Record describe_efficiency(const EfficiencyProfile& e) {
  Record r;
  r.value("source", Cell::text(e.source));
  auto curve = [](Record& into, const char* x_key, const Curve& c) {
    Record& o = into.object("compute");
    std::vector<Cell> xs;
    std::vector<Cell> ys;
    for (std::size_t i = 0; i < c.x.size(); ++i) {
      xs.push_back(Cell::number(c.x[i]));
      ys.push_back(Cell::number(c.y[i]));
    }
    o.values(x_key, std::move(xs));
    o.values("efficiency", std::move(ys));
  };
  Record& g = r.object("gemm_bf16");
  g.value("floor_s", Cell::seconds(e.gemm_bf16.floor_s));
  g.value("stream", Cell::number(e.gemm_bf16.stream));
  curve(g, "rows", e.gemm_bf16.compute);
  Record& w = r.object("elementwise");
  w.value("floor_s", Cell::seconds(e.elementwise.floor_s));
  w.value("bandwidth", Cell::number(e.elementwise.bandwidth));
  Record& mla = r.object("mla_decode");
  mla.value("floor_s", Cell::seconds(e.mla_decode.floor_s));
  mla.value("bandwidth", Cell::number(e.mla_decode.bandwidth));
  mla.value("compute", Cell::number(e.mla_decode.compute));
  return r;
}

/// The sweeps' calls, and the curves fitted from them, in a table of their own each.
void render_sweeps(CommandOutput& out, const MeasureResult& m) {
  std::vector<Record> calls;
  for (const TimedGemm& g : m.sweeps.gemm) {
    calls.push_back(describe_sweep_call(
        "gemm", g.dtype,
        fmt::format("{} x {} x {}{}", g.m, g.n, g.k,
                    g.calls > 1 ? fmt::format(", {:g} at once", g.calls) : std::string()),
        g.flops(), g.bytes(), g.time_s));
  }
  for (const TimedPass& pass : m.sweeps.passes) {
    calls.push_back(describe_sweep_call("pass", "", "one read", 0, pass.bytes, pass.time_s));
  }
  out->begin_list("sweeps");
  for (const Record& c : calls) {
    out->item(c);
  }
  out->end_list();
  Table sweep_table = table_of(
      calls, {{"kind"}, {"dtype"}, {"shape"}, {"flops"}, {"bytes"}, {"time_s"}, {"time_spread"}});
  sweep_table.title = m.backend == "fake"
                          ? "Efficiency sweeps on the fake backend: fixed figures"
                          : "Efficiency sweeps: GEMMs over their rows and weights, memory passes "
                            "(median time)";
  DeviceProfile profile = to_device_profile(m, "");
  if (profile.efficiency) {
    const EfficiencyProfile& e = *profile.efficiency;
    out->field("efficiency", describe_efficiency(e));
    std::string compute;
    for (std::size_t i = 0; i < e.gemm_bf16.compute.x.size(); ++i) {
      compute += fmt::format("{}{:.3g} at {:g} rows", i ? ", " : "", e.gemm_bf16.compute.y[i],
                             e.gemm_bf16.compute.x[i]);
    }
    sweep_table.notes.push_back(fmt::format(
        "fitted (the profile's efficiency section): GEMM floor {}, weights streamed at {:.3g} of "
        "the bandwidth, compute {}; elementwise floor {}, bandwidth {:.3g}; MLA decode floor {}, "
        "bandwidth {:.3g}, compute {:.3g}",
        format_cell(Cell::seconds(e.gemm_bf16.floor_s), ByteUnits::iec), e.gemm_bf16.stream,
        compute, format_cell(Cell::seconds(e.elementwise.floor_s), ByteUnits::iec),
        e.elementwise.bandwidth, format_cell(Cell::seconds(e.mla_decode.floor_s), ByteUnits::iec),
        e.mla_decode.bandwidth, e.mla_decode.compute));
    sweep_table.notes.push_back(e.source);
  }
  out->table(sweep_table);
}

void render_measurement(CommandOutput& out, const MeasureResult& m) {
  Record probes = describe_probes(m.probes);
  std::vector<Record> kernels;
  for (const KernelMeasurement& k : m.kernels) {
    kernels.push_back(describe_kernel(k));
  }
  out->field("backend", m.backend);
  out->field("device", m.device);
  out->field("threads", static_cast<std::uint64_t>(m.threads));
  out->field("date", m.date);
  out->field("probes", probes);
  out->begin_list("kernels");
  for (const Record& k : kernels) {
    out->item(k);
  }
  out->end_list();

  Table probe_table = table_of(probe_rows(m.probes), {{"probe"}, {"rate"}, {"spread"}});
  probe_table.title = "Probes on " + m.device + " (" + m.backend + ")";
  std::vector<std::string> noisy = disagreeing(m);
  if (!noisy.empty()) {
    std::string names;
    for (const std::string& n : noisy) {
      names += (names.empty() ? "" : ", ") + n;
    }
    out.warnings.push_back(fmt::format(
        "the runs of {} figure{} disagree by more than {:.0f}% of the median (max − min): {}; "
        "the machine was busy or its clocks changed between runs, so rerun on an idle machine "
        "before calibrating with it",
        noisy.size(), noisy.size() == 1 ? "" : "s", k_spread_bound * 100, names));
  }
  probe_table.notes.push_back(fmt::format(
      "spread: (max − min) / median of the timed runs; ! beyond {:.0f}% (docs/device-profile.md)",
      k_spread_bound * 100));
  if (std::any_of(m.probes.levels.begin(), m.probes.levels.end(),
                  [](const MemoryLevel& l) { return !l.shared; })) {
    probe_table.notes.push_back(
        "private: one per core, holding what that core read; the kernels hand work to any free "
        "thread, so their inputs are placed in shared levels only");
  }
  out->table(probe_table);

  std::vector<ColumnRef> shape = {{"name"},
                                  {"config.heads", "", "heads"},
                                  {"config.batch", "", "batch"},
                                  {"config.context", "", "context"}};
  std::vector<ColumnRef> columns = shape;
  for (const char* key :
       {"time_s", "time_spread", "achieved_bytes_per_s", "achieved_flops_per_s", "memory_level",
        "bound", "predicted_time_s", "roofline_fraction", "max_abs_error", "cos_diff"}) {
    columns.push_back({key});
  }
  Table kernel_table = table_of(kernels, columns);
  kernel_table.title = m.backend == "fake"
                           ? "MLA decode on the fake backend: fixed figures, no kernel runs"
                           : "MLA decode (d_c 512, d_R 64, d_nope 128, d_v 128; paged by 64), "
                             "checked against a double reference before timing; median time";
  kernel_table.notes = ratio_notes(m);
  out->csv_table(kernel_table);
  out->table(kernel_table);

  columns = shape;
  columns.insert(columns.end(), {{"phase"}, {"time_s"}, {"share"}});
  Table phase_table = table_of(kernels, columns, "phases");
  if (!phase_table.rows.empty()) {
    phase_table.title = m.backend == "fake"
                            ? "Phases of each kernel on the fake backend: fixed shares"
                            : "Phases of each kernel, CUDA events between them (median over the "
                              "timed runs, phase by phase)";
    out->table(phase_table);
  }
  if (!m.sweeps.empty()) {
    render_sweeps(out, m);
  }
}

int run_measure_command(const MeasureArgs& args, std::ostream& out, std::ostream& err) {
  auto backend = make_measure_backend(args.backend);
  MeasureResult m = run_measure(*backend, measure_options(args, backend->name(), err));
  if (!args.profile.empty()) {
    write_text_file(args.profile, device_profile_yaml(to_device_profile(m, args.profile)),
                    "--profile");
    err << "kvcalc: wrote " << args.profile << '\n';
  }
  CommandOutput output(args.output, "measure", out, err);
  render_measurement(output, m);
  output.finish();
  return 0;
}

} // namespace

Command setup_measure(const Options& app) {
  auto args = std::make_shared<MeasureArgs>();
  Options cmd = app.subcommand(
      "measure", "Measure this machine: bandwidth and compute probes, MLA decode both ways");
  cmd.option("--backend", args->backend,
             "auto (cuda when a GPU is present, else cpu), cpu, cuda, or fake (fixed "
             "figures, for tests) [default: auto]")
      .check(Choice{[](std::string& name) {
                      static const std::vector<std::string> backends{"auto", "cpu", "cuda", "fake"};
                      return std::find(backends.begin(), backends.end(), name) != backends.end()
                                 ? std::string()
                                 : "unknown backend '" + name + "'" + did_you_mean(name, backends) +
                                       " (one of: auto, cpu, cuda, fake)";
                    },
                    "{auto,cpu,cuda,fake}"})
      .group(k_group_ceilings);
  cmd.option("--heads", args->heads,
             "Query heads of the MLA kernels, comma-separated [default: cpu 1,16 (--quick "
             "1,8); cuda 16,128 (--quick 16)]")
      .type_name("N,...")
      .group(k_group_workload);
  cmd.option("--batch", args->batch,
             "Sequences [default: cpu 4 (--quick 2); cuda 128 (--quick 32)]")
      .type_name("N,...")
      .group(k_group_workload);
  cmd.option("--context", args->context,
             "Cached tokens [default: cpu 2k (--quick 1k); cuda 4k (--quick 2k)]")
      .type_name("TOKENS,...")
      .group(k_group_workload);
  add_count(cmd, "--query", args->query, "New tokens per sequence (s) [default: 1]")
      .type_name("TOKENS")
      .group(k_group_workload);
  cmd.flag("--quick", args->quick, "Smaller probes and kernels: a few seconds")
      .group(k_group_workload);
  cmd.option("--profile", args->profile,
             "Write the device profile YAML to FILE (what --device-profile reads)")
      .type_name("FILE")
      .group(k_group_output);
  cmd.text(
         "--out",
         [](const std::string&) {
           throw InputError("--out is now --profile FILE (the device profile); -o/--output is "
                            "where the report goes");
         },
         "")
      .group("");
  add_output_options(cmd, args->output, ScaledBytes::no);
  return {cmd.app(), [args](std::ostream& out, std::ostream& err) {
            return run_measure_command(*args, out, err);
          }};
}

} // namespace kvcalc::cli
