// `roofline`: one step of prefill or decode, op by op, on a GPU's roofline.

#include <algorithm>
#include <filesystem>
#include <memory>
#include <ostream>
#include <unistd.h>
#include <unordered_set>

#include <fmt/format.h>

#include <kvcalc/core/error.hpp>
#include <kvcalc/core/file.hpp>
#include <kvcalc/core/units.hpp>
#include <kvcalc/measure/measure.hpp>
#include <kvcalc/report/record.hpp>
#include <kvcalc/report/svg.hpp>
#include <kvcalc/roofline/roofline.hpp>

#include "deployment.hpp"
#include "sweep.hpp"

using namespace kvcalc::measure;
using namespace kvcalc::roofline;

namespace kvcalc::cli {

namespace {

struct RooflineArgs {
  std::vector<std::string> models;
  std::vector<u64> batches{1};
  std::optional<std::vector<u64>> batches_per_gpu; ///< sequences per GPU: batch = this × tp
  std::vector<u64> contexts{4096}; ///< cached tokens (decode), prompt (prefill), prefix (extend)
  std::optional<std::vector<u64>> prompt; ///< prefill: the prompt, same as --context
  Phase phase = Phase::decode;
  u64 query = 1; ///< decode: tokens per request per step; extend: the chunk
  std::vector<MlaMode> mla{MlaMode::automatic};
  bool mla_given = false;
  NaiveKv naive_kv = NaiveKv::fused;
  std::string efficiency;  ///< "bw=0.85,flops=0.7"
  CeilingOptions ceilings; ///< measured ceilings (docs/device-profile.md), read or measured now
  bool no_communication = false;
  Overlap overlap = Overlap::none;
  u64 mtp = 0;              ///< tokens the MTP module drafts per step
  std::string accept = "1"; ///< each drafted token's acceptance
  std::string imbalance = "1";
  std::optional<DType> dispatch_dtype;
  bool explain = false;
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

/// One scenario of the sweep: its request and what the roofline made of it.
struct Scenario {
  const RooflineRequest& request;
  const RooflineResult& result;
};

struct Crossover {
  std::string deployment; ///< "model on gpu, tp N"
  MlaCrossover result;
  RooflineRequest request; ///< at its prefix
};

std::string scenario_label(const RooflineRequest& q, const RooflineResult& r) {
  std::string label = q.model.name;
  if (q.model.attention.kind == AttentionKind::mla) {
    label += " " + std::string(mla_mode_name(r.mla));
  }
  return label + (q.parallel.tp > 1 ? ", tp " + std::to_string(q.parallel.tp) : "") + ", context " +
         context_label(q.context);
}

/// The roofline of every op of every scenario and, for a batch sweep, throughput and time per
/// token against batch: what --plot draws, kept scenario by scenario as the sweep runs.
class StepPlot {
public:
  void add(const Scenario& s) {
    if (m_steps.empty()) {
      m_first_batch = s.request.batch;
      m_gpu = s.request.gpu.display_name;
      m_rates = s.request.rates;
    }
    Step& step = m_steps.emplace_back();
    step.label = scenario_label(s.request, s.result);
    step.batch = s.request.batch;
    step.tokens_per_s = s.result.tokens_per_s;
    step.time_per_token_s = s.result.time_per_token_s;
    for (const Op& o : s.result.ops) {
      if (o.communication || o.flops <= 0 || o.time_s <= 0) {
        continue;
      }
      PointStyle style = o.variant == "absorbed" ? PointStyle::absorbed
                         : o.variant == "naive"  ? PointStyle::naive
                                                 : PointStyle::other;
      step.points.push_back({o.intensity, o.flops / o.time_s, std::string(o.name), style, 0});
    }
  }

  void write(const std::string& path) const {
    RooflineChart chart;
    std::vector<std::string> names;
    for (const Step& step : m_steps) {
      if (std::find(names.begin(), names.end(), step.label) == names.end()) {
        names.push_back(step.label);
      }
    }
    if (names.size() == 1) {
      chart.title =
          "Roofline: " + names.front() + ", batch " + group_digits(m_first_batch) + " on " + m_gpu;
    } else {
      chart.title = "Roofline: " + std::to_string(names.size()) + " scenarios on " + m_gpu;
      chart.series = names;
    }
    // The ceilings' source, a profile named by its file alone: no home folder in a shared SVG.
    std::string source = m_rates.source;
    if (std::size_t at = source.find("device profile "); at != std::string::npos) {
      std::size_t start = at + 15;
      std::size_t end = source.find(' ', start);
      std::string file = source.substr(start, end - start);
      source.replace(start, file.size(), std::filesystem::path(file).filename().string());
    }
    chart.subtitle = "ceilings: " + source;
    chart.bandwidth_bytes_per_s = m_rates.bandwidth_bytes_per_s;
    const PeakFlops& f = m_rates.flops_per_s;
    if (auto bf16 = f.bf16 ? f.bf16 : f.fp16) {
      chart.ceilings.emplace_back("bf16", *bf16);
    }
    if (f.fp8) {
      chart.ceilings.emplace_back("fp8", *f.fp8);
    }
    bool single = m_steps.size() == 1;
    for (auto it = m_steps.rbegin(); it != m_steps.rend(); ++it) {
      auto series = static_cast<std::size_t>(std::find(names.begin(), names.end(), it->label) -
                                             names.begin());
      for (ChartPoint point : it->points) {
        // Label every op of one scenario; several are told apart by colour and the legend.
        if (!single) {
          point.label.clear();
        }
        point.series = series;
        chart.points.push_back(std::move(point));
      }
    }
    std::vector<LineChart> charts;
    bool sweep = std::any_of(m_steps.begin(), m_steps.end(),
                             [&](const Step& step) { return step.batch != m_first_batch; });
    if (sweep) {
      LineChart throughput;
      throughput.title = "Throughput against batch";
      throughput.x_label = "batch (sequences)";
      throughput.y_label = "tokens/s";
      LineChart latency;
      latency.title = "Time per token against batch";
      latency.x_label = "batch (sequences)";
      latency.y_label = "time per output token (s)";
      for (const Step& step : m_steps) {
        auto series = std::find_if(throughput.series.begin(), throughput.series.end(),
                                   [&](const LineSeries& x) { return x.name == step.label; });
        if (series == throughput.series.end()) {
          throughput.series.push_back({step.label, {}, {}});
          latency.series.push_back({step.label, {}, {}});
          series = throughput.series.end() - 1;
        }
        auto k = static_cast<std::size_t>(series - throughput.series.begin());
        throughput.series[k].xs.push_back(static_cast<double>(step.batch));
        throughput.series[k].ys.push_back(step.tokens_per_s);
        latency.series[k].xs.push_back(static_cast<double>(step.batch));
        latency.series[k].ys.push_back(step.time_per_token_s);
      }
      charts.push_back(std::move(throughput));
      charts.push_back(std::move(latency));
    }
    write_text_file(path, render_svg(chart, charts), "--plot");
  }

private:
  struct Step {
    std::string label;
    u64 batch = 0;
    double tokens_per_s = 0;
    double time_per_token_s = 0;
    std::vector<ChartPoint> points;
  };
  std::vector<Step> m_steps;
  u64 m_first_batch = 0;
  std::string m_gpu;
  DeviceRates m_rates;
};

/// What the command line asks, checked, with the ceilings: read or measured.
struct RooflineInputs {
  std::vector<u64> contexts;
  Efficiency efficiency;
  std::optional<DeviceProfile> profile;
  std::vector<Gpu> devices;
};

RooflineInputs read_inputs(const RooflineArgs& args, const std::vector<Model>& models,
                           std::vector<std::string>& warnings, std::ostream& err) {
  RooflineInputs in;
  in.contexts = args.contexts;
  if (args.prompt) {
    if (args.phase != Phase::prefill) {
      throw InputError("--prompt is the prefill length; add --phase prefill or use --context");
    }
    in.contexts = *args.prompt;
  }
  if (args.phase == Phase::prefill && args.query != 1) {
    throw InputError("--query is decode's tokens per step (extend: the chunk); a prefill step "
                     "takes the whole prompt, --prompt or --context");
  }
  check_plot_path(args.plot);

  if (args.mla_given) {
    for (const Model& m : models) {
      if (m.attention.kind != AttentionKind::mla) {
        warnings.push_back("--mla applies to MLA models; " + m.name + " is " +
                           std::string(attention_kind_name(m.attention.kind)) +
                           ", whose rows do not change with it");
      }
    }
  }
  in.efficiency = parse_efficiency(args.efficiency, "--efficiency");
  if ((!args.ceilings.device_profile.empty() || args.ceilings.measure) && in.efficiency.given) {
    throw InputError("--efficiency and measured ceilings (--device-profile, --measure) both "
                     "set the ceilings; give one");
  }
  const std::string how_to_measure =
      "add --measure, or a --device-profile that kvcalc measure wrote";
  GpuCatalog catalog(args.parallel.gpu_file);
  in.profile = read_ceilings(args.ceilings, args.parallel, catalog, how_to_measure, err);
  in.devices = deployment_devices(args.parallel, in.profile, catalog, how_to_measure, warnings);
  return in;
}

/// Every model on every GPU and tp: one request each, before the sweep of modes, contexts and
/// batches.
std::vector<RooflineRequest> base_requests(const RooflineArgs& args, const RooflineInputs& in,
                                           const std::vector<Model>& models) {
  std::vector<RooflineRequest> out;
  for (const Model& m : models) {
    for (const Gpu& gpu : in.devices) {
      for (u64 tp : args.parallel.tp_sweep()) {
        RooflineRequest& req = out.emplace_back();
        req.model = m;
        req.gpu = gpu;
        req.rates = in.profile ? device_rates(gpu, *in.profile)
                               : device_rates(gpu, in.efficiency.bandwidth, in.efficiency.flops);
        req.rates.links.domain = scale_up_domain(gpu, args.parallel.node_gpus());
        EstimateChoice estimate = choose_estimator(gpu, in.profile ? &*in.profile : nullptr);
        req.rates.estimate = std::move(estimate.estimator);
        req.rates.estimate_note = std::move(estimate.note);
        req.cache = args.cache;
        req.weight_dtype = args.parallel.weight_dtype;
        req.parallel.gpus = args.parallel.deployment_gpus().value_or(0);
        req.parallel.tp = tp;
        req.parallel.pp = args.parallel.pp;
        req.parallel.ep = args.parallel.ep;
        req.parallel.dp_attention = args.parallel.dp_attention;
        req.parallel.dp = args.parallel.dp;
        req.parallel.redundant_experts = args.parallel.redundant_experts;
        req.phase = args.phase;
        req.query = args.query;
        req.naive_kv = args.naive_kv;
        req.communication = !args.no_communication;
        req.overlap = args.overlap;
        req.draft_tokens = args.mtp;
        req.acceptance = parse_fraction(args.accept, "--accept", 0.0, 1.0);
        req.expert_imbalance = parse_fraction(args.imbalance, "--expert-imbalance", 1.0, 64.0);
        req.dispatch_dtype = args.dispatch_dtype;
      }
    }
  }
  return out;
}

/// Calls `each(request, roofline, error)` for every scenario of the sweep, in order: each model
/// on each GPU and tp, each --mla mode (MLA models), context and batch. Each deployment is
/// prepared once (Roofline); one that cannot be comes with its error instead. One request is
/// filled in place, so a scenario copies no model.
template <class F>
void for_each_scenario(const RooflineArgs& args, const std::vector<RooflineRequest>& bases,
                       const RooflineInputs& in, F each) {
  for (RooflineRequest req : bases) {
    bool mla = req.model.attention.kind == AttentionKind::mla;
    for (MlaMode mode : mla ? args.mla : std::vector<MlaMode>{MlaMode::automatic}) {
      req.mla = mode;
      std::optional<Roofline> roofline;
      std::optional<Error> error = attempt([&] { roofline.emplace(req); });
      for (u64 c : in.contexts) {
        req.context = c;
        for (u64 b : args.batches_per_gpu.value_or(args.batches)) {
          req.batch =
              args.batches_per_gpu ? checked_mul(b, req.parallel.tp, "--batch-per-gpu × tp") : b;
          each(std::as_const(req), roofline ? &*roofline : nullptr, error ? &*error : nullptr);
        }
      }
    }
  }
}

std::vector<Crossover> run_crossovers(const RooflineArgs& args, const RooflineInputs& in,
                                      const std::vector<Model>& models) {
  std::vector<Crossover> out;
  for (RooflineRequest req : base_requests(args, in, models)) {
    req.batch = args.batches.front();
    for (u64 c : in.contexts) {
      req.context = c;
      out.push_back(
          {req.model.name + " on " + req.gpu.name + ", tp " + group_digits(req.parallel.tp),
           mla_crossover(req), req});
    }
  }
  return out;
}

/// The crossover as people see it: attention time per step of absorbed and naive against the
/// chunk s, one pair of lines per prefix, and where they cross.
void write_crossover_plot(const std::string& path, const std::vector<Crossover>& crossovers) {
  LineChart chart;
  chart.title = "MLA attention time per step against chunk size";
  chart.x_label = "new tokens per sequence in the step (s)";
  chart.y_label = "attention time per step (s)";
  chart.y_unit = "s";
  chart.x_unit = "count";
  for (const Crossover& c : crossovers) {
    std::string prefix = c.deployment + ", prefix " + context_label(c.result.prefix);
    LineSeries absorbed{"absorbed: " + prefix, {}, {}};
    LineSeries naive{"naive: " + prefix, {}, {}};
    u64 limit = std::max<u64>(4 * c.result.prefix, 16);
    for (u64 s = 1; s <= limit; s *= 2) {
      absorbed.xs.push_back(static_cast<double>(s));
      absorbed.ys.push_back(mla_attention_time(c.request, MlaMode::absorbed, s));
      naive.xs.push_back(static_cast<double>(s));
      naive.ys.push_back(mla_attention_time(c.request, MlaMode::naive, s));
    }
    chart.series.push_back(std::move(absorbed));
    chart.series.push_back(std::move(naive));
  }
  write_text_file(path, render_svg({chart}), "--plot");
}

Record describe_op(const Op& o, double step_s, bool estimated) {
  Record r;
  r.reserve(17);
  r.value("name", "op", Cell::text(std::string(o.name)));
  r.value("dtype", "dtype", Cell::text(std::string(o.dtype)));
  r.value("flops", "FLOPs", Cell::flop(o.flops));
  r.value("bytes", "bytes", Cell::byte_estimate(o.bytes));
  r.value("weight_bytes", Cell::byte_estimate(o.weight_bytes));
  r.value("activation_bytes", Cell::byte_estimate(o.activation_bytes));
  r.value("kv_bytes", Cell::byte_estimate(o.kv_bytes));
  r.value("intensity", "FLOP/B", Cell::number(o.intensity));
  r.value("attainable_flops_per_s", Cell::flops(o.attainable));
  r.value("bound", "bound",
          o.communication   ? Cell::text(o.collective->link())
          : o.compute_bound ? Cell::text("compute")
                            : Cell::text("memory"));
  r.value("time_s", "time", Cell::seconds(o.time_s));
  r.value("exposed_s", "exposed", Cell::seconds(o.exposed_s));
  if (estimated) {
    Record& e = r.object("estimate");
    e.value("time_s", "estimate", Cell::seconds(o.estimate_s));
    e.value("exposed_s", "est. exposed", Cell::seconds(o.estimate_exposed_s));
  } else {
    r.value("estimate", Cell::empty(), k_json_only);
  }
  r.value("variant", o.variant.empty() ? Cell::empty() : Cell::text(std::string(o.variant)));
  if (o.collective) {
    const Collective& c = *o.collective;
    Record& x = r.object("collective");
    x.value("algorithm", Cell::text(std::string(c.algorithm)));
    x.value("count", Cell::number(o.collectives));
    x.value("group", Cell::count(c.group));
    x.value("domains", Cell::count(c.domains));
    x.value("scale_up_bytes", Cell::byte_estimate(c.up_bytes));
    x.value("scale_out_bytes", Cell::byte_estimate(c.out_bytes));
    x.value("latency_s", Cell::seconds(c.latency_s));
    x.value("time_s", Cell::seconds(c.time_s));
  } else {
    r.value("collective", Cell::empty(), k_json_only);
  }
  r.value("share", "share", Cell::share(o.exposed_s / step_s), k_tables_only);
  return r;
}

/// Entries of a step's description, within a few: its record grows in one allocation.
constexpr std::size_t k_step_entries = 32;

/// One step: the deployment, the step's shape on each GPU, every op (when `with_ops`: the view
/// reads them) and the totals.
Record describe_step(const Scenario& s, const kv::Deployment& dep, bool with_ops) {
  const RooflineRequest& q = s.request;
  const RooflineResult& res = s.result;
  bool mla = q.model.attention.kind == AttentionKind::mla;
  Record r;
  r.reserve(k_step_entries);
  r.value("model", "model", Cell::text(q.model.name));
  r.value("gpu", "gpu", Cell::text(q.gpu.name));
  r.value("gpus", "gpus", Cell::count(res.gpus));
  r.value("tp", "tp", Cell::count(q.parallel.tp));
  r.value("ep", Cell::count(dep.parallel.ep));
  r.value("pp", Cell::count(q.parallel.pp));
  r.value("dp_attention", Cell::flag(dep.parallel.dp_attention));
  r.value("attention_dp", Cell::count(dep.attention_dp));
  r.value("overlap", Cell::text(std::string(overlap_name(q.overlap))));
  r.value("mtp", Cell::count(q.draft_tokens));
  r.value("acceptance", Cell::number(q.acceptance));
  r.value("expert_imbalance", Cell::number(q.expert_imbalance));
  r.value("phase", "phase", Cell::text(std::string(phase_name(q.phase))));
  r.value("mla", "mla", mla ? Cell::text(std::string(mla_mode_name(res.mla))) : Cell::empty());
  r.value("batch", "batch", Cell::count(q.batch));
  r.value("batch_per_gpu", Cell::count(res.batch_per_gpu));
  r.value("context", "context", Cell::count(q.context));
  r.value("query_tokens", "s", Cell::count(res.query));
  r.value("attended_tokens", Cell::count(res.attended));
  r.value("attended_effective", Cell::number(res.attended_effective));
  r.value("heads_per_gpu", Cell::number(res.heads));
  r.value("layers_per_gpu", Cell::count(res.layers));
  r.value("rates", Cell::text(res.rates_source));
  if (with_ops) {
    auto& ops = r.list("ops");
    ops.reserve(res.ops.size());
    for (const Op& o : res.ops) {
      ops.push_back(describe_op(o, res.stage_s, res.estimate.has_value()));
    }
  }
  Record& total = r.object("total");
  total.value("flops", Cell::flop(res.flops));
  total.value("bytes", Cell::byte_estimate(res.bytes));
  total.value("compute_s", Cell::seconds(res.compute_s));
  total.value("communication_s", Cell::seconds(res.communication_s));
  total.value("stage_s", Cell::seconds(res.stage_s));
  total.value("stage_transfer_s",
              res.stage_transfer ? Cell::seconds(res.stage_transfer->time_s) : Cell::empty());
  total.value("time_s", "step", Cell::seconds(res.time_s));
  total.value("tokens_per_step", Cell::number(res.tokens_per_step));
  total.value("tokens_per_s", "tokens/s", Cell::number(res.tokens_per_s));
  total.value("tokens_per_s_per_gpu", "tok/s/GPU", Cell::number(res.tokens_per_s_per_gpu));
  total.value("time_per_token_s", "per token", Cell::seconds(res.time_per_token_s));
  if (res.estimate) {
    const StepEstimate& e = *res.estimate;
    Record& x = r.object("estimate");
    x.value("compute_s", Cell::seconds(e.compute_s));
    x.value("communication_s", Cell::seconds(e.communication_s));
    x.value("stage_s", Cell::seconds(e.stage_s));
    x.value("time_s", "est. step", Cell::seconds(e.time_s));
    x.value("tokens_per_s", "est. tokens/s", Cell::number(e.tokens_per_s));
    x.value("tokens_per_s_per_gpu", "est. tok/s/GPU", Cell::number(e.tokens_per_s_per_gpu));
    x.value("time_per_token_s", "est. per token", Cell::seconds(e.time_per_token_s));
    x.value("dominant", Cell::text(std::string(e.dominant)));
  } else {
    r.value("estimate", Cell::empty(), k_json_only);
  }
  r.value("estimate_source", Cell::text(res.estimate_note));
  r.value("dominant", "dominant op", Cell::text(std::string(res.dominant)));
  describe_outcome(r, res.weights_fit ? Outcome::ok : Outcome::does_not_fit,
                   res.weights_fit ? std::string() : res.notes.front());
  return r;
}

/// The figures of a step's total that its table row shows.
constexpr std::array<const char*, 4> k_step_figures{"time_s", "tokens_per_s",
                                                    "tokens_per_s_per_gpu", "time_per_token_s"};

/// A step that was not priced: what it was, and why (its table row says n/a).
Record describe_unpriced(const RooflineRequest& q, Outcome outcome, const std::string& reason) {
  bool mla = q.model.attention.kind == AttentionKind::mla;
  Record r;
  r.value("model", "model", Cell::text(q.model.name));
  r.value("gpu", "gpu", Cell::text(q.gpu.name));
  r.value("tp", "tp", Cell::count(q.parallel.tp));
  r.value("pp", Cell::count(q.parallel.pp));
  r.value("phase", "phase", Cell::text(std::string(phase_name(q.phase))));
  u64 s = new_tokens(q);
  r.value("mla", "mla",
          mla ? Cell::text(std::string(mla_mode_name(resolve_mla_mode(q.mla, q.phase, s))))
              : Cell::empty());
  r.value("batch", "batch", Cell::count(q.batch));
  r.value("context", "context", Cell::count(q.context));
  r.value("query_tokens", "s", Cell::count(s));
  Cell none = Cell::empty().shown_as("n/a");
  Record& total = r.object("total", k_tables_only);
  for (const char* key : k_step_figures) {
    total.value(key, none);
  }
  Record& estimate = r.object("estimate", k_tables_only);
  for (const char* key : k_step_figures) {
    estimate.value(key, none);
  }
  r.value("dominant", none, k_tables_only);
  describe_outcome(r, outcome, reason);
  return r;
}

Record describe_crossover(const Crossover& c) {
  const MlaCrossover& x = c.result;
  Record r;
  r.value("deployment", "deployment", Cell::text(c.deployment));
  r.value("prefix", "prefix P", Cell::count(x.prefix));
  r.value("flop_ratio", "FLOP ratio s·t_eff/P",
          x.flop_ratio ? Cell::number(*x.flop_ratio) : Cell::empty().shown_as("never"));
  r.value("flop_query", "s at equal FLOPs",
          x.flop_query ? Cell::number(*x.flop_query) : Cell::empty().shown_as("never"));
  r.value("time_query", "s where naive is faster",
          x.time_query ? Cell::count(x.time_query) : Cell::empty().shown_as("none"));
  return r;
}

void render_crossovers(CommandOutput& out, const std::vector<Crossover>& crossovers) {
  std::vector<ColumnRef> columns{
      {"deployment"}, {"prefix"}, {"flop_ratio"}, {"flop_query"}, {"time_query"}};
  Output::TableId t = out->begin_table(
      "MLA: where absorbed stops paying (chunks of s tokens over a prefix of P)", columns);
  out->csv_view(columns);
  out->begin_list("crossovers");
  for (const Crossover& c : crossovers) {
    out->item(describe_crossover(c));
  }
  out->end_list();
  out->note(t, "absorbed costs fewer FLOPs while s·t_eff/P stays below the ratio; the time "
               "crossover differs because the two modes sit on opposite sides of the ridge");
  if (std::any_of(crossovers.begin(), crossovers.end(),
                  [](const Crossover& c) { return !c.result.flop_ratio; })) {
    out->note(t, "'never': with 2·d_c ≤ d_nope + d_v the latent is so narrow that absorbed "
                 "costs fewer FLOPs at every s");
  }
}

/// --explain: the step's shape on one GPU, every width and weight the op formulas read
/// (StepShape).
std::vector<std::string> explain_shape(const StepShape& x, ByteUnits units) {
  auto n = [](double v) { return fmt::format("{:g}", v); };
  auto bytes = [&](double v) { return format_cell(Cell::byte_estimate(v), units); };
  std::vector<std::string> out;
  out.push_back(fmt::format(
      "  on one GPU: {} layers ({} with a token mixer, {} dense MLP, {} MoE); attention split "
      "over {} GPUs, attending {} of the copy's sequences; activations {} B an element",
      x.layers.stage, n(x.layers.mixers), n(x.layers.dense), n(x.layers.moe),
      n(x.split.attention_tp),
      x.split.attention_share == 1 ? std::string("all") : "1/" + n(1 / x.split.attention_share),
      n(x.activation_bytes)));
  auto geometry = [&](const char* name, const AttentionGeometry& g) {
    if (g.layers == 0) {
      return;
    }
    std::string line =
        fmt::format("  {}: {} layers, {} query heads and {} KV heads of {} (V {})", name,
                    n(g.layers), n(g.heads), n(g.kv_heads), n(g.head_dim), n(g.v_head_dim));
    if (g.w_qkv > 0) {
      line += "; q/k/v projection " + bytes(g.w_qkv) + " a layer";
    }
    out.push_back(line + ", output projection " + bytes(g.w_o) + " a layer, math in " +
                  std::string(dtype_name(x.math.attention)));
  };
  geometry("attention", x.main);
  geometry("sliding attention", x.sliding);
  static constexpr std::array<const char*, k_attention_kinds_priced> k_kind_names{"full", "sliding",
                                                                                  "chunked"};
  for (std::size_t i = 0; i < x.present_count; ++i) {
    const AttentionKindShape& k = x.kinds[x.present[i]];
    out.push_back(fmt::format("  {} layers: {} attend, {} store KV at {} a token a layer; a "
                              "query attends {}",
                              k_kind_names[x.present[i]], n(k.layers), n(k.stored),
                              bytes(k.kv_rate),
                              k.cap > 0 ? "at most " + n(k.cap) + " tokens" : "every token"));
  }
  if (x.mla_model) {
    const StepShape::Mla& m = x.mla;
    out.push_back(fmt::format(
        "  MLA: query width {}; weights a layer: {}, kv_down {}, W_UK + W_UV {} ({})", n(m.q_out),
        m.w_q > 0 ? "q_proj " + bytes(m.w_q)
                  : "q_down " + bytes(m.w_q_down) + ", q_up " + bytes(m.w_q_up),
        bytes(m.w_kv_down), bytes(m.w_absorb), dtype_name(x.math.absorb)));
  }
  if (x.indexer.layers > 0) {
    out.push_back(fmt::format("  DSA indexer: {} layers, {} heads of {}, keys {} a token, "
                              "weights {} a layer",
                              n(x.indexer.layers), n(x.indexer.heads), n(x.indexer.head_dim),
                              bytes(x.indexer.rate), bytes(x.indexer.weights)));
  }
  if (x.state.layers > 0) {
    out.push_back(fmt::format("  state layers: {}, a sequence's state {} a layer ({} "
                              "elements), projections {} a layer",
                              n(x.state.layers), bytes(x.state.bytes), n(x.state.elements),
                              bytes(x.state.weights)));
  }
  if (x.layers.dense > 0) {
    out.push_back(
        fmt::format("  dense MLP: width {}, {} a matrix", n(x.ffn.mlp_width), bytes(x.ffn.w_mlp)));
  }
  if (x.layers.moe > 0) {
    std::string line = fmt::format(
        "  experts: {} here of ep {}, each split over {} GPUs, {} a matrix, math in {}; the "
        "group serves the tokens of {} {}",
        n(x.split.experts_local), n(x.split.ep), n(x.split.expert_tp), bytes(x.ffn.w_expert),
        dtype_name(x.math.expert), n(x.split.expert_copies),
        x.split.expert_copies == 1 ? "copy" : "copies");
    if (x.ffn.shared_width > 0) {
      line += fmt::format("; shared experts width {}, {} a matrix", n(x.ffn.shared_width),
                          bytes(x.ffn.w_shared));
    }
    if (x.split.all_to_all) {
      line +=
          fmt::format("; all-to-all: a token dispatched in {} B ({}), {} of its group's GPUs "
                      "in one scale-up domain",
                      n(x.ffn.dispatch_bytes), dtype_name(x.math.dispatch), x.split.expert_local);
    }
    out.push_back(line);
  }
  if (x.other.params > 0) {
    out.push_back(fmt::format("  weights no formula places: {} parameters, {}", n(x.other.params),
                              bytes(x.other.weights)));
  }
  return out;
}

/// --explain: each collective with the links it crosses, its bytes, α and β; the pipeline and
/// the overlap.
std::vector<std::string> explain_step(const Scenario& s, const kv::Deployment& dep,
                                      const StepShape& shape, ByteUnits units) {
  const RooflineRequest& q = s.request;
  const RooflineResult& res = s.result;
  const Topology& links = q.rates.links;
  auto sec = [&](double v) { return format_cell(Cell::seconds(v), units); };
  auto bytes = [&](double v) { return format_cell(Cell::byte_estimate(v), units); };
  auto rate = [&](double v) { return format_cell(Cell::bytes_per_s(v), units); };
  auto describe = [&](const Collective& c) {
    std::string line = std::string(c.algorithm) + " over " + group_digits(c.group) + " GPUs";
    if (c.domains > 1) {
      line += " in " + group_digits(c.domains) + " domains of " + group_digits(c.group / c.domains);
    }
    line += ": each GPU sends";
    if (c.up_bytes > 0) {
      line += " " + bytes(c.up_bytes) + " over scale-up (β " + rate(links.up_bytes_per_s) + ")";
    }
    if (c.out_bytes > 0) {
      line += std::string(c.up_bytes > 0 ? " and" : "") + " " + bytes(c.out_bytes) +
              " over scale-out (β " + rate(links.out_bytes_per_s) + ")";
    }
    return line + ", α " + sec(c.latency_s) + " ⇒ " + sec(c.time_s);
  };
  std::vector<std::string> out;
  std::string layout = "tp " + group_digits(q.parallel.tp) + ", pp " + group_digits(q.parallel.pp) +
                       ", ep " + group_digits(dep.parallel.ep);
  if (dep.parallel.dp_attention) {
    layout += ", attention dp " + group_digits(dep.attention_dp) + " × tp " +
              group_digits(dep.attention_tp);
  }
  out.push_back(q.model.name + " on " + group_digits(res.gpus) + " × " + q.gpu.name + " (" +
                layout + "), batch " + group_digits(q.batch) + ", " +
                group_digits(res.batch_per_gpu) + " sequences per attention group; links: " +
                (links.domain ? group_digits(links.domain) + " GPUs per scale-up domain"
                              : "scale-up domain not stated") +
                (links.out_bytes_per_s > 0 ? ", NIC " + rate(links.out_bytes_per_s) : ", no NIC"));
  for (std::string& line : explain_shape(shape, units)) {
    out.push_back(std::move(line));
  }
  for (const Op& o : res.ops) {
    if (o.collective) {
      out.push_back("  " + std::string(o.name) + ": " + describe(*o.collective) + " each, × " +
                    fmt::format("{:g}", o.collectives) + " = " + sec(o.time_s));
    }
  }
  if (res.stage_transfer) {
    out.push_back("  pipeline: " + describe(*res.stage_transfer) + " at each of " +
                  group_digits(q.parallel.pp - 1) +
                  " stage boundaries; step = " + group_digits(q.parallel.pp) + " × " +
                  sec(res.stage_s) + " + transfers = " + sec(res.time_s));
  }
  out.push_back("  compute " + sec(res.compute_s) + ", communication " + sec(res.communication_s) +
                (q.overlap == Overlap::two_batch
                     ? " in two half batches; the shorter runs under the longer: " +
                           sec(res.stage_s) + " per stage"
                     : ", one after the other: " + sec(res.stage_s) + " per stage"));
  if (q.draft_tokens > 0) {
    out.push_back("  MTP: " + group_digits(q.draft_tokens) +
                  (q.draft_tokens == 1 ? " drafted token" : " drafted tokens") +
                  " per step, each kept with chance " + fmt::format("{:g}", q.acceptance) +
                  " after the one before: " + fmt::format("{:.4g}", res.tokens_per_step) +
                  " tokens per request per step");
  }
  return out;
}

/// The summary's columns: the table's, each figure of the bound followed by the estimate's
/// (`estimates`: some GPU of the sweep has one), and in CSV the outcome.
std::vector<ColumnRef> summary_columns(bool estimates) {
  std::vector<ColumnRef> columns{{"model"}, {"gpu"},   {"tp"},      {"phase"},
                                 {"mla"},   {"batch"}, {"context"}, {"query_tokens", "", "query"}};
  for (const char* figure : k_step_figures) {
    columns.push_back({"total." + std::string(figure), "", figure});
    if (estimates) {
      columns.push_back({"estimate." + std::string(figure), "", "estimate_" + std::string(figure)});
    }
  }
  columns.push_back({"dominant"});
  return columns;
}

/// The scenarios of a sweep as they are priced: each described and written at once, what the
/// notes, the plot and the exit code need kept.
class StepStream {
public:
  /// `estimates`: some scenario of the sweep runs on a GPU with an estimate.
  StepStream(CommandOutput& out, const RooflineArgs& args, std::size_t scenarios, bool estimates)
      : m_out(out), m_args(args),
        // People read every op of one scenario, or of each with --ops.
        m_op_tables(out->for_people() && (args.ops || scenarios == 1)) {
    m_summary = out->begin_table("", summary_columns(estimates));
    // The CSV keeps one set of columns whatever the GPUs: an estimate's are empty without one.
    std::vector<ColumnRef> columns = summary_columns(true);
    columns.insert(columns.end(), {{"status"}, {"reason"}});
    out->csv_view(columns);
    out->begin_list("scenarios");
    m_op_columns = {{"name"},      {"dtype"}, {"flops"}, {"bytes"},
                    {"intensity"}, {"bound"}, {"time_s"}};
    if (estimates) {
      m_op_columns.push_back({"estimate.time_s"});
    }
    if (args.overlap != Overlap::none) {
      m_op_columns.push_back({"exposed_s"});
      if (estimates) {
        m_op_columns.push_back({"estimate.exposed_s"});
      }
    }
    m_op_columns.push_back({"share"});
    if (!args.plot.empty()) {
      m_plot.emplace();
    }
  }

  /// A step that was priced.
  void priced(const Scenario& s, const Roofline& roofline) {
    const RooflineRequest& q = s.request;
    m_out->stream(); // one combination priced: the sweep's result stands
    for (const std::string& note : s.result.notes) {
      say_once(note);
    }
    m_outcomes.add(s.result.weights_fit ? Outcome::ok : Outcome::does_not_fit);
    if (m_priced++ == 0) {
      m_out->note(m_summary, "ceilings: " + s.result.rates_source +
                                 (q.overlap == Overlap::none
                                      ? "; ops run one after another (no overlap)"
                                      : "; two-batch overlap: the shorter of compute and "
                                        "communication runs under the longer"));
    }
    if (m_estimate_notes.insert(s.result.estimate_note).second) {
      m_out->note(m_summary, s.result.estimate
                                 ? "estimate (est.): what the kernels reach, from the " +
                                       s.result.estimate_note
                                 : s.result.estimate_note);
    }
    if (m_plot) {
      m_plot->add(s);
    }
    Record described =
        describe_step(s, roofline.deployment(), m_out->format() == Format::json || m_op_tables);
    m_out->item(described);
    if (m_args.explain && m_out->for_people()) {
      for (std::string& line :
           explain_step(s, roofline.deployment(), roofline.shape(), m_args.output.units)) {
        m_out->text_after(std::move(line));
      }
    }
    if (m_op_tables) {
      std::vector<const Record*> ops;
      for (const Record& op : described.records("ops")) {
        ops.push_back(&op);
      }
      m_out->table(q.model.name + " on " + q.gpu.name + ", batch " + group_digits(q.batch) +
                       ", context " + group_digits(q.context) +
                       (q.model.attention.kind == AttentionKind::mla
                            ? ", " + std::string(mla_mode_name(s.result.mla))
                            : ""),
                   ops, m_op_columns);
    }
  }

  /// A step that could not be priced, for `error`'s reason.
  void unpriced(const RooflineRequest& q, const Error& error) {
    m_outcomes.add(error);
    m_out->item(describe_unpriced(q, outcome_of(error), error.what()));
    std::string note =
        outcome_note(q.model.name, q.gpu.name, q.parallel.tp, outcome_of(error), error.what());
    if (m_unpriced_seen.insert(note).second) {
      m_unpriced.push_back(std::move(note));
    }
  }

  /// The list closed, the notes under the table, the plot: the exit code.
  int finish(std::ostream& err) {
    m_out->end_list();
    m_outcomes.throw_if_none_ran();
    for (std::string& note : m_unpriced) {
      m_out->note(m_summary, std::move(note));
    }
    if (m_plot) {
      m_plot->write(m_args.plot);
      err << "kvcalc: wrote " << m_args.plot << '\n';
    }
    return m_outcomes.exit_code();
  }

private:
  /// A warning, kept once however many steps repeat it (a deployment's weights that do not fit).
  void say_once(const std::string& warning) {
    if (m_warnings_seen.insert(warning).second) {
      m_out.warnings.push_back(warning);
    }
  }

  CommandOutput& m_out;
  const RooflineArgs& m_args;
  bool m_op_tables;
  Output::TableId m_summary = 0;
  std::vector<ColumnRef> m_op_columns;
  std::optional<StepPlot> m_plot;
  SweepOutcomes m_outcomes;
  std::size_t m_priced = 0;
  std::unordered_set<std::string> m_warnings_seen;
  std::unordered_set<std::string> m_unpriced_seen;
  std::unordered_set<std::string> m_estimate_notes; ///< said under the table, each once
  std::vector<std::string> m_unpriced; ///< why steps were not priced, each once, in order
};

/// Every scenario of the sweep, computed, described and written one at a time; returns the exit
/// code: the worst outcome (docs/cli.md).
int stream_steps(CommandOutput& out, const RooflineArgs& args, const RooflineInputs& in,
                 const std::vector<Model>& models, std::ostream& err) {
  check_sweep({{"models", models.size()},
               {"GPUs", in.devices.size()},
               {"tp", args.parallel.tp_sweep().size()},
               {"--mla modes", args.mla.size()},
               {"contexts", in.contexts.size()},
               {"--batch", args.batches_per_gpu.value_or(args.batches).size()}});
  std::vector<RooflineRequest> bases = base_requests(args, in, models);
  std::size_t count = 0;
  for (const RooflineRequest& base : bases) {
    bool mla = base.model.attention.kind == AttentionKind::mla;
    count += (mla ? args.mla.size() : 1) * in.contexts.size() *
             args.batches_per_gpu.value_or(args.batches).size();
  }
  bool estimates = std::any_of(bases.begin(), bases.end(), [](const RooflineRequest& r) {
    return r.rates.estimate != nullptr;
  });
  StepStream stream(out, args, count, estimates);
  RooflineResult result; // one buffer for every scenario
  for_each_scenario(
      args, bases, in,
      [&](const RooflineRequest& q, const Roofline* roofline, const Error* deployment_error) {
        std::optional<Error> error;
        if (deployment_error) {
          // The step's own checks first, as compute_roofline makes them.
          error = attempt([&] { check_step(q); });
          error = error ? error : *deployment_error;
        } else {
          error = attempt([&] { roofline->step(q, result); });
        }
        if (error) {
          stream.unpriced(q, *error);
        } else {
          stream.priced(Scenario{q, result}, *roofline);
        }
      });
  return stream.finish(err);
}

int run_roofline(const RooflineArgs& args, std::ostream& out, std::ostream& err) {
  CommandOutput output(args.output, args.mla_crossover ? "roofline-mla-crossover" : "roofline", out,
                       err);
  std::vector<Model> models = load_models(args.models, output.warnings);
  RooflineInputs in = read_inputs(args, models, output.warnings, err);
  int code = 0;
  if (args.mla_crossover) {
    std::vector<Crossover> crossovers = run_crossovers(args, in, models);
    if (!args.plot.empty()) {
      write_crossover_plot(args.plot, crossovers);
      err << "kvcalc: wrote " << args.plot << '\n';
    }
    render_crossovers(output, crossovers);
  } else {
    code = stream_steps(output, args, in, models, err);
  }
  output.finish();
  return code;
}

} // namespace

Command setup_roofline(const Options& app) {
  auto args = std::make_shared<RooflineArgs>();
  Options cmd = app.subcommand(
      "roofline",
      "One prefill or decode step, op by op, on a GPU's roofline (MLA absorbed vs naive)");
  cmd.option("models", args->models, k_models_help).type_name("MODEL").required();
  add_parsed(cmd, "--batch", args->batches, parse_batches,
             "Sequences per step: a list (1,16,128) or a range of powers of two (1-256) "
             "[default: 1]")
      .type_name("N,...|A-B")
      .group(k_group_workload);
  add_counts(cmd, "--context", args->contexts,
             "Tokens: in the cache (decode), the prompt (prefill), the cached prefix (extend); a "
             "list sweeps [default: 4k]")
      .type_name("TOKENS,...")
      .group(k_group_workload);
  add_parsed(
      cmd, "--prompt", args->prompt,
      [](const std::string& text, const std::string& flag) {
        return std::optional<std::vector<u64>>(parse_count_list(text, flag));
      },
      "Prefill: the prompt length (= --context)")
      .type_name("TOKENS,...")
      .group(k_group_workload);
  add_choice(cmd, "--phase", args->phase, k_phases,
             "decode (s new tokens per request), prefill (a prompt, no prefix) or extend (a "
             "chunk of s tokens over a cached prefix)")
      .group(k_group_workload);
  add_count(cmd, "--query", args->query,
            "s: decode tokens per request per step (2+ for MTP/speculative), or the extend "
            "chunk [default: 1]")
      .type_name("TOKENS")
      .group(k_group_workload);
  add_choice_list(cmd, "--mla", args->mla, k_mla_modes,
                  "MLA mode: absorbed, naive, auto (absorbed for chunks of ≤ 128 tokens, naive "
                  "for prefill); a comma-separated list compares")
      .each([args](const std::string&) { args->mla_given = true; })
      .group(k_group_workload);
  add_choice(cmd, "--naive-kv", args->naive_kv, k_naive_kv,
             "Naive MLA: fused (decompressed K/V stay on chip) or materialized (written and read "
             "back)")
      .group(k_group_workload);
  add_parsed(
      cmd, "--batch-per-gpu", args->batches_per_gpu,
      [](const std::string& text, const std::string& flag) {
        return std::optional<std::vector<u64>>(parse_batches(text, flag));
      },
      "Sequences per GPU instead of --batch: batch = this × tp (a list or range sweeps)")
      .type_name("N,...|A-B")
      .group(k_group_workload);
  add_count(cmd, "--mtp", args->mtp,
            "Decode with the model's MTP module drafting N tokens per step; the step verifies "
            "1 + N [default: 0]")
      .type_name("N")
      .group(k_group_workload);
  cmd.option("--accept", args->accept,
             "MTP: each drafted token's chance to be kept, given the one before was "
             "[default: 1]")
      .type_name("P")
      .group(k_group_workload);
  cmd.flag("--mla-crossover", args->mla_crossover,
           "Report where absorbed MLA stops paying: the FLOP and the time crossover in chunk "
           "length over each --context prefix")
      .group(k_group_workload);
  add_cache_options(cmd, args->cache);
  add_parallel_options(cmd, args->parallel, ParallelScope::step, true);
  cmd.flag("--no-comm", args->no_communication,
           "Leave out the collectives: TP all-reduce, expert dispatch and combine, pipeline "
           "transfers")
      .group(k_group_deployment);
  add_step_pricing_options(cmd, args->overlap, args->imbalance);
  add_parsed(cmd, "--dispatch-dtype", args->dispatch_dtype, dtype_option,
             "Expert dispatch payload: fp8 (with a scale per 128) or bf16 [default: fp8 where "
             "the experts compute in fp8, else the activation dtype]")
      .type_name("DTYPE")
      .group(k_group_deployment);
  cmd.option("--efficiency", args->efficiency,
             "Scale the datasheet ceilings: bw=F,flops=F (e.g. bw=0.85,flops=0.7) [default: "
             "1, the datasheet]")
      .type_name("bw=F,flops=F")
      .group(k_group_ceilings);
  add_ceiling_options(cmd, args->ceilings,
                      "Measured ceilings (a profile `kvcalc measure --profile` writes) instead of "
                      "the datasheet's");
  cmd.flag("--ops", args->ops, "Print the op table of every scenario").group(k_group_output);
  cmd.flag("--explain", args->explain,
           "Print the step's shape on one GPU, each collective with its links, bytes, α and "
           "β, the pipeline and the overlap")
      .group(k_group_output);
  cmd.option("--plot", args->plot,
             "Write an SVG: the roofline with every op, and for a batch sweep throughput and "
             "time per token against batch")
      .type_name("FILE.svg")
      .group(k_group_output);
  add_output_options(cmd, args->output, ScaledBytes::yes);
  return {cmd.app(),
          [args](std::ostream& out, std::ostream& err) { return run_roofline(*args, out, err); }};
}

} // namespace kvcalc::cli
