// `gpus`: the GPU catalog.

#include <algorithm>
#include <memory>

#include <kvcalc/report/record.hpp>

#include "command.hpp"

namespace kvcalc::cli {

namespace {

struct GpusArgs {
  std::string gpu_file;
  OutputOptions output;
};

/// One GPU of the catalog: every field (JSON), and the columns of the listing.
Record describe_gpu(const Gpu& g) {
  auto rate = [](const std::optional<double>& v) { return v ? Cell::flops(*v) : Cell::empty(); };
  auto bf16 = g.flops_per_s.bf16 ? g.flops_per_s.bf16 : g.flops_per_s.fp16;
  Record r;
  r.value("name", "name", Cell::text(g.name));
  r.value("display_name", Cell::text(g.display_name), k_json_only);
  r.strings("aliases", g.aliases);
  r.value("vendor", Cell::text(g.vendor), k_json_only);
  r.value("architecture", Cell::text(g.architecture), k_json_only);
  r.value("memory_bytes", "memory", Cell::bytes(g.memory_bytes));
  r.value("memory_nominal_bytes", Cell::count(g.memory_nominal_bytes), k_json_only);
  // A user's entry may leave figures out: those read "-" (null in JSON).
  auto given = [&g](std::string_view key) {
    return std::find(g.not_given.begin(), g.not_given.end(), key) == g.not_given.end();
  };
  r.value("memory_bandwidth_bytes_per_s", "bandwidth",
          given("memory_bandwidth_bytes_per_s") ? Cell::bytes_per_s(g.memory_bandwidth_bytes_per_s)
                                                : Cell::empty());
  describe_peak_flops(r.object("flops_per_s"), g.flops_per_s, "", k_json_only);
  r.value("sm_count", "SMs", given("sm_count") ? Cell::count(g.sm_count) : Cell::empty());
  r.value("l2_bytes", given("l2_bytes") ? Cell::count(g.l2_bytes) : Cell::empty(), k_json_only);
  Record& link = r.object("interconnect");
  link.value("kind", given("interconnect") ? Cell::text(g.interconnect) : Cell::empty());
  link.value("bytes_per_s",
             given("interconnect") ? Cell::number(g.interconnect_bytes_per_s) : Cell::empty());
  link.value("domain", g.scale_up_domain ? Cell::count(g.scale_up_domain) : Cell::empty());
  link.value("latency_s", g.interconnect_latency_s > 0 ? Cell::seconds(g.interconnect_latency_s)
                                                       : Cell::empty());
  if (g.scale_out.bytes_per_s > 0) {
    Record& nic = r.object("scale_out");
    nic.value("kind", Cell::text(g.scale_out.kind));
    nic.value("bytes_per_s", Cell::number(g.scale_out.bytes_per_s));
    nic.value("latency_s",
              g.scale_out.latency_s > 0 ? Cell::seconds(g.scale_out.latency_s) : Cell::empty());
  } else {
    r.value("scale_out", Cell::empty(), k_json_only);
  }
  r.value("source", Cell::text(g.source), k_json_only);
  // The listing's own columns: the dense bf16 peak (fp16 where no bf16 is given), its ridge.
  r.value("bf16_flops_per_s", "bf16 dense", rate(bf16), k_tables_only);
  r.value("fp8_flops_per_s", "fp8 dense", rate(g.flops_per_s.fp8), k_tables_only);
  r.value("fp4_flops_per_s", "fp4 dense", rate(g.flops_per_s.fp4), k_tables_only);
  r.value("ridge_bf16_flop_per_byte", "ridge bf16",
          bf16 && g.memory_bandwidth_bytes_per_s > 0
              ? Cell::number(*bf16 / g.memory_bandwidth_bytes_per_s)
              : Cell::empty(),
          k_tables_only);
  r.value("interconnect", "link", Cell::text(g.interconnect), k_tables_only);
  r.value("scale_up_domain", "domain",
          g.scale_up_domain ? Cell::count(g.scale_up_domain) : Cell::empty(), k_tables_only);
  r.value("scale_out_bytes_per_s", "NIC",
          g.scale_out.bytes_per_s > 0 ? Cell::bytes_per_s(g.scale_out.bytes_per_s) : Cell::empty(),
          k_tables_only);
  r.value("aliases", "aliases", Cell::text(words(g.aliases)), k_tables_only);
  return r;
}

int run_gpus(const GpusArgs& args, std::ostream& out, std::ostream& err) {
  GpuCatalog catalog(args.gpu_file);
  CommandOutput output(args.output, "gpus", out, err);
  std::vector<ColumnRef> columns{{"name"},
                                 {"memory_bytes"},
                                 {"memory_bandwidth_bytes_per_s"},
                                 {"bf16_flops_per_s"},
                                 {"fp8_flops_per_s"},
                                 {"fp4_flops_per_s"},
                                 {"ridge_bf16_flop_per_byte"},
                                 {"sm_count"},
                                 {"interconnect"},
                                 {"scale_up_domain"},
                                 {"scale_out_bytes_per_s"},
                                 {"aliases"}};
  Output::TableId t = output->begin_table("", columns);
  output->csv_view(columns);
  output->note(t, std::to_string(catalog.gpus().size()) +
                      " GPUs; memory as the driver reports it; FLOP/s are dense peaks (no 2:4 "
                      "sparsity); ridge = bf16 FLOP/s ÷ bandwidth");
  output->begin_list("gpus");
  for (const Gpu& g : catalog.gpus()) {
    output->item(describe_gpu(g));
  }
  output->end_list();
  output.finish();
  return 0;
}

} // namespace

Command setup_gpus(const Options& app) {
  auto args = std::make_shared<GpusArgs>();
  Options cmd = app.subcommand("gpus", "List the GPU catalog");
  cmd.option("--gpu-file", args->gpu_file, "Add the GPUs of your own catalog YAML")
      .type_name("FILE")
      .group(k_group_deployment);
  add_output_options(cmd, args->output, ScaledBytes::yes);
  return {cmd.app(),
          [args](std::ostream& out, std::ostream& err) { return run_gpus(*args, out, err); }};
}

} // namespace kvcalc::cli
