// `roofline`: one step of prefill or decode, op by op, on a GPU's roofline.

#include <algorithm>
#include <memory>
#include <ostream>
#include <unistd.h>

#include <fmt/format.h>

#include <kvcalc/core/error.hpp>
#include <kvcalc/core/file.hpp>
#include <kvcalc/core/units.hpp>
#include <kvcalc/measure/measure.hpp>
#include <kvcalc/report/svg.hpp>
#include <kvcalc/roofline/roofline.hpp>

#include "deployment.hpp"

namespace kvcalc::cli {

namespace {

struct RooflineArgs {
  std::vector<std::string> models;
  std::vector<u64> batches{1};
  std::vector<u64> contexts{4096}; ///< cached tokens (decode), prompt (prefill), prefix (extend)
  std::optional<std::vector<u64>> prompt; ///< prefill: the prompt, same as --context
  Phase phase = Phase::decode;
  u64 query = 1; ///< decode: tokens per request per step; extend: the chunk
  std::vector<MlaMode> mla{MlaMode::automatic};
  bool mla_given = false;
  NaiveKv naive_kv = NaiveKv::fused;
  std::string efficiency;     ///< "bw=0.85,flops=0.7"
  std::string device_profile; ///< measured ceilings (docs/device-profile.md)
  bool measure = false;       ///< measure this machine first and use its ceilings
  bool no_communication = false;
  bool mla_crossover = false;
  bool ops = false; ///< print every op of every scenario
  std::string plot; ///< SVG file
  CacheRequest cache;
  ParallelOptions parallel = ParallelOptions::on({"h100-sxm"});
  OutputOptions output;
};

/// "1,16,128" or a range "1-256" of powers of two.
std::vector<u64> parse_batches(const std::string& text, const std::string& flag) {
  auto dash = text.find('-');
  if (dash == std::string::npos || dash == 0) {
    return parse_count_list(text, flag);
  }
  u64 lo = parse_count(text.substr(0, dash), flag);
  u64 hi = parse_count(text.substr(dash + 1), flag);
  if (hi < lo) {
    throw InputError(flag + " range '" + text + "' runs backwards; write low-high, e.g. 1-256");
  }
  std::vector<u64> out;
  for (u64 b = 1; b <= hi; b *= 2) {
    if (b >= lo) {
      out.push_back(b);
    }
    if (b > (UINT64_MAX >> 1)) {
      break;
    }
  }
  if (out.empty() || out.back() != hi) {
    out.push_back(hi);
  }
  if (out.front() != lo) {
    out.insert(out.begin(), lo);
  }
  return out;
}

Json op_json(const Op& o) {
  Json j = Json::object();
  j["name"] = o.name;
  j["dtype"] = o.dtype;
  j["flops"] = o.flops;
  j["bytes"] = o.bytes;
  j["weight_bytes"] = o.weight_bytes;
  j["activation_bytes"] = o.activation_bytes;
  j["kv_bytes"] = o.kv_bytes;
  j["intensity"] = o.intensity;
  j["attainable_flops_per_s"] = o.attainable;
  j["bound"] = o.communication ? "interconnect" : o.compute_bound ? "compute" : "memory";
  j["time_s"] = o.time_s;
  j["variant"] = o.variant.empty() ? Json() : Json(o.variant);
  return j;
}

std::string scenario_label(const RooflineRequest& q, const RooflineResult& r) {
  std::string label = q.model.name;
  if (q.model.attention.kind == AttentionKind::mla) {
    label += " " + std::string(mla_mode_name(r.mla));
  }
  return label + ", t " + group_digits(q.context);
}

/// The roofline of every op of every scenario and, for a batch sweep, throughput and time per
/// token against batch.
void write_plot(const std::string& path, const RooflineRequest& first,
                const std::vector<std::pair<std::string, const RooflineResult*>>& results,
                const std::vector<u64>& batches) {
  RooflineChart chart;
  chart.title = "Roofline: " + first.gpu.display_name + " (" + first.rates.source + ")";
  chart.bandwidth_bytes_per_s = first.rates.bandwidth_bytes_per_s;
  const PeakFlops& f = first.rates.flops_per_s;
  if (auto bf16 = f.bf16 ? f.bf16 : f.fp16) {
    chart.ceilings.emplace_back("bf16", *bf16);
  }
  if (f.fp8) {
    chart.ceilings.emplace_back("fp8", *f.fp8);
  }
  bool single = results.size() == 1;
  std::vector<std::string> labelled; // in a sweep, one label per series: its last point
  for (auto it = results.rbegin(); it != results.rend(); ++it) {
    const auto& [label, res] = *it;
    for (const Op& o : res->ops) {
      if (o.communication || o.flops <= 0 || o.time_s <= 0) {
        continue;
      }
      PointStyle style = o.variant == "absorbed" ? PointStyle::absorbed
                         : o.variant == "naive"  ? PointStyle::naive
                                                 : PointStyle::other;
      // Label every op of one scenario; in a sweep the attention core of each series once.
      bool core = o.name.starts_with("attention.core");
      std::string text;
      if (single) {
        text = o.name;
      } else if (core && std::find(labelled.begin(), labelled.end(), label) == labelled.end()) {
        text = label;
        labelled.push_back(label);
      }
      chart.points.push_back({o.intensity, o.flops / o.time_s, text, style});
    }
  }
  std::vector<LineChart> charts;
  bool sweep =
      std::adjacent_find(batches.begin(), batches.end(), std::not_equal_to<>()) != batches.end();
  if (sweep) {
    LineChart throughput;
    throughput.title = "Throughput against batch";
    throughput.x_label = "batch (sequences)";
    throughput.y_label = "tokens/s";
    LineChart latency;
    latency.title = "Time per token against batch";
    latency.x_label = "batch (sequences)";
    latency.y_label = "time per output token (s)";
    for (std::size_t i = 0; i < results.size(); ++i) {
      const std::string& label = results[i].first;
      auto series = std::find_if(throughput.series.begin(), throughput.series.end(),
                                 [&](const LineSeries& s) { return s.name == label; });
      if (series == throughput.series.end()) {
        throughput.series.push_back({label, {}, {}});
        latency.series.push_back({label, {}, {}});
        series = throughput.series.end() - 1;
      }
      auto k = static_cast<std::size_t>(series - throughput.series.begin());
      throughput.series[k].xs.push_back(static_cast<double>(batches[i]));
      throughput.series[k].ys.push_back(results[i].second->tokens_per_s);
      latency.series[k].xs.push_back(static_cast<double>(batches[i]));
      latency.series[k].ys.push_back(results[i].second->time_per_token_s);
    }
    charts.push_back(std::move(throughput));
    charts.push_back(std::move(latency));
  }
  write_text_file(path, render_svg(chart, charts));
}

int run_roofline(const RooflineArgs& args, std::ostream& out, std::ostream& err) {
  Rendered r;
  std::vector<Model> models = load_models(args.models, r.warnings);
  std::vector<std::string>& warnings = r.warnings;
  Phase phase = args.phase;
  std::vector<u64> contexts = args.contexts;
  if (args.prompt) {
    if (phase != Phase::prefill) {
      throw InputError("--prompt is the prefill length; add --phase prefill or use --context");
    }
    contexts = *args.prompt;
  }
  const std::vector<u64>& batches = args.batches;
  u64 query = args.query;
  if (phase == Phase::prefill && query != 1) {
    throw InputError("--query is decode's tokens per step (extend: the chunk); a prefill step "
                     "takes the whole prompt, --prompt or --context");
  }
  const std::vector<MlaMode>& modes = args.mla;
  if (args.mla_given) {
    for (const Model& m : models) {
      if (m.attention.kind != AttentionKind::mla) {
        warnings.push_back("--mla applies to MLA models; " + m.name + " is " +
                           std::string(attention_kind_name(m.attention.kind)) +
                           ", whose rows do not change with it");
      }
    }
  }
  NaiveKv naive_kv = args.naive_kv;
  Efficiency efficiency = parse_efficiency(args.efficiency, "--efficiency");
  if (!args.device_profile.empty() || args.measure) {
    if (efficiency.given) {
      throw InputError("--efficiency and measured ceilings (--device-profile, --measure) both "
                       "set the ceilings; give one");
    }
    if (!args.device_profile.empty() && args.measure) {
      throw InputError("--measure measures the ceilings --device-profile would give; choose one");
    }
  }
  std::optional<DeviceProfile> profile = read_device_profile(args.device_profile);
  const std::string how_to_measure =
      "add --measure, or a --device-profile that kvcalc measure wrote";
  GpuCatalog catalog(args.parallel.gpu_file);
  if (args.measure) {
    auto backend = make_measure_backend("auto");
    // The devices are checked against what will be measured before the probes take seconds.
    DeviceProfile planned;
    planned.backend = backend->name();
    planned.device = backend->device();
    planned.file = "(measured now)";
    std::vector<std::string> ignored; // the real run below says them
    (void)deployment_devices(args.parallel, planned, catalog, how_to_measure, ignored);
    MeasureOptions options; // probes only: the roofline needs the ceilings
    if (isatty(2) != 0) {
      options.progress = [&err](const std::string& what) {
        err << "kvcalc: measuring " << what << '\n';
      };
    }
    profile = to_device_profile(run_measure(*backend, options), "(measured now)");
  }
  std::vector<Gpu> devices =
      deployment_devices(args.parallel, profile, catalog, how_to_measure, warnings);

  struct Scenario {
    RooflineRequest request;
    RooflineResult result;
  };
  std::vector<Scenario> scenarios;
  std::vector<std::pair<std::string, MlaCrossover>> crossovers;
  for (const Model& m : models) {
    bool mla = m.attention.kind == AttentionKind::mla;
    for (const Gpu& gpu : devices) {
      for (u64 tp : args.parallel.tps) {
        RooflineRequest req;
        req.model = m;
        req.gpu = gpu;
        req.rates = profile ? device_rates(gpu, *profile)
                            : device_rates(gpu, efficiency.bandwidth, efficiency.flops);
        req.cache = args.cache;
        req.weight_dtype = args.parallel.weight_dtype;
        req.parallel.tp = tp;
        req.parallel.pp = args.parallel.pp;
        req.parallel.ep = args.parallel.ep;
        req.parallel.dp_attention = args.parallel.dp_attention;
        req.phase = phase;
        req.query = query;
        req.naive_kv = naive_kv;
        req.communication = !args.no_communication;
        if (args.mla_crossover) {
          for (u64 c : contexts) {
            RooflineRequest x = req;
            x.batch = batches.front();
            x.context = c;
            crossovers.emplace_back(m.name + " on " + gpu.name + ", tp " + group_digits(tp),
                                    mla_crossover(x));
          }
          continue;
        }
        for (MlaMode mode : mla ? modes : std::vector<MlaMode>{MlaMode::automatic}) {
          for (u64 c : contexts) {
            for (u64 b : batches) {
              RooflineRequest x = req;
              x.mla = mode;
              x.context = c;
              x.batch = b;
              scenarios.push_back({x, compute_roofline(x)});
            }
          }
        }
      }
    }
  }

  r.json = json_header(args.mla_crossover ? "roofline-mla-crossover" : "roofline");
  if (args.mla_crossover) {
    Table t;
    t.title = "MLA: where absorbed stops paying (chunks of s tokens over a prefix of P)";
    t.columns = {{"deployment", "deployment"},
                 {"prefix P", "prefix"},
                 {"FLOP ratio s·t_eff/P", "flop_ratio"},
                 {"s at equal FLOPs", "flop_query"},
                 {"s where naive is faster", "time_query"}};
    Json list = Json::array();
    bool flops_never = false;
    for (const auto& [who, c] : crossovers) {
      t.rows.push_back({Cell::text(who), Cell::count(c.prefix),
                        c.flop_ratio ? Cell::number(*c.flop_ratio) : Cell::text("never"),
                        c.flop_query ? Cell::number(*c.flop_query) : Cell::text("never"),
                        c.time_query ? Cell::count(c.time_query) : Cell::text("none")});
      if (!c.flop_ratio) {
        flops_never = true;
      }
      Json j = Json::object();
      j["deployment"] = who;
      j["prefix"] = c.prefix;
      j["flop_ratio"] = c.flop_ratio ? Json(*c.flop_ratio) : Json();
      j["flop_query"] = c.flop_query ? Json(*c.flop_query) : Json();
      j["time_query"] = c.time_query ? Json(c.time_query) : Json();
      list.push_back(std::move(j));
    }
    t.notes.push_back("absorbed costs fewer FLOPs while s·t_eff/P stays below the ratio; the time "
                      "crossover differs because the two modes sit on opposite sides of the ridge");
    if (flops_never) {
      t.notes.push_back("'never': with 2·d_c ≤ d_nope + d_v the latent is so narrow that absorbed "
                        "costs fewer FLOPs at every s");
    }
    r.json["crossovers"] = std::move(list);
    r.csv = t;
    r.tables.push_back(std::move(t));
    if (!args.plot.empty()) {
      throw InputError("--plot draws the roofline of the steps; --mla-crossover has none to draw");
    }
    emit(r, args.output, out, err);
    return 0;
  }

  Table summary;
  summary.columns = {{"model", "model"},
                     {"gpu", "gpu"},
                     {"tp", "tp"},
                     {"phase", "phase"},
                     {"mla", "mla"},
                     {"batch", "batch"},
                     {"context", "context"},
                     {"s", "query"},
                     {"step", "time_s"},
                     {"tokens/s", "tokens_per_s"},
                     {"per token", "time_per_token_s"},
                     {"dominant op", "dominant"}};
  Json list = Json::array();
  for (const auto& sc : scenarios) {
    const RooflineRequest& q = sc.request;
    const RooflineResult& res = sc.result;
    bool mla = q.model.attention.kind == AttentionKind::mla;
    std::vector<Cell> row{Cell::text(q.model.name),
                          Cell::text(q.gpu.name),
                          Cell::count(q.parallel.tp),
                          Cell::text(std::string(phase_name(q.phase))),
                          Cell::text(mla ? std::string(mla_mode_name(res.mla)) : "-"),
                          Cell::count(q.batch),
                          Cell::count(q.context),
                          Cell::count(res.query),
                          Cell::seconds((res.time_s)),
                          Cell::number(res.tokens_per_s),
                          Cell::seconds((res.time_per_token_s)),
                          Cell::text(res.dominant)};
    summary.rows.push_back(std::move(row));
    Json j = Json::object();
    j["model"] = q.model.name;
    j["gpu"] = q.gpu.name;
    j["tp"] = q.parallel.tp;
    j["phase"] = std::string(phase_name(q.phase));
    j["mla"] = mla ? Json(std::string(mla_mode_name(res.mla))) : Json();
    j["batch"] = q.batch;
    j["context"] = q.context;
    j["query_tokens"] = res.query;
    j["attended_tokens"] = res.attended;
    j["attended_effective"] = res.attended_effective;
    j["heads_per_gpu"] = res.heads;
    j["layers_per_gpu"] = res.layers;
    j["rates"] = res.rates_source;
    Json ops = Json::array();
    for (const Op& o : res.ops) {
      ops.push_back(op_json(o));
    }
    j["ops"] = std::move(ops);
    j["total"]["flops"] = res.flops;
    j["total"]["bytes"] = res.bytes;
    j["total"]["time_s"] = res.time_s;
    j["total"]["tokens_per_s"] = res.tokens_per_s;
    j["total"]["time_per_token_s"] = res.time_per_token_s;
    j["dominant"] = res.dominant;
    list.push_back(std::move(j));
    warnings.insert(warnings.end(), res.notes.begin(), res.notes.end());
  }
  summary.notes.push_back("ceilings: " + scenarios.front().result.rates_source +
                          "; ops run one after another (no overlap)");
  r.json["scenarios"] = std::move(list);
  r.csv = summary;
  r.tables.push_back(std::move(summary));
  if (args.ops || scenarios.size() == 1) {
    for (const auto& sc : scenarios) {
      Table t;
      t.title = sc.request.model.name + " on " + sc.request.gpu.name + ", batch " +
                group_digits(sc.request.batch) + ", context " + group_digits(sc.request.context) +
                (sc.request.model.attention.kind == AttentionKind::mla
                     ? ", " + std::string(mla_mode_name(sc.result.mla))
                     : "");
      t.columns = {{"op", "op"},       {"dtype", "dtype"},      {"FLOPs", "flops"},
                   {"bytes", "bytes"}, {"FLOP/B", "intensity"}, {"bound", "bound"},
                   {"time", "time_s"}, {"share", "share"}};
      for (const Op& o : sc.result.ops) {
        t.rows.push_back({Cell::text(o.name), Cell::text(o.dtype), Cell::flop(o.flops),
                          Cell::bytes(static_cast<u64>(o.bytes)), Cell::number(o.intensity),
                          Cell::text(o.communication   ? "link"
                                     : o.compute_bound ? "compute"
                                                       : "memory"),
                          Cell::seconds((o.time_s)), Cell::share(o.time_s / sc.result.time_s)});
      }
      r.tables.push_back(std::move(t));
    }
  }
  if (!args.plot.empty()) {
    write_plot(
        args.plot, scenarios.front().request,
        [&] {
          std::vector<std::pair<std::string, const RooflineResult*>> labelled;
          for (const auto& sc : scenarios) {
            labelled.emplace_back(scenario_label(sc.request, sc.result), &sc.result);
          }
          return labelled;
        }(),
        [&] {
          std::vector<u64> b;
          for (const auto& sc : scenarios) {
            b.push_back(sc.request.batch);
          }
          return b;
        }());
    err << "kvcalc: wrote " << args.plot << '\n';
  }
  emit(r, args.output, out, err);
  return 0;
}

} // namespace

Command setup_roofline(CLI::App& app) {
  auto args = std::make_shared<RooflineArgs>();
  CLI::App* cmd = app.add_subcommand(
      "roofline",
      "One prefill or decode step, op by op, on a GPU's roofline (MLA absorbed vs naive)");
  cmd->add_option("models", args->models, k_models_help)->type_name("MODEL")->required();
  add_parsed(cmd, "--batch", args->batches, parse_batches,
             "Sequences per step: a list (1,16,128) or a range of powers of two (1-256) "
             "[default: 1]")
      ->type_name("N,...|A-B")
      ->group(k_group_workload);
  add_counts(cmd, "--context", args->contexts,
             "Tokens: in the cache (decode), the prompt (prefill), the cached prefix (extend); a "
             "list sweeps [default: 4k]")
      ->type_name("TOKENS,...")
      ->group(k_group_workload);
  add_parsed(
      cmd, "--prompt", args->prompt,
      [](const std::string& text, const std::string& flag) {
        return std::optional<std::vector<u64>>(parse_count_list(text, flag));
      },
      "Prefill: the prompt length (= --context)")
      ->type_name("TOKENS,...")
      ->group(k_group_workload);
  add_choice(cmd, "--phase", args->phase, k_phases,
             "decode (s new tokens per request), prefill (a prompt, no prefix) or extend (a "
             "chunk of s tokens over a cached prefix)")
      ->group(k_group_workload);
  add_count(cmd, "--query", args->query,
            "s: decode tokens per request per step (2+ for MTP/speculative), or the extend "
            "chunk [default: 1]")
      ->type_name("TOKENS")
      ->group(k_group_workload);
  add_choice_list(cmd, "--mla", args->mla, k_mla_modes,
                  "MLA mode: absorbed, naive, auto (absorbed for chunks of ≤ 128 tokens, naive "
                  "for prefill); a comma-separated list compares")
      ->each([args](const std::string&) { args->mla_given = true; })
      ->group(k_group_workload);
  add_choice(cmd, "--naive-kv", args->naive_kv, k_naive_kv,
             "Naive MLA: fused (decompressed K/V stay on chip) or materialized (written and read "
             "back)")
      ->group(k_group_workload);
  cmd->add_flag("--mla-crossover", args->mla_crossover,
                "Report where absorbed MLA stops paying: the FLOP and the time crossover in chunk "
                "length over each --context prefix")
      ->group(k_group_workload);
  add_cache_options(cmd, args->cache);
  add_parallel_options(cmd, args->parallel, ParallelScope::step, true);
  cmd->add_flag("--no-comm", args->no_communication,
                "Leave out TP all-reduce and EP all-to-all time")
      ->group(k_group_deployment);
  cmd->add_option("--efficiency", args->efficiency,
                  "Scale the datasheet ceilings: bw=F,flops=F (e.g. bw=0.85,flops=0.7) [default: "
                  "1, the datasheet]")
      ->type_name("bw=F,flops=F")
      ->group(k_group_ceilings);
  cmd->add_option("--device-profile", args->device_profile,
                  "Measured ceilings (a profile `kvcalc measure --profile` writes) instead of the "
                  "datasheet's")
      ->type_name("FILE")
      ->group(k_group_ceilings);
  cmd->add_flag("--measure", args->measure,
                "Measure this machine's ceilings first (kvcalc measure's probes) and use them; "
                "without --gpu (or with --gpu auto) the measured device is the device")
      ->group(k_group_ceilings);
  cmd->add_flag("--ops", args->ops, "Print the op table of every scenario")->group(k_group_output);
  cmd->add_option("--plot", args->plot,
                  "Write an SVG: the roofline with every op, and for a batch sweep throughput and "
                  "time per token against batch")
      ->type_name("FILE.svg")
      ->group(k_group_output);
  add_output_options(cmd, args->output, ScaledBytes::yes);
  return {cmd,
          [args](std::ostream& out, std::ostream& err) { return run_roofline(*args, out, err); }};
}

} // namespace kvcalc::cli
