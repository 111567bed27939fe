// `simulate`: a serving instance over time, on a synthetic workload or a trace.

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <fstream>
#include <ostream>

#include <fmt/format.h>

#include <memory>

#include <kvcalc/core/error.hpp>
#include <kvcalc/core/file.hpp>
#include <kvcalc/core/units.hpp>
#include <kvcalc/report/svg.hpp>
#include <kvcalc/sim/simulator.hpp>
#include <kvcalc/sim/trace.hpp>

#include "deployment.hpp"

namespace kvcalc::cli {

namespace {

struct SimulateArgs {
  std::vector<std::string> models;
  std::string workload;                  ///< workload YAML (docs/simulate.md)
  std::string trace;                     ///< CSV or JSONL requests
  std::optional<ArrivalProcess> arrival; ///< overrides the workload's
  std::vector<double> rates;             ///< requests per second, a list sweeps
  std::string prompt_tokens;             ///< length distribution
  std::string output_tokens;
  std::string duration;
  std::optional<u64> requests;
  std::string seed;
  Preemption preemption = Preemption::recompute;
  std::string swap_bandwidth = "25GB"; ///< bytes per second, one GPU's host link
  bool no_prefix_sharing = false;
  MlaMode mla = MlaMode::automatic;
  std::string efficiency;
  std::string device_profile;
  std::string timeline; ///< per-step CSV file
  std::string plot;     ///< SVG file
  std::optional<u64> block_size;
  CacheRequest cache;
  ParallelOptions parallel = ParallelOptions::on({"h100-sxm"});
  EngineOptions engine = EngineOptions::of(Engine::vllm);
  OutputOptions output;
};

/// The synthetic workload of the options: the YAML's, with the command line on top.
Workload synthetic_workload(const SimulateArgs& args) {
  Workload w;
  if (!args.workload.empty()) {
    w = parse_workload(read_text_file(args.workload), args.workload);
  } else {
    w.prompt = parse_length_distribution("1024", "--prompt-tokens");
    w.output = parse_length_distribution("256", "--output-tokens");
  }
  if (args.arrival) {
    w.arrival = *args.arrival;
  }
  if (!args.prompt_tokens.empty()) {
    w.prompt = parse_length_distribution(args.prompt_tokens, "--prompt-tokens");
  }
  if (!args.output_tokens.empty()) {
    w.output = parse_length_distribution(args.output_tokens, "--output-tokens");
  }
  if (!args.duration.empty()) {
    double d = parse_fraction(args.duration, "--duration", 0.0, 1e12);
    if (d <= 0) {
      throw InputError("--duration must be above 0 seconds");
    }
    w.duration_s = d;
  }
  if (args.requests) {
    w.requests = args.requests;
  }
  if (!args.seed.empty()) {
    std::string_view text = trim(args.seed);
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), w.seed);
    if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
      throw InputError("invalid --seed '" + args.seed + "': expected a whole number");
    }
  }
  if (args.workload.empty() && !w.duration_s && !w.requests) {
    w.requests = 1000;
  }
  return w;
}

std::vector<double> parse_rates(const std::string& text) {
  std::vector<double> out;
  std::size_t start = 0;
  while (true) {
    std::size_t comma = text.find(',', start);
    double r = parse_fraction(text.substr(start, comma - start), "--rate", 0.0, 1e9);
    if (r < k_min_arrival_rate) {
      throw InputError("--rate must be at least 1e-6 requests per second (one in 11.6 days), "
                       "got " +
                       text.substr(start, comma - start));
    }
    out.push_back(r);
    if (comma == std::string::npos) {
      return out;
    }
    start = comma + 1;
  }
}

/// "does not fit" with the smallest power-of-two tensor parallelism that does.
std::string fit_hint(const CapacityRequest& request) {
  for (u64 tp = request.parallel.tp * 2; tp <= 64; tp *= 2) {
    CapacityRequest q = request;
    q.parallel.tp = tp;
    q.parallel.gpus = tp * q.parallel.pp;
    try {
      if (compute_capacity(q).fits) {
        return "; it fits at --gpus " + std::to_string(q.parallel.gpus) + " --tp " +
               std::to_string(tp);
      }
    } catch (const InputError&) {
      // This tp does not divide the heads: try the next.
    }
  }
  return "";
}

/// A latency figure, null where no request gave a sample (TPOT of one-token outputs).
Json latency_value(const LatencySummary& s, double v) {
  return s.count > 0 ? Json(v) : Json();
}

Json latency_json(const LatencySummary& s) {
  Json j = Json::object();
  j["mean"] = latency_value(s, s.mean);
  j["p50"] = latency_value(s, s.p50);
  j["p90"] = latency_value(s, s.p90);
  j["p99"] = latency_value(s, s.p99);
  j["max"] = latency_value(s, s.max);
  j["count"] = s.count;
  return j;
}

/// A latency figure, "-" where no request gave a sample.
Cell latency_cell(const LatencySummary& s, double v) {
  return s.count > 0 ? Cell::seconds(v) : Cell::empty();
}

struct Scenario {
  SimConfig config;
  std::string model;
  std::string gpu;
  Engine engine = Engine::plain;
  std::optional<double> rate; ///< synthetic workloads
  std::string unfit;          ///< why the model does not fit (then nothing was simulated)
  SimResult result;
  std::string label; ///< for plots and timelines
};

void write_plot(const std::string& path, const std::vector<Scenario>& scenarios) {
  LineChart occupancy;
  occupancy.title = "KV-cache occupancy over time";
  occupancy.x_label = "time since the first arrival (s)";
  occupancy.y_label = "KV blocks in use (% of the pool)";
  occupancy.y_unit = "%";
  LineChart throughput;
  throughput.title = "Throughput over time";
  throughput.x_label = "time since the first arrival (s)";
  throughput.y_label = "output tokens/s";
  throughput.y_unit = "tok/s";
  for (LineChart* c : {&occupancy, &throughput}) {
    c->x_scale = AxisScale::linear;
    c->y_scale = AxisScale::linear;
    c->markers = false;
  }
  for (const Scenario& s : scenarios) {
    LineSeries occ{s.label, {}, {}};
    LineSeries tps{s.label, {}, {}};
    for (const TimePoint& p : s.result.timeline) {
      double mid = (p.start_s + p.end_s) / 2;
      occ.xs.push_back(mid);
      occ.ys.push_back(p.kv_occupancy * 100);
      tps.xs.push_back(mid);
      tps.ys.push_back(p.output_tokens_per_s);
    }
    occupancy.series.push_back(std::move(occ));
    throughput.series.push_back(std::move(tps));
  }
  write_text_file(path, render_svg({occupancy, throughput}));
}

/// A token length given where the result file goes: `--output 256` as the old spelling of
/// --output-tokens.
bool looks_like_length(const std::string& text) {
  for (const char* prefix : {"uniform:", "normal:", "lognormal:", "cdf:"}) {
    if (text.starts_with(prefix)) {
      return true;
    }
  }
  return !text.empty() && text.find_first_not_of("0123456789.kKmM") == std::string::npos &&
         std::isdigit(static_cast<unsigned char>(text.front())) != 0;
}

int run_simulate(const SimulateArgs& args, std::ostream& out, std::ostream& err) {
  if (looks_like_length(args.output.file)) {
    throw InputError("-o/--output '" + args.output.file +
                     "' is where the result goes; the output length in tokens is "
                     "--output-tokens");
  }
  bool trace = !args.trace.empty();
  if (trace) {
    for (auto [given, flag] : {std::pair{!args.workload.empty(), "--workload"},
                               std::pair{args.arrival.has_value(), "--arrival"},
                               std::pair{!args.rates.empty(), "--rate"},
                               std::pair{!args.prompt_tokens.empty(), "--prompt-tokens"},
                               std::pair{!args.output_tokens.empty(), "--output-tokens"},
                               std::pair{!args.duration.empty(), "--duration"},
                               std::pair{args.requests.has_value(), "--requests"},
                               std::pair{!args.seed.empty(), "--seed"}}) {
      if (given) {
        throw InputError(std::string("--trace replays its own requests; drop ") + flag);
      }
    }
  }
  Workload workload = trace ? Workload{} : synthetic_workload(args);
  std::vector<std::optional<double>> rates;
  bool burst = !trace && workload.arrival == ArrivalProcess::burst;
  if (burst && !args.rates.empty()) {
    throw InputError("--rate does not apply to a burst: all requests arrive at t = 0");
  }
  if (trace || burst) {
    rates.emplace_back();
  } else if (!args.rates.empty()) {
    for (double r : args.rates) {
      rates.emplace_back(r);
    }
  } else {
    rates.emplace_back(workload.rate);
  }
  if (!trace) {
    Workload check = workload;
    check.rate = rates.front().value_or(workload.rate);
    validate_workload(check);
  }
  if (!args.efficiency.empty() && !args.device_profile.empty()) {
    throw InputError("--efficiency and --device-profile both set the ceilings; give one");
  }
  Efficiency efficiency = parse_efficiency(args.efficiency, "--efficiency");
  std::optional<DeviceProfile> profile = read_device_profile(args.device_profile);
  MlaMode mla = args.mla;
  Preemption preemption = args.preemption;
  double swap_bandwidth = static_cast<double>(parse_bytes(args.swap_bandwidth, "--swap-bandwidth"));
  if (swap_bandwidth <= 0) {
    throw InputError("--swap-bandwidth must be above 0 bytes per second");
  }

  Rendered r;
  std::vector<std::string>& warnings = r.warnings;
  std::vector<Model> models = load_models(args.models, warnings);
  ParallelOptions deployment = args.parallel;
  if (!deployment.tp_given && deployment.gpu_count) {
    // One instance over all the GPUs: tp = gpus / pp.
    u64 gpus = *deployment.gpu_count;
    if (gpus % deployment.pp != 0) {
      throw InputError("--gpus " + group_digits(gpus) + " is not a multiple of --pp " +
                       group_digits(deployment.pp));
    }
    deployment.tps = {gpus / deployment.pp};
  }

  std::vector<Scenario> scenarios;
  std::optional<std::ofstream> timeline;
  if (!args.timeline.empty()) {
    errno = 0; // write_error reports what the open sets
    timeline.emplace(args.timeline, std::ios::binary);
    if (!*timeline) {
      throw write_error(args.timeline, errno);
    }
    *timeline << "model,gpu,tp,rate_per_s,step,start_s,duration_s,running,waiting,"
                 "decode_tokens,prefill_tokens,kv_blocks_used,kv_occupancy,preemptions,"
                 "completed\n";
  }
  std::vector<Gpu> devices =
      deployment_devices(deployment, profile, GpuCatalog(deployment.gpu_file),
                         "add a --device-profile that kvcalc measure wrote", warnings);
  for (const auto& request : capacity_requests(models, args.cache, deployment, args.engine,
                                               args.block_size, devices, {}, std::nullopt)) {
    CapacityResult capacity = compute_capacity(request);
    if (!capacity.fits) {
      Scenario s;
      s.config.step.parallel = capacity.parallel;
      s.model = request.model.name;
      s.gpu = capacity.gpu;
      s.engine = capacity.engine;
      s.unfit = request.model.name + " does not fit on " + group_digits(capacity.parallel.gpus) +
                " × " + capacity.gpu + " (tp " + group_digits(capacity.parallel.tp) +
                "): " + capacity.reason + fit_hint(request);
      scenarios.push_back(std::move(s));
      continue;
    }
    DeviceRates device = profile
                             ? device_rates(request.gpu, *profile)
                             : device_rates(request.gpu, efficiency.bandwidth, efficiency.flops);
    SimConfig config = instance_config(request, capacity, device, mla);
    config.preemption = preemption;
    config.swap_bytes_per_s = swap_bandwidth;
    config.prefix_sharing = !args.no_prefix_sharing;
    for (const auto& note : capacity.notes) {
      warnings.push_back(request.model.name + " on " + capacity.gpu + ": " + note);
    }
    for (const auto& rate : rates) {
      Scenario s;
      s.config = config;
      s.model = request.model.name;
      s.gpu = capacity.gpu;
      s.engine = capacity.engine;
      s.rate = rate;
      s.label = s.model +
                (deployment.gpus.size() > 1 || deployment.tps.size() > 1
                     ? " " + s.gpu + " tp " + std::to_string(capacity.parallel.tp)
                     : "") +
                (rate && rates.size() > 1 ? fmt::format(" @ {:g}/s", *rate) : "");
      std::function<void(const StepRecord&)> on_step;
      if (timeline) {
        std::string prefix = fmt::format("{},{},{},{},", s.model, s.gpu, capacity.parallel.tp,
                                         rate ? fmt::format("{}", *rate) : std::string());
        on_step = [&timeline, &path = args.timeline, prefix](const StepRecord& step) {
          errno = 0;
          *timeline << prefix
                    << fmt::format("{},{},{},{},{},{},{},{},{},{},{}\n", step.step, step.start_s,
                                   step.duration_s, step.running, step.waiting, step.decode_tokens,
                                   step.prefill_tokens, step.blocks_used, step.kv_occupancy,
                                   step.preemptions, step.completed);
          if (!*timeline) { // the disk filled, say: stop now, not after the whole simulation
            throw write_error(path, errno);
          }
        };
      }
      if (trace) {
        std::ifstream file(args.trace, std::ios::binary);
        if (!file) {
          throw InputError("cannot open '" + args.trace + "': no such file, or it is not readable");
        }
        TraceReader reader(file, args.trace);
        s.result = simulate(config, reader, on_step);
      } else {
        Workload w = workload;
        w.rate = rate.value_or(workload.rate);
        SyntheticSource source(w);
        s.result = simulate(config, source, on_step);
      }
      scenarios.push_back(std::move(s));
    }
  }
  bool simulated = std::any_of(scenarios.begin(), scenarios.end(),
                               [](const Scenario& s) { return s.unfit.empty(); });
  if (!simulated) {
    throw InputError(scenarios.front().unfit);
  }
  std::vector<Scenario> ran;
  for (const Scenario& s : scenarios) {
    if (s.unfit.empty()) {
      ran.push_back(s);
    }
  }
  if (timeline) {
    errno = 0;
    timeline->flush();
    if (!*timeline) {
      throw write_error(args.timeline, errno);
    }
    err << "kvcalc: wrote " << args.timeline << '\n';
  }
  if (!args.plot.empty()) {
    write_plot(args.plot, ran);
    err << "kvcalc: wrote " << args.plot << '\n';
  }
  for (const Scenario& s : ran) {
    if (s.result.requests_rejected > 0) {
      warnings.push_back(s.model + ": " + group_digits(s.result.requests_rejected) +
                         " requests rejected (" + group_digits(s.result.rejected_pool) +
                         " larger than one sequence's share of the KV " + "pool, " +
                         group_digits(s.result.rejected_context) + " longer than max_context)");
    }
  }
  r.json = json_header("simulate");
  Json wj = Json::object();
  if (trace) {
    wj["source"] = "trace";
    wj["file"] = args.trace;
  } else {
    wj["source"] = args.workload.empty() ? "command line" : args.workload;
    wj["name"] = workload.name.empty() ? Json() : Json(workload.name);
    wj["seed"] = workload.seed;
    wj["arrival"] = std::string(arrival_name(workload.arrival));
    wj["duration_s"] = workload.duration_s ? Json(*workload.duration_s) : Json();
    wj["requests"] = workload.requests ? Json(*workload.requests) : Json();
    wj["prompt_tokens"] = describe(workload.prompt);
    wj["output_tokens"] = describe(workload.output);
    if (workload.prefix.fraction > 0) {
      wj["prefix"]["fraction"] = workload.prefix.fraction;
      wj["prefix"]["count"] = workload.prefix.count;
      wj["prefix"]["tokens"] = workload.prefix.tokens;
    } else {
      wj["prefix"] = Json();
    }
  }
  r.json["workload"] = std::move(wj);
  r.json["scheduler"]["preemption"] = std::string(preemption_name(preemption));
  r.json["scheduler"]["swap_bytes_per_s"] = swap_bandwidth;
  r.json["scheduler"]["prefix_sharing"] = !args.no_prefix_sharing;
  r.json["scheduler"]["mla"] = std::string(mla_mode_name(mla));

  Table t;
  t.columns = {{"model", "model"},
               {"gpu", "gpu"},
               {"tp", "tp"},
               {"rate/s", "rate_per_s"},
               {"done", "requests_completed"},
               {"rejected", "requests_rejected"},
               {"preempted", "preemptions"},
               {"in tok/s", "input_tokens_per_s"},
               {"out tok/s", "output_tokens_per_s"},
               {"TTFT p50", "ttft_p50_s"},
               {"TTFT p99", "ttft_p99_s"},
               {"TPOT p50", "tpot_p50_s"},
               {"TPOT p99", "tpot_p99_s"},
               {"E2E p99", "e2e_p99_s"},
               {"KV peak", "kv_occupancy_peak"},
               {"KV mean", "kv_occupancy_mean"},
               {"peak seqs", "peak_running"}};
  Table csv;
  csv.columns = {{"model", "model"},
                 {"gpu", "gpu"},
                 {"gpus", "gpus"},
                 {"tp", "tp"},
                 {"engine", "engine"},
                 {"rate_per_s", "rate_per_s"},
                 {"kv_pool_blocks", "kv_pool_blocks"},
                 {"block_size_tokens", "block_size_tokens"},
                 {"requests_arrived", "requests_arrived"},
                 {"requests_completed", "requests_completed"},
                 {"requests_rejected", "requests_rejected"},
                 {"preemptions", "preemptions"},
                 {"steps", "steps"},
                 {"makespan_s", "makespan_s"},
                 {"input_tokens_per_s", "input_tokens_per_s"},
                 {"output_tokens_per_s", "output_tokens_per_s"},
                 {"total_tokens_per_s", "total_tokens_per_s"}};
  for (const char* m : {"ttft", "tpot", "e2e", "queue"}) {
    for (const char* q : {"mean", "p50", "p90", "p99"}) {
      std::string key = fmt::format("{}_{}_s", m, q);
      csv.columns.push_back({key, key});
    }
  }
  for (const char* key :
       {"kv_occupancy_peak", "kv_occupancy_mean", "fragmentation", "peak_running"}) {
    csv.columns.push_back({key, key});
  }
  Json list = Json::array();
  for (const Scenario& s : scenarios) {
    const SimResult& x = s.result;
    const SimConfig& c = s.config;
    if (!s.unfit.empty()) {
      std::vector<Cell> row(t.columns.size(), Cell::empty());
      row[0] = Cell::text(s.model);
      row[1] = Cell::text(s.gpu);
      row[2] = Cell::count(c.step.parallel.tp);
      row[4] = Cell::text("does not fit");
      t.rows.push_back(std::move(row));
      t.notes.push_back(s.unfit);
      std::vector<Cell> flat(csv.columns.size(), Cell::empty());
      flat[0] = Cell::text(s.model);
      flat[1] = Cell::text(s.gpu);
      flat[2] = Cell::count(c.step.parallel.gpus);
      flat[3] = Cell::count(c.step.parallel.tp);
      flat[4] = Cell::text(std::string(engine_name(s.engine)));
      csv.rows.push_back(std::move(flat));
      Json j = Json::object();
      j["model"] = s.model;
      j["gpu"] = s.gpu;
      j["gpus"] = c.step.parallel.gpus;
      j["tp"] = c.step.parallel.tp;
      j["engine"] = std::string(engine_name(s.engine));
      j["fits"] = false;
      j["reason"] = s.unfit;
      list.push_back(std::move(j));
      continue;
    }
    Cell rate = s.rate ? Cell::number(*s.rate) : Cell::text(trace ? "trace" : "burst");
    t.rows.push_back({Cell::text(s.model), Cell::text(s.gpu), Cell::count(c.step.parallel.tp), rate,
                      Cell::count(x.requests_completed), Cell::count(x.requests_rejected),
                      Cell::count(x.preemptions), Cell::number(x.input_tokens_per_s),
                      Cell::number(x.output_tokens_per_s), latency_cell(x.ttft, x.ttft.p50),
                      latency_cell(x.ttft, x.ttft.p99), latency_cell(x.tpot, x.tpot.p50),
                      latency_cell(x.tpot, x.tpot.p99), latency_cell(x.e2e, x.e2e.p99),
                      Cell::share(x.kv_peak), Cell::share(x.kv_mean), Cell::count(x.peak_running)});
    std::vector<Cell> row{Cell::text(s.model),
                          Cell::text(s.gpu),
                          Cell::count(c.step.parallel.gpus),
                          Cell::count(c.step.parallel.tp),
                          Cell::text(std::string(engine_name(s.engine))),
                          s.rate ? Cell::number(*s.rate) : Cell::empty(),
                          Cell::count(c.pool_blocks),
                          Cell::count(c.block_size),
                          Cell::count(x.requests_arrived),
                          Cell::count(x.requests_completed),
                          Cell::count(x.requests_rejected),
                          Cell::count(x.preemptions),
                          Cell::count(x.steps),
                          Cell::seconds(x.makespan_s),
                          Cell::number(x.input_tokens_per_s),
                          Cell::number(x.output_tokens_per_s),
                          Cell::number(x.total_tokens_per_s)};
    for (const LatencySummary* l : {&x.ttft, &x.tpot, &x.e2e, &x.queue}) {
      for (double v : {l->mean, l->p50, l->p90, l->p99}) {
        row.push_back(latency_cell(*l, v));
      }
    }
    row.push_back(Cell::number(x.kv_peak));
    row.push_back(Cell::number(x.kv_mean));
    row.push_back(Cell::number(x.fragmentation));
    row.push_back(Cell::count(x.peak_running));
    csv.rows.push_back(std::move(row));

    Json j = Json::object();
    j["model"] = s.model;
    j["gpu"] = s.gpu;
    j["gpus"] = c.step.parallel.gpus;
    j["tp"] = c.step.parallel.tp;
    j["pp"] = c.step.parallel.pp;
    j["ep"] = c.step.parallel.ep;
    j["dp_attention"] = c.step.parallel.dp_attention;
    j["engine"] = std::string(engine_name(s.engine));
    j["fits"] = true;
    j["reason"] = Json();
    j["rate_per_s"] = s.rate ? Json(*s.rate) : Json();
    j["rates"] = c.step.rates.source;
    j["kv_pool"]["blocks"] = c.pool_blocks;
    j["kv_pool"]["block_size"] = c.block_size;
    j["kv_pool"]["tokens"] = c.pool_unit == "blocks"   ? Json(c.pool_blocks * c.block_size)
                             : c.pool_unit == "tokens" ? Json(c.pool_blocks)
                                                       : Json();
    j["kv_pool"]["sequence_blocks_limit"] = c.sequence_blocks_limit;
    j["kv_pool"]["unit"] = c.pool_unit;
    Json pools = Json::array();
    for (std::size_t p = 0; p < c.pools.size(); ++p) {
      Json pj = Json::object();
      pj["name"] = c.pools[p].name;
      pj["unit"] = c.pools[p].unit;
      pj["capacity"] = c.pools[p].capacity;
      pj["sequence_limit"] = c.pool_limits[p];
      pools.push_back(std::move(pj));
    }
    j["kv_pool"]["pools"] = std::move(pools);
    j["max_batched_tokens"] = c.max_batched_tokens;
    j["max_seqs"] = c.max_seqs;
    j["requests_arrived"] = x.requests_arrived;
    j["requests_completed"] = x.requests_completed;
    j["requests_rejected"] = x.requests_rejected;
    j["rejections"]["larger_than_pool"] = x.rejected_pool;
    j["rejections"]["longer_than_max_context"] = x.rejected_context;
    j["preemptions"] = x.preemptions;
    j["steps"] = x.steps;
    j["makespan_s"] = x.makespan_s;
    j["busy_s"] = x.busy_s;
    j["swap_s"] = x.swap_s;
    j["tokens"]["input"] = x.input_tokens;
    j["tokens"]["output"] = x.output_tokens;
    j["tokens"]["computed"] = x.computed_tokens;
    j["tokens"]["recomputed"] = x.recomputed_tokens;
    j["tokens"]["prefix_hits"] = x.prefix_hit_tokens;
    j["throughput_tokens_per_s"]["input"] = x.input_tokens_per_s;
    j["throughput_tokens_per_s"]["output"] = x.output_tokens_per_s;
    j["throughput_tokens_per_s"]["total"] = x.total_tokens_per_s;
    j["ttft_s"] = latency_json(x.ttft);
    j["tpot_s"] = latency_json(x.tpot);
    j["e2e_s"] = latency_json(x.e2e);
    j["queue_s"] = latency_json(x.queue);
    j["kv_occupancy"]["peak"] = x.kv_peak;
    j["kv_occupancy"]["mean"] = x.kv_mean;
    j["kv_occupancy"]["peak_blocks"] = x.kv_peak_blocks;
    j["fragmentation"] = x.fragmentation;
    j["concurrency"]["peak"] = x.peak_running;
    j["concurrency"]["mean"] = x.mean_running;
    j["mean_step_tokens"] = x.mean_step_tokens;
    list.push_back(std::move(j));
  }
  r.json["scenarios"] = std::move(list);
  t.notes.push_back(
      trace ? "workload: trace " + args.trace
            : fmt::format("workload: {} arrivals{}{}, prompt {}, output {}, seed {}{}",
                          arrival_name(workload.arrival),
                          workload.duration_s ? fmt::format(" for {:g} s", *workload.duration_s)
                                              : std::string(),
                          workload.requests
                              ? fmt::format(" (at most {} requests)", *workload.requests)
                              : std::string(),
                          describe(workload.prompt), describe(workload.output), workload.seed,
                          workload.prefix.fraction > 0
                              ? fmt::format("; {:g}% share one of {} prefixes of {} tokens",
                                            workload.prefix.fraction * 100, workload.prefix.count,
                                            workload.prefix.tokens)
                              : std::string()));
  t.notes.push_back(fmt::format("steps priced by the roofline ({}); {} preemption; throughput "
                                "over the makespan (first arrival to last token); docs/simulate.md",
                                ran.front().config.step.rates.source, preemption_name(preemption)));
  r.csv = std::move(csv);
  r.tables.push_back(std::move(t));
  if (ran.size() == 1) {
    const Scenario& s = ran.front();
    const SimResult& x = s.result;
    Table d;
    d.title =
        s.model + " on " + group_digits(s.config.step.parallel.gpus) + " × " + s.gpu + ": latency";
    d.columns = {{"", "metric"},   {"mean", "mean_s"}, {"p50", "p50_s"},
                 {"p90", "p90_s"}, {"p99", "p99_s"},   {"max", "max_s"}};
    for (auto [name, l] : {std::pair{"TTFT", &x.ttft}, std::pair{"TPOT", &x.tpot},
                           std::pair{"E2E", &x.e2e}, std::pair{"queueing", &x.queue}}) {
      d.rows.push_back({Cell::text(name), latency_cell(*l, l->mean), latency_cell(*l, l->p50),
                        latency_cell(*l, l->p90), latency_cell(*l, l->p99),
                        latency_cell(*l, l->max)});
    }
    const SimConfig& sc = s.config;
    std::string pool =
        sc.pool_unit == "bytes" ? group_digits(sc.pool_blocks) + " B"
        : sc.pool_unit == "tokens"
            ? group_digits(sc.pool_blocks) + " tokens" +
                  (sc.block_size == 1 ? std::string(" (token-granular)")
                                      : " in pages of " + group_digits(sc.block_size))
            : group_digits(sc.pool_blocks) + " blocks of " + group_digits(sc.block_size) +
                  " tokens";
    for (std::size_t p = 1; p < sc.pools.size(); ++p) {
      pool += ", " + sc.pools[p].name + " " + group_digits(sc.pools[p].capacity) + " " +
              sc.pools[p].unit;
    }
    d.notes.push_back(fmt::format(
        "KV pool {}; fragmentation {:.1f}% of allocated slots; {} steps, "
        "{:.1f} tokens each; mean concurrency {:.1f}; {} tokens recomputed, {} prefix tokens "
        "reused; percentiles within 0.1%",
        pool, x.fragmentation * 100, group_digits(x.steps), x.mean_step_tokens, x.mean_running,
        group_digits(x.recomputed_tokens), group_digits(x.prefix_hit_tokens)));
    r.tables.push_back(std::move(d));
  }
  emit(r, args.output, out, err);
  return 0;
}

/// The spelling an earlier kvcalc used for `flag`: refused with the one to use.
void add_renamed(CLI::App* cmd, const std::string& old_flag, const std::string& new_flag) {
  cmd->add_option_function<std::string>(
         old_flag,
         [old_flag, new_flag](const std::string&) {
           throw InputError(old_flag + " is now " + new_flag);
         },
         "")
      ->group("");
}

} // namespace

Command setup_simulate(CLI::App& app) {
  auto args = std::make_shared<SimulateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "simulate", "A serving instance over time: KV occupancy, preemptions, throughput and "
                  "latency on a workload or a trace (docs/simulate.md)");
  cmd->add_option("models", args->models, k_models_help)->type_name("MODEL")->required();
  cmd->add_option("--workload", args->workload,
                  "Synthetic workload YAML (docs/simulate.md); options below override its keys")
      ->type_name("FILE.yaml")
      ->group(k_group_workload);
  cmd->add_option("--trace", args->trace,
                  "Requests to replay: CSV (arrival_s,prompt_tokens,output_tokens[,prefix_id,"
                  "prefix_tokens]) or JSONL with the same keys")
      ->type_name("FILE")
      ->group(k_group_workload);
  add_parsed(
      cmd, "--arrival", args->arrival,
      [](const std::string& text, const std::string&) {
        return k_arrival_processes.find_any_case(text);
      },
      "Arrivals: poisson, constant (every 1/rate s) or burst (--requests at t = 0) "
      "[default: the workload's, else poisson]")
      ->check(choice_of(k_arrival_processes))
      ->group(k_group_workload);
  add_parsed(
      cmd, "--rate", args->rates,
      [](const std::string& text, const std::string&) { return parse_rates(text); },
      "Requests per second; a comma-separated list sweeps [default: the workload's, "
      "else 10]")
      ->type_name("R,...")
      ->group(k_group_workload);
  cmd->add_option("--prompt-tokens", args->prompt_tokens,
                  "Prompt tokens: N, uniform:LOW,HIGH, normal:MEAN,STD, lognormal:MEAN,SIGMA or "
                  "cdf:TOKENS=P,...,TOKENS=1 [default: the workload's, else 1024]")
      ->type_name("DIST")
      ->group(k_group_workload);
  cmd->add_option("--output-tokens", args->output_tokens,
                  "Output tokens, as --prompt-tokens [default: the workload's, else 256]")
      ->type_name("DIST")
      ->group(k_group_workload);
  add_renamed(cmd, "--prompt", "--prompt-tokens");
  cmd->add_option("--duration", args->duration,
                  "Seconds of arrivals; the run then drains what arrived")
      ->type_name("SECONDS")
      ->group(k_group_workload);
  add_count(cmd, "--requests", args->requests,
            "At most this many requests [default: 1000 when neither this nor --duration nor a "
            "workload is given]")
      ->group(k_group_workload);
  cmd->add_option("--seed", args->seed, "Random seed [default: the workload's, else 1]")
      ->type_name("N")
      ->group(k_group_workload);
  add_choice(cmd, "--preemption", args->preemption, k_preemptions,
             "When a sequence needs a block and none is free, the latest-arrived running "
             "sequence is preempted: recompute (vLLM's default) or swap (to host memory)")
      ->group(k_group_workload);
  cmd->add_option("--swap-bandwidth", args->swap_bandwidth,
                  "Host link of one GPU, one direction, in bytes per second (PCIe 4.0 x16 ≈ "
                  "25GB, 5.0 ≈ 50GB), for --preemption swap [default: 25GB]")
      ->type_name("BYTES/S")
      ->group(k_group_workload);
  cmd->add_flag("--no-prefix-sharing", args->no_prefix_sharing,
                "Compute every prompt in full, shared prefixes included")
      ->group(k_group_workload);
  add_choice(cmd, "--mla", args->mla, k_mla_modes,
             "MLA mode of each step: auto (absorbed for decode and chunks of ≤ 128 tokens over a "
             "prefix, naive for prompts), absorbed or naive")
      ->group(k_group_workload);
  add_cache_options(cmd, args->cache);
  add_parallel_options(cmd, args->parallel, ParallelScope::deployment, true);
  cmd->get_option("--tp")->description(
      "Tensor parallel size; a comma-separated list sweeps [default: --gpus / --pp, else 1]");
  add_engine_options(cmd, args->engine);
  cmd->get_option("--max-batched-tokens")
      ->description("Tokens per scheduler step (chunked prefill budget) [default: the engine's: "
                    "vLLM 8192 (2048 below 70 GiB or on A100), SGLang by GPU memory, else 8192]");
  cmd->get_option("--max-seqs")
      ->description("Running sequences at most [default: vLLM 1024 (256 below 70 GiB or on "
                    "A100), else 256]");
  add_count(cmd, "--block-size", args->block_size,
            "Page size in tokens [default: vLLM 16 (MLA 64 on Hopper, 128 on Blackwell), "
            "TensorRT-LLM 32, SGLang and plain 1]")
      ->type_name("TOKENS")
      ->group(k_group_engine);
  cmd->add_option("--efficiency", args->efficiency,
                  "Scale the datasheet ceilings: bw=F,flops=F [default: 1, the datasheet]")
      ->type_name("bw=F,flops=F")
      ->group(k_group_ceilings);
  cmd->add_option("--device-profile", args->device_profile,
                  "Measured ceilings (a profile `kvcalc measure --profile` writes)")
      ->type_name("FILE")
      ->group(k_group_ceilings);
  cmd->add_option("--timeline", args->timeline,
                  "Write every step as CSV: time, running, waiting, tokens, KV blocks")
      ->type_name("FILE.csv")
      ->group(k_group_output);
  cmd->add_option("--plot", args->plot, "Write an SVG of KV occupancy and throughput over time")
      ->type_name("FILE.svg")
      ->group(k_group_output);
  add_output_options(cmd, args->output, ScaledBytes::no);
  return {cmd,
          [args](std::ostream& out, std::ostream& err) { return run_simulate(*args, out, err); }};
}

} // namespace kvcalc::cli
