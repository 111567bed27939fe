// `measure`: probes and MLA decode kernels on this machine; writes a device profile.

#include <algorithm>
#include <memory>
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

Record describe_probes(const ProbeResults& p) {
  Record r;
  r.value("bandwidth_bytes_per_s", "bandwidth ceiling (read)",
          Cell::bytes_per_s(p.bandwidth_bytes_per_s));
  r.value("read_bytes_per_s", "read", Cell::bytes_per_s(p.read_bytes_per_s));
  r.value("copy_bytes_per_s", "copy (read + write)", Cell::bytes_per_s(p.copy_bytes_per_s));
  r.value("triad_bytes_per_s", "triad (2 reads + write)", Cell::bytes_per_s(p.triad_bytes_per_s));
  r.value("fma_fp32_flops_per_s", "FMA loop fp32", Cell::flops(p.fma_flops_per_s));
  r.value("fma_bf16_flops_per_s", "FMA loop bf16 pairs",
          p.fma_bf16_flops_per_s ? Cell::flops(*p.fma_bf16_flops_per_s) : Cell::empty());
  describe_peak_flops(r.object("flops_per_s"), p.gemm_flops_per_s, "GEMM ", k_everywhere);
  return r;
}

Record describe_kernel(const KernelMeasurement& k) {
  Record r;
  r.value("name", "kernel", Cell::text(k.name));
  Record& config = r.object("config");
  config.value("heads", "heads", Cell::count(k.config.heads));
  config.value("batch", "batch", Cell::count(k.config.batch));
  config.value("context", "context", Cell::count(k.config.context));
  config.value("query", "query", Cell::count(k.config.query));
  r.value("time_s", "time", Cell::seconds(k.time_s));
  r.value("flops", Cell::flop(k.cost.flops));
  r.value("bytes", Cell::byte_estimate(k.cost.bytes));
  r.value("achieved_bytes_per_s", "achieved B/s", Cell::bytes_per_s(k.achieved_bytes_per_s));
  r.value("achieved_flops_per_s", "achieved FLOP/s", Cell::flops(k.achieved_flops_per_s));
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
    double measured = n.time_s / a.time_s;
    double predicted = n.predicted_time_s / a.predicted_time_s;
    notes.push_back(fmt::format(
        "heads {}, batch {}, context {}: naive/absorbed measured {:.2f}x, predicted {:.2f}x "
        "({:+.0f}%)",
        a.config.heads, a.config.batch, a.config.context, measured, predicted,
        (measured / predicted - 1) * 100));
  }
  return notes;
}

void render_measurement(Rendered& r, const MeasureResult& m) {
  Record probes = describe_probes(m.probes);
  std::vector<Record> kernels;
  for (const KernelMeasurement& k : m.kernels) {
    kernels.push_back(describe_kernel(k));
  }
  r.json = json_header("measure");
  r.json["backend"] = m.backend;
  r.json["device"] = m.device;
  r.json["threads"] = static_cast<std::uint64_t>(m.threads);
  r.json["date"] = m.date;
  r.json["probes"] = probes.json();
  r.json["kernels"] = json_of(kernels);

  Table probe_table =
      fields_of(probes,
                {"read_bytes_per_s", "copy_bytes_per_s", "triad_bytes_per_s",
                 "bandwidth_bytes_per_s", "fma_fp32_flops_per_s", "fma_bf16_flops_per_s",
                 "flops_per_s.fp32", "flops_per_s.fp16", "flops_per_s.bf16"},
                {"probe", "probe"}, {"rate", "rate"});
  probe_table.title = "Probes on " + m.device + " (" + m.backend + ")";
  r.tables.push_back(std::move(probe_table));

  std::vector<ColumnRef> shape = {{"name"},
                                  {"config.heads", "", "heads"},
                                  {"config.batch", "", "batch"},
                                  {"config.context", "", "context"}};
  std::vector<ColumnRef> columns = shape;
  for (const char* key : {"time_s", "achieved_bytes_per_s", "achieved_flops_per_s",
                          "predicted_time_s", "roofline_fraction", "max_abs_error", "cos_diff"}) {
    columns.push_back({key});
  }
  Table kernel_table = table_of(kernels, columns);
  kernel_table.title = m.backend == "fake"
                           ? "MLA decode on the fake backend: fixed figures, no kernel runs"
                           : "MLA decode (d_c 512, d_R 64, d_nope 128, d_v 128; paged by 64), "
                             "checked against a double reference before timing; median time";
  kernel_table.notes = ratio_notes(m);
  r.csv = kernel_table;
  r.tables.push_back(std::move(kernel_table));

  std::vector<Record> phases;
  for (const Record& k : kernels) {
    if (k.find("phases")) {
      for (Record& row : joined(k, "phases")) {
        phases.push_back(std::move(row));
      }
    }
  }
  if (!phases.empty()) {
    columns = shape;
    columns.insert(columns.end(), {{"phase"}, {"time_s"}, {"share"}});
    Table phase_table = table_of(phases, columns);
    phase_table.title = m.backend == "fake"
                            ? "Phases of each kernel on the fake backend: fixed shares"
                            : "Phases of each kernel, CUDA events between them (median over the "
                              "timed runs, phase by phase)";
    r.tables.push_back(std::move(phase_table));
  }
}

int run_measure_command(const MeasureArgs& args, std::ostream& out, std::ostream& err) {
  auto backend = make_measure_backend(args.backend);
  MeasureResult m = run_measure(*backend, measure_options(args, backend->name(), err));
  if (!args.profile.empty()) {
    write_text_file(args.profile, device_profile_yaml(to_device_profile(m, args.profile)));
    err << "kvcalc: wrote " << args.profile << '\n';
  }
  Rendered r;
  render_measurement(r, m);
  emit(r, args.output, out, err);
  return 0;
}

} // namespace

Command setup_measure(CLI::App& app) {
  auto args = std::make_shared<MeasureArgs>();
  CLI::App* cmd = app.add_subcommand(
      "measure", "Measure this machine: bandwidth and compute probes, MLA decode both ways");
  cmd->add_option("--backend", args->backend,
                  "auto (cuda when a GPU is present, else cpu), cpu, cuda, or fake (fixed "
                  "figures, for tests) [default: auto]")
      ->check(CLI::Validator(
          [](std::string& name) {
            static const std::vector<std::string> backends{"auto", "cpu", "cuda", "fake"};
            return std::find(backends.begin(), backends.end(), name) != backends.end()
                       ? std::string()
                       : "unknown backend '" + name + "'" + did_you_mean(name, backends) +
                             " (one of: auto, cpu, cuda, fake)";
          },
          "{auto,cpu,cuda,fake}"))
      ->group(k_group_ceilings);
  cmd->add_option("--heads", args->heads,
                  "Query heads of the MLA kernels, comma-separated [default: cpu 1,16 (--quick "
                  "1,8); cuda 16,128 (--quick 16)]")
      ->type_name("N,...")
      ->group(k_group_workload);
  cmd->add_option("--batch", args->batch,
                  "Sequences [default: cpu 4 (--quick 2); cuda 128 (--quick 32)]")
      ->type_name("N,...")
      ->group(k_group_workload);
  cmd->add_option("--context", args->context,
                  "Cached tokens [default: cpu 2k (--quick 1k); cuda 4k (--quick 2k)]")
      ->type_name("TOKENS,...")
      ->group(k_group_workload);
  add_count(cmd, "--query", args->query, "New tokens per sequence (s) [default: 1]")
      ->type_name("TOKENS")
      ->group(k_group_workload);
  cmd->add_flag("--quick", args->quick, "Smaller probes and kernels: a few seconds")
      ->group(k_group_workload);
  cmd->add_option("--profile", args->profile,
                  "Write the device profile YAML to FILE (what --device-profile reads)")
      ->type_name("FILE")
      ->group(k_group_output);
  cmd->add_option_function<std::string>(
         "--out",
         [](const std::string&) {
           throw InputError("--out is now --profile FILE (the device profile); -o/--output is "
                            "where the report goes");
         },
         "")
      ->group("");
  add_output_options(cmd, args->output, ScaledBytes::no);
  return {cmd, [args](std::ostream& out, std::ostream& err) {
            return run_measure_command(*args, out, err);
          }};
}

} // namespace kvcalc::cli
