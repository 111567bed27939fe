// `gpus`: the GPU catalog.

#include <memory>

#include "command.hpp"

namespace kvcalc::cli {

namespace {

struct GpusArgs {
  std::string gpu_file;
  OutputOptions output;
};

int run_gpus(const GpusArgs& args, std::ostream& out, std::ostream& err) {
  GpuCatalog catalog(args.gpu_file);
  Rendered r;
  r.json = json_header("gpus");
  Table t;
  t.columns = {{"name", "name"},
               {"memory", "memory_bytes"},
               {"bandwidth", "memory_bandwidth_bytes_per_s"},
               {"bf16 dense", "bf16_flops_per_s"},
               {"fp8 dense", "fp8_flops_per_s"},
               {"fp4 dense", "fp4_flops_per_s"},
               {"ridge bf16", "ridge_bf16_flop_per_byte"},
               {"SMs", "sm_count"},
               {"link", "interconnect"},
               {"aliases", "aliases"}};
  Json list = Json::array();
  for (const Gpu& g : catalog.gpus()) {
    std::string aliases;
    for (const auto& a : g.aliases) {
      aliases += (aliases.empty() ? "" : " ") + a;
    }
    auto bf16 = g.flops_per_s.bf16 ? g.flops_per_s.bf16 : g.flops_per_s.fp16;
    auto rate = [](const std::optional<double>& v) { return v ? Cell::flops(*v) : Cell::empty(); };
    t.rows.push_back({Cell::text(g.name), Cell::bytes(g.memory_bytes),
                      Cell::bytes_per_s(g.memory_bandwidth_bytes_per_s), rate(bf16),
                      rate(g.flops_per_s.fp8), rate(g.flops_per_s.fp4),
                      Cell::number(*bf16 / g.memory_bandwidth_bytes_per_s), Cell::count(g.sm_count),
                      Cell::text(g.interconnect), Cell::text(aliases)});
    Json j = Json::object();
    j["name"] = g.name;
    j["display_name"] = g.display_name;
    j["aliases"] = string_array(g.aliases);
    j["vendor"] = g.vendor;
    j["architecture"] = g.architecture;
    j["memory_bytes"] = g.memory_bytes;
    j["memory_nominal_bytes"] = g.memory_nominal_bytes;
    j["memory_bandwidth_bytes_per_s"] = g.memory_bandwidth_bytes_per_s;
    j["flops_per_s"] = peak_flops_json(g.flops_per_s);
    j["sm_count"] = g.sm_count;
    j["l2_bytes"] = g.l2_bytes;
    j["interconnect"]["kind"] = g.interconnect;
    j["interconnect"]["bytes_per_s"] = g.interconnect_bytes_per_s;
    j["source"] = g.source;
    list.push_back(std::move(j));
  }
  r.json["gpus"] = std::move(list);
  t.notes.push_back(std::to_string(catalog.gpus().size()) +
                    " GPUs; memory as the driver reports it; FLOP/s are dense peaks (no 2:4 "
                    "sparsity); ridge = bf16 FLOP/s ÷ bandwidth");
  r.csv = t;
  r.tables.push_back(std::move(t));
  emit(r, args.output, out, err);
  return 0;
}

} // namespace

Command setup_gpus(CLI::App& app) {
  auto args = std::make_shared<GpusArgs>();
  CLI::App* cmd = app.add_subcommand("gpus", "List the GPU catalog");
  cmd->add_option("--gpu-file", args->gpu_file, "Add the GPUs of your own catalog YAML")
      ->type_name("FILE")
      ->group(k_group_deployment);
  add_output_options(cmd, args->output, ScaledBytes::yes);
  return {cmd, [args](std::ostream& out, std::ostream& err) { return run_gpus(*args, out, err); }};
}

} // namespace kvcalc::cli
