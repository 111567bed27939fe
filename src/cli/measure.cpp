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

#include "command.hpp"

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
    o.progress = [&err](const std::string& what) { err << "kvcalc: measuring " << what << '\n'; };
  }
  return o;
}

int run_measure_command(const MeasureArgs& args, std::ostream& out, std::ostream& err) {
  auto backend = make_measure_backend(args.backend);
  MeasureResult m = run_measure(*backend, measure_options(args, backend->name(), err));
  if (!args.profile.empty()) {
    write_text_file(args.profile, device_profile_yaml(to_device_profile(m, args.profile)));
    err << "kvcalc: wrote " << args.profile << '\n';
  }

  Rendered r;
  r.json = json_header("measure");
  r.json["backend"] = m.backend;
  r.json["device"] = m.device;
  r.json["threads"] = static_cast<std::uint64_t>(m.threads);
  r.json["date"] = m.date;
  const ProbeResults& p = m.probes;
  Json& pj = r.json["probes"];
  pj["bandwidth_bytes_per_s"] = p.bandwidth_bytes_per_s;
  pj["read_bytes_per_s"] = p.read_bytes_per_s;
  pj["copy_bytes_per_s"] = p.copy_bytes_per_s;
  pj["triad_bytes_per_s"] = p.triad_bytes_per_s;
  pj["fma_fp32_flops_per_s"] = p.fma_flops_per_s;
  pj["fma_bf16_flops_per_s"] = p.fma_bf16_flops_per_s ? Json(*p.fma_bf16_flops_per_s) : Json();
  pj["flops_per_s"] = peak_flops_json(p.gemm_flops_per_s);

  Table probes;
  probes.title = "Probes on " + m.device + " (" + m.backend + ")";
  probes.columns = {{"probe", "probe"}, {"rate", "rate"}};
  probes.rows = {
      {Cell::text("read"), Cell::bytes_per_s(p.read_bytes_per_s)},
      {Cell::text("copy (read + write)"), Cell::bytes_per_s(p.copy_bytes_per_s)},
      {Cell::text("triad (2 reads + write)"), Cell::bytes_per_s(p.triad_bytes_per_s)},
      {Cell::text("bandwidth ceiling (read)"), Cell::bytes_per_s(p.bandwidth_bytes_per_s)},
      {Cell::text("FMA loop fp32"), Cell::flops(p.fma_flops_per_s)}};
  if (p.fma_bf16_flops_per_s) {
    probes.rows.push_back(
        {Cell::text("FMA loop bf16 pairs"), Cell::flops(*p.fma_bf16_flops_per_s)});
  }
  for (auto [name, value] : {std::pair{"GEMM fp32", p.gemm_flops_per_s.fp32},
                             std::pair{"GEMM fp16", p.gemm_flops_per_s.fp16},
                             std::pair{"GEMM bf16", p.gemm_flops_per_s.bf16}}) {
    if (value) {
      probes.rows.push_back({Cell::text(name), Cell::flops(*value)});
    }
  }
  r.tables.push_back(std::move(probes));

  Table kernels;
  kernels.title = m.backend == "fake"
                      ? "MLA decode on the fake backend: fixed figures, no kernel runs"
                      : "MLA decode (d_c 512, d_R 64, d_nope 128, d_v 128; paged by 64), "
                        "checked against a double reference before timing; median time";
  kernels.columns = {{"kernel", "name"},
                     {"heads", "heads"},
                     {"batch", "batch"},
                     {"context", "context"},
                     {"time", "time_s"},
                     {"achieved B/s", "achieved_bytes_per_s"},
                     {"achieved FLOP/s", "achieved_flops_per_s"},
                     {"predicted", "predicted_time_s"},
                     {"of roofline", "roofline_fraction"},
                     {"max |err|", "max_abs_error"},
                     {"cos diff", "cos_diff"}};
  Json list = Json::array();
  for (const KernelMeasurement& k : m.kernels) {
    std::vector<Cell> row{Cell::text(k.name),
                          Cell::count(k.config.heads),
                          Cell::count(k.config.batch),
                          Cell::count(k.config.context),
                          Cell::seconds((k.time_s)),
                          Cell::bytes_per_s(k.achieved_bytes_per_s),
                          Cell::flops(k.achieved_flops_per_s),
                          Cell::seconds((k.predicted_time_s)),
                          Cell::share(k.roofline_fraction),
                          Cell::number(k.max_abs_error),
                          Cell::number(k.cos_diff)};
    kernels.rows.push_back(std::move(row));
    Json j = Json::object();
    j["name"] = k.name;
    j["config"]["heads"] = k.config.heads;
    j["config"]["batch"] = k.config.batch;
    j["config"]["context"] = k.config.context;
    j["config"]["query"] = k.config.query;
    j["time_s"] = k.time_s;
    j["flops"] = k.cost.flops;
    j["bytes"] = k.cost.bytes;
    j["achieved_bytes_per_s"] = k.achieved_bytes_per_s;
    j["achieved_flops_per_s"] = k.achieved_flops_per_s;
    j["predicted_time_s"] = k.predicted_time_s;
    j["roofline_fraction"] = k.roofline_fraction;
    j["max_abs_error"] = k.max_abs_error;
    j["cos_diff"] = k.cos_diff;
    if (!k.phases.empty()) {
      Json& phases = j["phases_s"];
      phases = Json::object();
      for (const KernelPhase& phase : k.phases) {
        phases[phase.name] = phase.time_s;
      }
    }
    list.push_back(std::move(j));
  }
  // Measured against predicted naive/absorbed ratio, configuration by configuration.
  for (std::size_t i = 0; i + 1 < m.kernels.size(); i += 2) {
    const KernelMeasurement& a = m.kernels[i];
    const KernelMeasurement& n = m.kernels[i + 1];
    double measured = n.time_s / a.time_s;
    double predicted = n.predicted_time_s / a.predicted_time_s;
    kernels.notes.push_back(fmt::format(
        "heads {}, batch {}, context {}: naive/absorbed measured {:.2f}x, predicted {:.2f}x "
        "({:+.0f}%)",
        a.config.heads, a.config.batch, a.config.context, measured, predicted,
        (measured / predicted - 1) * 100));
  }
  r.json["kernels"] = std::move(list);
  r.csv = kernels;
  r.tables.push_back(std::move(kernels));

  Table phases;
  phases.title = "Phases of each kernel, CUDA events between them (median over the timed runs, "
                 "phase by phase)";
  phases.columns = {{"kernel", "name"},     {"heads", "heads"}, {"batch", "batch"},
                    {"context", "context"}, {"phase", "phase"}, {"time", "time_s"},
                    {"share", "share"}};
  for (const KernelMeasurement& k : m.kernels) {
    double sum = 0;
    for (const KernelPhase& phase : k.phases) {
      sum += phase.time_s;
    }
    for (const KernelPhase& phase : k.phases) {
      phases.rows.push_back({Cell::text(k.name), Cell::count(k.config.heads),
                             Cell::count(k.config.batch), Cell::count(k.config.context),
                             Cell::text(phase.name), Cell::seconds(phase.time_s),
                             Cell::share(sum > 0 ? phase.time_s / sum : 0)});
    }
  }
  if (!phases.rows.empty()) {
    r.tables.push_back(std::move(phases));
  }
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
