// `simulate`: a serving instance over time, on a synthetic workload or a trace.

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <sstream>

#include <fmt/format.h>

#include <memory>
#include <variant>

#include <kvcalc/core/error.hpp>
#include <kvcalc/core/file.hpp>
#include <kvcalc/core/units.hpp>
#include <kvcalc/report/record.hpp>
#include <kvcalc/report/svg.hpp>
#include <kvcalc/sim/simulator.hpp>
#include <kvcalc/sim/slo.hpp>
#include <kvcalc/sim/trace.hpp>

#include "deployment.hpp"
#include "simulate.hpp"

using namespace kvcalc::sim;
using namespace kvcalc::roofline;

namespace kvcalc::cli {

namespace {

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

/// A latency figure, "-" (null in JSON) where no request gave a sample (TPOT of one-token
/// outputs).
Cell latency_cell(const LatencySummary& s, double v) {
  return s.count > 0 ? Cell::seconds(v) : Cell::empty();
}

void write_plot(const std::string& path, const std::vector<const Scenario*>& scenarios) {
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
  // Pools of different sizes (models, GPUs, engines) compare in bytes, not in % of each.
  bool same_pool = std::all_of(scenarios.begin(), scenarios.end(), [&](const Scenario* s) {
    return s->kv_pool_bytes_per_gpu == scenarios.front()->kv_pool_bytes_per_gpu;
  });
  if (!same_pool) {
    occupancy.y_label = "KV cache in use per GPU (GiB)";
    occupancy.y_unit = "GiB";
  }
  // Throughput per bucket swings with every prefill; a moving average over 1/40 of the longest
  // run (at least a bucket) shows its level.
  double span = 0;
  for (const Scenario* s : scenarios) {
    if (!s->result.timeline.empty()) {
      span = std::max(span, s->result.timeline.back().end_s);
    }
  }
  double window = span / 40;
  for (const Scenario* s : scenarios) {
    LineSeries occ{s->label, {}, {}};
    LineSeries tps{s->label, {}, {}};
    const std::vector<TimePoint>& points = s->result.timeline;
    for (std::size_t i = 0; i < points.size(); ++i) {
      const TimePoint& p = points[i];
      double mid = (p.start_s + p.end_s) / 2;
      occ.xs.push_back(mid);
      occ.ys.push_back(same_pool ? p.kv_occupancy * 100
                                 : p.kv_occupancy * static_cast<double>(s->kv_pool_bytes_per_gpu) /
                                       static_cast<double>(u64{1} << 30));
      double tokens = 0;
      double seconds = 0;
      for (const TimePoint& q : points) {
        double q_mid = (q.start_s + q.end_s) / 2;
        if (std::fabs(q_mid - mid) <= window / 2 || &q == &p) {
          tokens += q.output_tokens_per_s * (q.end_s - q.start_s);
          seconds += q.end_s - q.start_s;
        }
      }
      tps.xs.push_back(mid);
      tps.ys.push_back(seconds > 0 ? tokens / seconds : p.output_tokens_per_s);
    }
    occupancy.series.push_back(std::move(occ));
    throughput.series.push_back(std::move(tps));
  }
  throughput.title = fmt::format("Throughput over time (moving average over {:.3g} s)", window);
  write_text_file(path, render_svg({occupancy, throughput}), "--plot");
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

/// A pool of a disaggregated deployment: "NODESxGPUS" (or a GPU count), then ":tpT", ":ppP",
/// ":epE" and ":dp" or ":dpN" (attention data parallel) in any order. Without tp the pool is one
/// instance over all its GPUs, attention data parallel when its experts are spread (ep above 1).
ParallelOptions pool_options(const std::string& spec, const std::string& flag,
                             const ParallelOptions& base) {
  ParallelOptions p = base;
  auto bad = [&](const std::string& why) -> InputError {
    return InputError(flag + " '" + spec + "': " + why +
                      "; write NODESxGPUS[:tpT][:ppP][:epE][:dp[N]], e.g. 4x8:ep32");
  };
  auto size_of = [&](const std::string& part) {
    u64 v = parse_count(part.substr(2), flag + " " + part.substr(0, 2));
    if (v == 0) {
      throw bad(part.substr(0, 2) + " must be at least 1");
    }
    return v;
  };
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    std::size_t colon = spec.find(':', start);
    parts.push_back(spec.substr(start, colon - start));
    if (colon == std::string::npos) {
      break;
    }
    start = colon + 1;
  }
  const std::string& size = parts.front();
  std::size_t x = size.find_first_of("xX");
  u64 gpus = 0;
  if (x == std::string::npos) {
    gpus = parse_count(size, flag);
  } else {
    p.gpus_per_node = parse_count(size.substr(x + 1), flag);
    gpus = checked_mul(parse_count(size.substr(0, x), flag), *p.gpus_per_node, flag);
  }
  if (gpus == 0) {
    throw bad("a pool needs at least one GPU");
  }
  std::optional<u64> tp;
  for (std::size_t i = 1; i < parts.size(); ++i) {
    const std::string& part = parts[i];
    if (part == "dp") {
      p.dp_attention = true;
    } else if (part.starts_with("dp")) {
      p.dp = size_of(part);
    } else if (part.starts_with("tp")) {
      tp = size_of(part);
    } else if (part.starts_with("pp")) {
      p.pp = size_of(part);
    } else if (part.starts_with("ep")) {
      p.ep = size_of(part);
    } else {
      throw bad("unknown part '" + part + "'");
    }
  }
  if (p.pp == 0 || gpus % p.pp != 0) {
    throw bad("pp must divide the pool's " + group_digits(gpus) + " GPUs");
  }
  p.gpu_count = gpus;
  p.nodes.reset();
  p.tps = {tp.value_or(gpus / p.pp)};
  p.tp_given = true;
  if (!tp && p.ep > 1) {
    p.dp_attention = true;
  }
  return p;
}

SimulateInputs read_inputs(const SimulateArgs& args, std::ostream& err) {
  check_plot_path(args.plot);
  if (looks_like_length(args.output.file)) {
    throw InputError("-o/--output '" + args.output.file +
                     "' is where the result goes; the output length in tokens is "
                     "--output-tokens");
  }
  SimulateInputs in;
  in.trace = !args.trace.empty();
  if (in.trace) {
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
    // Checked and noted as an input now, before any output is opened.
    std::error_code ec;
    auto kind = std::filesystem::status(args.trace, ec);
    if (std::filesystem::exists(kind) && !std::filesystem::is_regular_file(kind) &&
        !std::filesystem::is_directory(kind)) {
      in.piped_trace = read_text_file(args.trace);
    } else {
      (void)open_input_file(args.trace);
    }
  } else {
    in.workload = synthetic_workload(args);
  }
  if (args.concurrency) {
    for (auto [given, flag] :
         {std::pair{in.trace, "--trace"}, std::pair{!args.rates.empty(), "--rate"},
          std::pair{args.arrival.has_value(), "--arrival"},
          std::pair{!args.prefill_pool.empty() || !args.decode_pool.empty(), "--prefill/--decode"},
          std::pair{!args.slo.empty(), "--slo"}}) {
      if (given) {
        throw InputError(std::string("--concurrency runs a closed loop, each client sending "
                                     "its next request when the last one finishes; it does "
                                     "not combine with ") +
                         flag);
      }
    }
    if (*args.concurrency == 0) {
      throw InputError("--concurrency must be at least 1 client");
    }
    if (*args.concurrency > k_max_requests_in_system) {
      throw InputError("--concurrency " + group_digits(*args.concurrency) + " is over " +
                       group_digits(k_max_requests_in_system) +
                       " clients, the most requests one instance may hold at once; lower it");
    }
    in.concurrency = args.concurrency;
    in.rates.emplace_back();
    (void)ClosedLoopSource(in.workload, *in.concurrency); // its checks, before any output
  }
  bool burst = !in.trace && in.workload.arrival == ArrivalProcess::burst;
  if (burst && !args.rates.empty()) {
    throw InputError("--rate does not apply to a burst: all requests arrive at t = 0");
  }
  if (in.concurrency) {
    // One closed-loop run: the loop sets the arrivals.
  } else if (in.trace || burst) {
    in.rates.emplace_back();
  } else if (!args.rates.empty()) {
    in.rates.assign(args.rates.begin(), args.rates.end());
  } else {
    in.rates.emplace_back(in.workload.rate);
  }
  if (!in.trace && !in.concurrency) {
    Workload check = in.workload;
    check.rate = in.rates.front().value_or(in.workload.rate);
    validate_workload(check);
  }
  if (!args.efficiency.empty() &&
      (!args.ceilings.device_profile.empty() || args.ceilings.measure)) {
    throw InputError("--efficiency and measured ceilings (--device-profile, --measure) both set "
                     "the ceilings; give one");
  }
  if (args.pricing_given && args.pricing == Pricing::estimate && !args.efficiency.empty()) {
    throw InputError("--ceilings estimate prices steps with the kernels' efficiency curves, "
                     "and --efficiency scales the bound's ceilings; give one");
  }
  in.efficiency = parse_efficiency(args.efficiency, "--efficiency");
  in.profile = read_ceilings(args.ceilings, args.parallel, GpuCatalog(args.parallel.gpu_file),
                             "add --measure, or a --device-profile that kvcalc measure wrote", err);
  if (args.pricing_given && args.pricing == Pricing::estimate && in.profile &&
      !in.profile->efficiency) {
    throw InputError("--ceilings estimate prices steps with the kernels' efficiency curves, and " +
                     in.profile->file +
                     " has none (no efficiency section): it sets the bound's ceilings; drop "
                     "one, or measure again with this kvcalc (its profiles carry the curves)");
  }
  in.swap_bandwidth = static_cast<double>(parse_bytes(args.swap_bandwidth, "--swap-bandwidth"));
  if (in.swap_bandwidth <= 0) {
    throw InputError("--swap-bandwidth must be above 0 bytes per second");
  }
  in.deployment = args.parallel;
  in.deployment.gpu_count = args.parallel.deployment_gpus();
  in.deployment.nodes.reset();
  if (!in.deployment.tp_given && in.deployment.gpu_count) {
    // One instance over all the GPUs: tp = gpus / pp.
    u64 gpus = *in.deployment.gpu_count;
    if (gpus % in.deployment.pp != 0) {
      throw InputError("--gpus " + group_digits(gpus) + " is not a multiple of --pp " +
                       group_digits(in.deployment.pp));
    }
    in.deployment.tps = {gpus / in.deployment.pp};
  }
  in.imbalance = parse_fraction(args.imbalance, "--expert-imbalance", 1.0, 64.0);
  if (args.prefill_pool.empty() != args.decode_pool.empty()) {
    throw InputError("disaggregated serving takes both pools: --prefill and --decode");
  }
  if (!args.prefill_pool.empty()) {
    const ParallelOptions& p = args.parallel;
    if (p.tp_given || p.gpu_count || p.nodes || p.pp != 1 || p.ep != 0 || p.dp_attention ||
        p.dp != 0 || p.dcp != 1) {
      throw InputError("--prefill and --decode give each pool its deployment; drop --gpus, "
                       "--nodes, --tp, --pp, --ep, --dcp, --dp and --dp-attention");
    }
    if (!args.timeline.empty() || !args.plot.empty()) {
      throw InputError("--timeline and --plot draw one instance's steps; not with --prefill "
                       "and --decode");
    }
    in.prefill_pool = pool_options(args.prefill_pool, "--prefill", p);
    in.decode_pool = pool_options(args.decode_pool, "--decode", p);
  }
  return in;
}

/// The --timeline CSV: a row per step of every scenario, stopped at the first write that fails
/// (a full disk ends the run then, not after the whole simulation).
class TimelineFile {
public:
  explicit TimelineFile(const std::string& path) {
    if (path.empty()) {
      return;
    }
    m_file.emplace(path, "--timeline");
    m_file->stream() << "model,gpu,tp,rate_per_s,step,start_s,duration_s,running,waiting,"
                        "decode_tokens,prefill_tokens,kv_blocks_used,kv_occupancy,preemptions,"
                        "completed\n";
  }

  /// What the simulator calls after each step of `s` (nothing without a file).
  std::function<void(const StepRecord&)> rows_of(const Scenario& s) {
    if (!m_file) {
      return {};
    }
    std::string prefix = fmt::format("{},{},{},{},", s.model, s.gpu, s.config.step.parallel.tp,
                                     s.rate ? fmt::format("{}", *s.rate) : std::string());
    return [this, prefix](const StepRecord& step) {
      std::ostream& out = m_file->stream();
      out << prefix
          << fmt::format("{},{},{},{},{},{},{},{},{},{},{}\n", step.step, step.start_s,
                         step.duration_s, step.running, step.waiting, step.decode_tokens,
                         step.prefill_tokens, step.blocks_used, step.kv_occupancy, step.preemptions,
                         step.completed);
      if (!out) {
        m_file->commit(); // says why the write failed
      }
    };
  }

  /// Renames the complete timeline over its file; a run that fails before leaves none.
  void close(std::ostream& err) {
    if (!m_file) {
      return;
    }
    m_file->commit();
    err << "kvcalc: wrote " << m_file->path() << '\n';
  }

private:
  std::optional<OutputFile> m_file;
};

/// The instance `request` sizes, with the options' scheduling and pricing, or why it does not
/// fit; any other refusal (several copies of the model, a pool that holds nothing) is an error.
std::variant<SimConfig, std::string> instance_of(const CapacityRequest& request,
                                                 const SimulateArgs& args, const SimulateInputs& in,
                                                 u64 gpus_per_node, CapacityResult& capacity,
                                                 std::vector<std::string>& warnings) {
  capacity = compute_capacity(request);
  auto sized = size_instance(request.model.name, capacity);
  const auto* refusal = std::get_if<InstanceRefusal>(&sized);
  if (refusal && refusal->reason == InstanceRefusal::Reason::does_not_fit) {
    return refusal->message + "; " + fit_hint(request);
  }
  DeviceRates device =
      in.profile ? device_rates(request.gpu, *in.profile)
                 : device_rates(request.gpu, in.efficiency.bandwidth, in.efficiency.flops);
  device.links.domain = scale_up_domain(request.gpu, gpus_per_node);
  EstimateChoice estimate = choose_estimator(request.gpu, in.profile ? &*in.profile : nullptr);
  device.estimate = std::move(estimate.estimator);
  device.estimate_note = std::move(estimate.note);
  if (refusal) {
    throw InputError(refusal->message);
  }
  SimConfig c = instance_config(std::get<InstanceSize>(std::move(sized)), request,
                                capacity.parallel, device, args.mla);
  // The estimate prices the steps unless the bound is asked for: --ceilings datasheet, or
  // ceilings of its own (--efficiency, a profile without efficiency curves).
  bool bound_asked = args.pricing == Pricing::bound || in.efficiency.given ||
                     (in.profile && !in.profile->efficiency);
  c.pricing = !bound_asked && device.estimate ? Pricing::estimate : Pricing::bound;
  c.preemption = args.preemption;
  c.swap_bytes_per_s = in.swap_bandwidth;
  c.prefix_sharing = !args.no_prefix_sharing;
  c.step.overlap = args.overlap;
  c.step.expert_imbalance = in.imbalance;
  for (const auto& note : capacity.notes) {
    warnings.push_back(request.model.name + " on " + capacity.gpu + ": " + note);
  }
  return c;
}

} // namespace

/// The requests of one run: the trace, or the synthetic workload at `rate`.
std::unique_ptr<RequestSource> open_source(const SimulateArgs& args, const SimulateInputs& in,
                                           std::optional<double> rate,
                                           std::unique_ptr<std::istream>& file) {
  if (in.trace) {
    if (in.piped_trace) {
      file = std::make_unique<std::istringstream>(*in.piped_trace);
    } else {
      file = std::make_unique<std::ifstream>(open_input_file(args.trace));
    }
    return std::make_unique<TraceReader>(*file, args.trace);
  }
  if (in.concurrency) {
    return std::make_unique<ClosedLoopSource>(in.workload, *in.concurrency);
  }
  Workload w = in.workload;
  w.rate = rate.value_or(in.workload.rate);
  return std::make_unique<SyntheticSource>(w);
}

/// Whether the scenario's arrivals outran it (its queue grew through the run).
bool overloaded(const SimResult& x) {
  return x.queue_growth && *x.queue_growth >= k_overload_queue_growth && offered_rate(x) > 0;
}

/// Every model on every GPU and tp of the deployment as an instance, not yet run; where it does
/// not fit, the reason.
std::vector<Scenario> instances(const SimulateArgs& args, const SimulateInputs& in,
                                const std::vector<Model>& models,
                                std::vector<std::string>& warnings) {
  std::vector<Scenario> out;
  const ParallelOptions& deployment = in.deployment;
  std::vector<Gpu> devices =
      deployment_devices(deployment, in.profile, GpuCatalog(deployment.gpu_file),
                         "add a --device-profile that kvcalc measure wrote", warnings);
  check_sweep({{"models", models.size()},
               {"GPUs", devices.size()},
               {"tp", deployment.tp_sweep().size()},
               {"--rate", in.rates.size()}});
  for (const auto& request : capacity_requests(models, args.cache, deployment, args.engine,
                                               args.block_size, devices, {}, std::nullopt)) {
    CapacityResult capacity;
    std::variant<SimConfig, std::string> instance;
    std::optional<Error> error = attempt([&] {
      instance = instance_of(request, args, in, deployment.node_gpus(), capacity, warnings);
    });
    Scenario& base = out.emplace_back();
    if (error) {
      base.config.step.parallel = request.parallel;
      base.model = request.model.name;
      base.gpu = request.gpu.name;
      base.engine = request.engine.engine;
      base.error = std::move(error);
      continue;
    }
    base.config.step.parallel = capacity.parallel;
    base.model = request.model.name;
    base.gpu = capacity.gpu;
    base.engine = capacity.engine;
    base.kv_pool_bytes_per_gpu = capacity.kv_pool_bytes_per_gpu;
    if (auto* why = std::get_if<std::string>(&instance)) {
      base.unfit = *why;
      continue;
    }
    base.config = std::get<SimConfig>(instance);
  }
  return out;
}

Outcome outcome_of(const Scenario& s) {
  if (s.error) {
    return cli::outcome_of(*s.error);
  }
  return s.unfit.empty() ? Outcome::ok : Outcome::does_not_fit;
}

SweepOutcomes outcomes_of(const std::vector<Scenario>& scenarios) {
  SweepOutcomes outcomes;
  for (const Scenario& s : scenarios) {
    if (s.error) {
      outcomes.add(*s.error);
    } else if (!s.unfit.empty()) {
      outcomes.add(DoesNotFit(s.unfit));
    } else {
      outcomes.add(Outcome::ok);
    }
  }
  outcomes.throw_if_none_ran();
  return outcomes;
}

Record describe_workload(const SimulateArgs& args, const SimulateInputs& in) {
  Record r;
  if (in.trace) {
    r.value("source", Cell::text("trace"));
    r.value("file", Cell::text(args.trace));
    return r;
  }
  const Workload& w = in.workload;
  r.value("source", Cell::text(args.workload.empty() ? "command line" : args.workload));
  r.value("name", w.name.empty() ? Cell::empty() : Cell::text(w.name));
  r.value("seed", Cell::count(w.seed));
  r.value("arrival", Cell::text(in.concurrency ? std::string("closed loop")
                                               : std::string(arrival_name(w.arrival))));
  r.value("clients", in.concurrency ? Cell::count(*in.concurrency) : Cell::empty());
  r.value("duration_s", w.duration_s ? Cell::number(*w.duration_s) : Cell::empty());
  r.value("requests", w.requests ? Cell::count(*w.requests) : Cell::empty());
  r.value("prompt_tokens", Cell::text(describe(w.prompt)));
  r.value("output_tokens", Cell::text(describe(w.output)));
  if (w.prefix.fraction > 0) {
    Record& prefix = r.object("prefix");
    prefix.value("fraction", Cell::number(w.prefix.fraction));
    prefix.value("count", Cell::count(w.prefix.count));
    prefix.value("tokens", Cell::count(w.prefix.tokens));
  } else {
    r.value("prefix", Cell::empty());
  }
  return r;
}

namespace {

/// A run in which nothing arrived measures nothing: the trace holds no request, or the
/// workload's stop comes before its first arrival.
void require_arrivals(const SimResult& x, const SimulateArgs& args, const SimulateInputs& in,
                      std::optional<double> rate) {
  if (x.requests_arrived > 0) {
    return;
  }
  if (in.trace) {
    throw InputError("'" + args.trace +
                     "' holds no request, only its header: add a row per "
                     "request (arrival_s,prompt_tokens,output_tokens)");
  }
  throw InputError(fmt::format(
      "no request arrives: the workload stops after {:g} s, before its first arrival at {:g} "
      "requests/s; lengthen --duration, raise --rate, or give --requests",
      in.workload.duration_s.value_or(0), rate.value_or(in.workload.rate)));
}

void warn_overload(const Scenario& s, std::vector<std::string>& warnings) {
  const SimResult& x = s.result;
  // A closed loop waits for its own requests: its queue is the clients beyond what the engine
  // runs at once, not arrivals outrunning it.
  if (s.concurrency || !overloaded(x)) {
    return;
  }
  double offered = offered_rate(x);
  warnings.push_back(fmt::format(
      "{}: overloaded: {:.4g} requests/s offered, about {:.4g}/s served; the queue grew {:.2f} s "
      "per second of arrivals, so its latencies are those of a queue that never drains, not "
      "of a steady state (lower --rate, or add GPUs)",
      s.label.empty() ? s.model : s.label, offered, offered / (1 + *x.queue_growth),
      *x.queue_growth));
}

void warn_rejected(const Scenario& s, std::vector<std::string>& warnings) {
  if (s.result.requests_rejected > 0) {
    warnings.push_back(s.model + ": " + group_digits(s.result.requests_rejected) +
                       " requests rejected (" + group_digits(s.result.rejected_pool) +
                       " larger than one sequence's share of the KV pool, " +
                       group_digits(s.result.rejected_context) +
                       " longer than the max model length)");
  }
}

/// Disaggregated serving: each model on each GPU with a prefill and a decode pool of its own.
std::vector<Scenario> run_pools(const SimulateArgs& args, const SimulateInputs& in,
                                const std::vector<Model>& models,
                                std::vector<std::string>& warnings) {
  std::vector<Gpu> devices =
      deployment_devices(*in.decode_pool, in.profile, GpuCatalog(in.deployment.gpu_file),
                         "add a --device-profile that kvcalc measure wrote", warnings);
  auto prefills = capacity_requests(models, args.cache, *in.prefill_pool, args.engine,
                                    args.block_size, devices, {}, std::nullopt);
  auto decodes = capacity_requests(models, args.cache, *in.decode_pool, args.engine,
                                   args.block_size, devices, {}, std::nullopt);
  std::vector<Scenario> scenarios;
  for (std::size_t i = 0; i < prefills.size(); ++i) {
    Scenario base;
    base.model = prefills[i].model.name;
    base.gpu = prefills[i].gpu.name;
    CapacityResult pc;
    CapacityResult dc;
    std::variant<SimConfig, std::string> prefill;
    std::variant<SimConfig, std::string> decode;
    if (std::optional<Error> error = attempt([&] {
          prefill = instance_of(prefills[i], args, in, in.prefill_pool->node_gpus(), pc, warnings);
          decode = instance_of(decodes[i], args, in, in.decode_pool->node_gpus(), dc, warnings);
        })) {
      base.engine = decodes[i].engine.engine;
      base.config.step.parallel = decodes[i].parallel;
      base.error = std::move(error);
      scenarios.push_back(std::move(base));
      continue;
    }
    base.engine = dc.engine;
    base.config.step.parallel = dc.parallel;
    if (auto* why = std::get_if<std::string>(&prefill)) {
      base.unfit = "prefill pool: " + *why;
    } else if (auto* why_d = std::get_if<std::string>(&decode)) {
      base.unfit = "decode pool: " + *why_d;
    }
    if (!base.unfit.empty()) {
      scenarios.push_back(std::move(base));
      continue;
    }
    base.config = std::get<SimConfig>(decode);
    Pools pools;
    pools.prefill = std::get<SimConfig>(prefill);
    const Topology& links = pools.prefill.step.rates.links;
    pools.transfer.bytes_per_token = static_cast<double>(pc.kv_bytes_per_token_per_gpu);
    pools.transfer.bytes_per_sequence = static_cast<double>(state_bytes(pc.cache_groups));
    pools.transfer.receive_bytes_per_token = static_cast<double>(dc.kv_bytes_per_token_per_gpu);
    pools.transfer.receive_bytes_per_sequence = static_cast<double>(state_bytes(dc.cache_groups));
    pools.transfer.send_lanes = pc.kv_pools;
    pools.transfer.receive_lanes = dc.kv_pools;
    pools.transfer.bytes_per_s = links.out_bytes_per_s;
    pools.transfer.latency_s = links.out_latency_s;
    base.pools = pools;
    for (const auto& rate : in.rates) {
      Scenario s = base;
      s.rate = rate;
      s.concurrency = in.concurrency;
      s.label = s.model + " P " + group_digits(pc.parallel.gpus) + " / D " +
                group_digits(dc.parallel.gpus) +
                (rate && in.rates.size() > 1 ? fmt::format(" @ {:g}/s", *rate) : "");
      std::unique_ptr<std::istream> file;
      auto source = open_source(args, in, rate, file);
      DisaggregatedResult run =
          simulate_disaggregated(s.pools->prefill, s.config, s.pools->transfer, *source);
      s.result = run.requests;
      require_arrivals(s.result, args, in, rate);
      s.pools->prefill_run = std::move(run.prefill);
      s.pools->decode_run = std::move(run.decode);
      s.pools->transfers = run.transfer;
      warn_overload(s, warnings);
      warn_rejected(s, warnings);
      scenarios.push_back(std::move(s));
    }
  }
  return scenarios;
}

/// Every model on every GPU and tp of the deployment, at every rate: simulated where it fits,
/// with the reason where it does not.
std::vector<Scenario> run_scenarios(const SimulateArgs& args, const SimulateInputs& in,
                                    const std::vector<Model>& models, TimelineFile& timeline,
                                    std::vector<std::string>& warnings, std::ostream& err) {
  if (in.prefill_pool) {
    return run_pools(args, in, models, warnings);
  }
  std::vector<Scenario> scenarios;
  const ParallelOptions& deployment = in.deployment;
  std::vector<Scenario> bases = instances(args, in, models, warnings);
  Progress progress(err, bases.size() * in.rates.size());
  for (const Scenario& base : bases) {
    if (outcome_of(base) != Outcome::ok) {
      scenarios.push_back(base);
      continue;
    }
    for (const auto& rate : in.rates) {
      progress.step("simulating " + base.model + " on " + base.gpu +
                    (rate ? fmt::format(" at {:g} requests/s", *rate) : std::string()));
      Scenario s = base;
      s.rate = rate;
      s.concurrency = in.concurrency;
      s.label = s.model +
                (deployment.gpus.size() > 1 || deployment.tps.size() > 1
                     ? " " + s.gpu + " tp " + std::to_string(s.config.step.parallel.tp)
                     : "") +
                (rate && in.rates.size() > 1 ? fmt::format(" @ {:g}/s", *rate) : "");
      std::unique_ptr<std::istream> file;
      auto source = open_source(args, in, rate, file);
      s.result = simulate(s.config, *source, timeline.rows_of(s));
      require_arrivals(s.result, args, in, rate);
      warn_overload(s, warnings);
      warn_rejected(s, warnings);
      scenarios.push_back(std::move(s));
    }
  }
  return scenarios;
}

Record describe_scheduler(const SimulateArgs& args, const SimulateInputs& in) {
  Record r;
  r.value("preemption", Cell::text(std::string(preemption_name(args.preemption))));
  r.value("swap_bytes_per_s", Cell::number(in.swap_bandwidth));
  r.value("prefix_sharing", Cell::flag(!args.no_prefix_sharing));
  r.value("mla", Cell::text(std::string(mla_mode_name(args.mla))));
  return r;
}

void describe_latency(Record& r, const std::string& metric, const LatencySummary& s) {
  r.value("metric", Cell::text(metric), k_tables_only);
  r.value("mean", "mean", latency_cell(s, s.mean));
  r.value("p50", "p50", latency_cell(s, s.p50));
  r.value("p90", "p90", latency_cell(s, s.p90));
  r.value("p99", "p99", latency_cell(s, s.p99));
  r.value("max", "max", latency_cell(s, s.max));
  r.value("count", Cell::count(s.count));
}

/// One scenario: its deployment, its pools and what the run measured. An unfit one carries the
/// reason, and "does not fit" where people read the requests done.
Record describe_scenario(const Scenario& s, bool trace) {
  const SimConfig& c = s.config;
  const SimResult& x = s.result;
  Record r;
  r.value("model", "model", Cell::text(s.model));
  r.value("gpu", "gpu", Cell::text(s.gpu));
  // A combination that cannot run was never resolved into a deployment: its GPUs are unknown.
  r.value("gpus", s.error ? Cell::empty()
                          : Cell::count(c.step.parallel.gpus +
                                        (s.pools ? s.pools->prefill.step.parallel.gpus : 0)));
  r.value("tp", "tp", Cell::count(c.step.parallel.tp));
  if (Outcome outcome = outcome_of(s); outcome != Outcome::ok) {
    r.value("engine", Cell::text(std::string(engine_name(s.engine))));
    r.value("fits", Cell::flag(false));
    describe_outcome(r, outcome, s.error ? s.error->what() : s.unfit);
    r.value("requests_completed", "done", Cell::empty().shown_as(status_name(outcome)),
            k_tables_only);
    return r;
  }
  r.value("pp", Cell::count(c.step.parallel.pp));
  r.value("ep", Cell::count(c.step.parallel.ep));
  r.value("dp_attention", Cell::flag(c.step.parallel.dp_attention));
  r.value("attention_dp", Cell::count(c.step.parallel.dp));
  r.value("engine", Cell::text(std::string(engine_name(s.engine))));
  r.value("fits", Cell::flag(true));
  describe_outcome(r, Outcome::ok, "");
  r.value("rate_per_s", "rate/s",
          s.rate          ? Cell::number(*s.rate)
          : s.concurrency ? Cell::empty().shown_as(group_digits(*s.concurrency) + " clients")
                          : Cell::empty().shown_as(trace ? "trace" : "burst"));
  r.value("clients", s.concurrency ? Cell::count(*s.concurrency) : Cell::empty());
  r.value("rates", Cell::text(c.step.rates.source));
  r.value("pricing", Cell::text(c.pricing == Pricing::estimate ? "estimate" : "bound"));
  r.value("estimate_source", Cell::text(c.step.rates.estimate_note));
  Record& pool = r.object("kv_pool");
  pool.value("blocks", Cell::count(c.pool_blocks));
  pool.value("block_size", Cell::count(c.block_size));
  pool.value("tokens", c.pool_unit == "blocks"   ? Cell::count(c.pool_blocks * c.block_size)
                       : c.pool_unit == "tokens" ? Cell::count(c.pool_blocks)
                                                 : Cell::empty());
  pool.value("sequence_blocks_limit", Cell::count(c.sequence_blocks_limit));
  pool.value("unit", Cell::text(c.pool_unit));
  auto& pools = pool.list("pools");
  for (std::size_t p = 0; p < c.pools.size(); ++p) {
    Record& one = pools.emplace_back();
    one.value("name", Cell::text(c.pools[p].name));
    one.value("unit", Cell::text(c.pools[p].unit));
    one.value("capacity", Cell::count(c.pools[p].capacity));
    one.value("sequence_limit", Cell::count(c.pool_limits[p]));
  }
  r.value("max_batched_tokens", Cell::count(c.max_batched_tokens));
  r.value("max_seqs", Cell::count(c.max_seqs));
  r.value("requests_arrived", Cell::count(x.requests_arrived));
  Record& load = r.object("load");
  double offered = offered_rate(x);
  load.value("offered_per_s", offered > 0 ? Cell::number(offered) : Cell::empty());
  load.value("queue_growth", x.queue_growth ? Cell::number(*x.queue_growth) : Cell::empty());
  load.value("served_per_s", offered > 0 && x.queue_growth
                                 ? Cell::number(offered / (1 + std::max(0.0, *x.queue_growth)))
                                 : Cell::empty());
  load.value("overloaded", Cell::flag(overloaded(x)));
  r.value("requests_completed", "done", Cell::count(x.requests_completed));
  r.value("requests_rejected", "rejected", Cell::count(x.requests_rejected));
  Record& rejections = r.object("rejections");
  rejections.value("larger_than_pool", Cell::count(x.rejected_pool));
  rejections.value("longer_than_max_context", Cell::count(x.rejected_context));
  r.value("preemptions", "preempted", Cell::count(x.preemptions));
  r.value("steps", Cell::count(x.steps));
  r.value("makespan_s", Cell::seconds(x.makespan_s));
  r.value("busy_s", Cell::seconds(x.busy_s));
  r.value("swap_s", Cell::seconds(x.swap_s));
  Record& tokens = r.object("tokens");
  tokens.value("input", Cell::count(x.input_tokens));
  tokens.value("output", Cell::count(x.output_tokens));
  tokens.value("computed", Cell::count(x.computed_tokens));
  tokens.value("recomputed", Cell::count(x.recomputed_tokens));
  tokens.value("prefix_hits", Cell::count(x.prefix_hit_tokens));
  Record& throughput = r.object("throughput_tokens_per_s");
  throughput.value("input", "in tok/s", Cell::number(x.input_tokens_per_s));
  throughput.value("output", "out tok/s", Cell::number(x.output_tokens_per_s));
  throughput.value("total", "tok/s", Cell::number(x.total_tokens_per_s));
  describe_latency(r.object("ttft_s"), "TTFT", x.ttft);
  describe_latency(r.object("tpot_s"), "TPOT", x.tpot);
  describe_latency(r.object("e2e_s"), "E2E", x.e2e);
  describe_latency(r.object("queue_s"), "queueing", x.queue);
  Record& occupancy = r.object("kv_occupancy");
  occupancy.value("peak", "KV peak", Cell::share(x.kv_peak));
  occupancy.value("mean", "KV mean", Cell::share(x.kv_mean));
  occupancy.value("peak_blocks", Cell::count(x.kv_peak_blocks));
  r.value("fragmentation", Cell::number(x.fragmentation));
  Record& concurrency = r.object("concurrency");
  concurrency.value("peak", "peak seqs", Cell::count(x.peak_running));
  concurrency.value("mean", Cell::number(x.mean_running));
  r.value("mean_step_tokens", Cell::number(x.mean_step_tokens));
  if (s.pools) {
    Record& d = r.object("disaggregated");
    auto describe_pool = [&](const char* key, const SimConfig& pc, const SimResult& run) {
      Record& p = d.object(key);
      p.value("gpus", Cell::count(pc.step.parallel.gpus));
      p.value("tp", Cell::count(pc.step.parallel.tp));
      p.value("pp", Cell::count(pc.step.parallel.pp));
      p.value("ep", Cell::count(pc.step.parallel.ep));
      p.value("dp_attention", Cell::flag(pc.step.parallel.dp_attention));
      p.value("attention_dp", Cell::count(pc.step.parallel.dp));
      p.value("kv_pool_blocks", Cell::count(pc.pool_blocks));
      p.value("block_size", Cell::count(pc.block_size));
      p.value("max_seqs", Cell::count(pc.max_seqs));
      p.value("steps", Cell::count(run.steps));
      p.value("busy_s", Cell::seconds(run.busy_s));
      p.value("preemptions", Cell::count(run.preemptions));
      p.value("kv_occupancy_peak", Cell::share(run.kv_peak));
      p.value("kv_occupancy_mean", Cell::share(run.kv_mean));
      p.value("peak_running", Cell::count(run.peak_running));
      describe_latency(p.object("queue_s"), "queueing", run.queue);
    };
    describe_pool("prefill", s.pools->prefill, s.pools->prefill_run);
    describe_pool("decode", s.config, s.pools->decode_run);
    describe_latency(d.object("kv_transfer_s"), "KV transfer", s.pools->transfers);
  } else {
    r.value("disaggregated", Cell::empty(), k_json_only);
  }
  return r;
}

/// The flat CSV: a row per scenario, nested figures under flat names.
std::vector<ColumnRef> csv_columns() {
  std::vector<ColumnRef> columns = {{"model"},
                                    {"gpu"},
                                    {"gpus"},
                                    {"tp"},
                                    {"engine"},
                                    {"rate_per_s"},
                                    {"clients"},
                                    {"kv_pool.blocks", "", "kv_pool_blocks"},
                                    {"kv_pool.block_size", "", "block_size_tokens"},
                                    {"requests_arrived"},
                                    {"requests_completed"},
                                    {"requests_rejected"},
                                    {"preemptions"},
                                    {"steps"},
                                    {"makespan_s"},
                                    {"throughput_tokens_per_s.input", "", "input_tokens_per_s"},
                                    {"throughput_tokens_per_s.output", "", "output_tokens_per_s"},
                                    {"throughput_tokens_per_s.total", "", "total_tokens_per_s"}};
  for (const char* m : {"ttft", "tpot", "e2e", "queue"}) {
    for (const char* q : {"mean", "p50", "p90", "p99"}) {
      columns.push_back({fmt::format("{}_s.{}", m, q), "", fmt::format("{}_{}_s", m, q)});
    }
  }
  columns.push_back({"kv_occupancy.peak", "", "kv_occupancy_peak"});
  columns.push_back({"kv_occupancy.mean", "", "kv_occupancy_mean"});
  columns.push_back({"fragmentation"});
  columns.push_back({"concurrency.peak", "", "peak_running"});
  columns.push_back({"status"});
  columns.push_back({"reason"});
  return columns;
}

std::string workload_note(const SimulateArgs& args, const SimulateInputs& in) {
  if (in.trace) {
    return "workload: trace " + args.trace;
  }
  const Workload& w = in.workload;
  return fmt::format(
      "workload: {}{}{}, prompt {}, output {}, seed {}{}",
      in.concurrency ? fmt::format("a closed loop of {} clients, each sending its next request "
                                   "when the last finishes",
                                   group_digits(*in.concurrency))
                     : std::string(arrival_name(w.arrival)) + " arrivals",
      w.duration_s ? fmt::format(" for {:g} s", *w.duration_s) : std::string(),
      w.requests ? fmt::format(" (at most {} requests)", *w.requests) : std::string(),
      describe(w.prompt), describe(w.output), w.seed,
      w.prefix.fraction > 0 ? fmt::format("; {:g}% share one of {} prefixes of {} tokens",
                                          w.prefix.fraction * 100, w.prefix.count, w.prefix.tokens)
                            : std::string());
}

/// The latency table of a run that simulated one scenario, with its pool in words.
Table latency_table(const Scenario& s, const Record& described) {
  Table d = table_of({&described.records("ttft_s").front(), &described.records("tpot_s").front(),
                      &described.records("e2e_s").front(), &described.records("queue_s").front()},
                     {{"metric"}, {"mean"}, {"p50"}, {"p90"}, {"p99"}, {"max"}});
  d.title = s.model + " on " +
            (s.pools ? group_digits(s.pools->prefill.step.parallel.gpus) + " + " : "") +
            group_digits(s.config.step.parallel.gpus) + " × " + s.gpu +
            (s.pools ? " (prefill + decode pools): latency from arrival" : ": latency");
  const SimConfig& c = s.config;
  const SimResult& x = s.result;
  std::string pool =
      c.pool_unit == "bytes" ? group_digits(c.pool_blocks) + " B"
      : c.pool_unit == "tokens"
          ? group_digits(c.pool_blocks) + " tokens" +
                (c.block_size == 1 ? std::string(" (token-granular)")
                                   : " in pages of " + group_digits(c.block_size))
          : group_digits(c.pool_blocks) + " blocks of " + group_digits(c.block_size) + " tokens";
  for (std::size_t p = 1; p < c.pools.size(); ++p) {
    pool +=
        ", " + c.pools[p].name + " " + group_digits(c.pools[p].capacity) + " " + c.pools[p].unit;
  }
  d.notes.push_back(fmt::format(
      "KV pool {}; fragmentation {:.1f}% of allocated slots; {} step{}, "
      "{:.1f} tokens each; mean concurrency {:.1f}; {} tokens recomputed, {} prefix tokens "
      "reused; percentiles within 0.1%",
      pool, x.fragmentation * 100, group_digits(x.steps), x.steps == 1 ? "" : "s",
      x.mean_step_tokens, x.mean_running, group_digits(x.recomputed_tokens),
      group_digits(x.prefix_hit_tokens)));
  return d;
}

/// The result in every format, from the descriptions of the workload, the scheduler and the
/// scenarios.
void render_simulation(CommandOutput& out, const SimulateArgs& args, const SimulateInputs& in,
                       const std::vector<Scenario>& scenarios,
                       const std::vector<const Scenario*>& ran) {
  Output::TableId table = out->begin_table("", {{"model"},
                                                {"gpu"},
                                                {"tp"},
                                                {"rate_per_s"},
                                                {"requests_completed"},
                                                {"requests_rejected"},
                                                {"preemptions"},
                                                {"throughput_tokens_per_s.input"},
                                                {"throughput_tokens_per_s.output"},
                                                {"ttft_s.p50", "TTFT p50"},
                                                {"ttft_s.p99", "TTFT p99"},
                                                {"tpot_s.p50", "TPOT p50"},
                                                {"tpot_s.p99", "TPOT p99"},
                                                {"e2e_s.p99", "E2E p99"},
                                                {"kv_occupancy.peak"},
                                                {"kv_occupancy.mean"},
                                                {"concurrency.peak"}});
  out->csv_view(csv_columns());
  out->field("workload", describe_workload(args, in));
  out->field("scheduler", describe_scheduler(args, in));
  out->begin_list("scenarios");
  std::optional<Table> latency; // one scenario ran: its latencies
  for (const Scenario& s : scenarios) {
    Record described = describe_scenario(s, in.trace);
    out->item(described);
    if (ran.size() == 1 && &s == ran.front()) {
      latency = latency_table(s, described);
    }
    if (s.error) {
      out->note(table, outcome_note(s.model, s.gpu, s.config.step.parallel.tp, outcome_of(s),
                                    s.error->what()));
    } else if (!s.unfit.empty()) {
      out->note(table, s.unfit);
    }
    if (s.pools) {
      auto pool = [](const char* name, const SimConfig& c, const SimResult& run) {
        const Parallelism& p = c.step.parallel;
        return fmt::format("{} pool {} GPUs (tp {}, pp {}, ep {}{}): {} KV blocks, busy {:.3g} s, "
                           "KV peak {:.1f}%, queue p99 {:.4g} s",
                           name, p.gpus, p.tp, p.pp, p.ep, p.dp_attention ? ", dp-attention" : "",
                           group_digits(c.pool_blocks), run.busy_s, run.kv_peak * 100,
                           run.queue.p99);
      };
      out->note(table, s.label + ": " + pool("prefill", s.pools->prefill, s.pools->prefill_run) +
                           "; " + pool("decode", s.config, s.pools->decode_run) +
                           fmt::format("; KV transfer p50 {:.4g} s, p99 {:.4g} s; TTFT counts "
                                       "prefill, transfer and the wait for a decode slot",
                                       s.pools->transfers.p50, s.pools->transfers.p99));
    }
  }
  out->end_list();
  out->note(table, workload_note(args, in));
  out->note(table,
            fmt::format("{}; {} preemption; throughput over the makespan (first arrival "
                        "to last token); TPOT (E2E − TTFT) / (output tokens − 1); "
                        "docs/simulate.md",
                        pricing_note(ran.front()->config), preemption_name(args.preemption)));
  if (latency) {
    out->table(*latency);
  }
}

int run_simulate(const SimulateArgs& args, std::ostream& out, std::ostream& err) {
  SimulateInputs in = read_inputs(args, err);
  CommandOutput output(args.output, "simulate", out, err);
  std::vector<Model> models = load_models(args.models, output.warnings);
  if (!args.slo.empty()) {
    return run_slo(args, in, models, output, err);
  }
  TimelineFile timeline(args.timeline);
  std::vector<Scenario> scenarios = run_scenarios(args, in, models, timeline, output.warnings, err);
  SweepOutcomes outcomes = outcomes_of(scenarios);
  std::vector<const Scenario*> ran;
  for (const Scenario& s : scenarios) {
    if (outcome_of(s) == Outcome::ok) {
      ran.push_back(&s);
    }
  }
  timeline.close(err);
  if (!args.plot.empty()) {
    write_plot(args.plot, ran);
    err << "kvcalc: wrote " << args.plot << '\n';
  }
  render_simulation(output, args, in, scenarios, ran);
  output.finish();
  return outcomes.exit_code();
}

/// The spelling an earlier kvcalc used for `flag`: refused with the one to use.
void add_renamed(const Options& cmd, const std::string& old_flag, const std::string& new_flag) {
  cmd.text(
         old_flag,
         [old_flag, new_flag](const std::string&) {
           throw InputError(old_flag + " is now " + new_flag);
         },
         "")
      .group("");
}

} // namespace

Command setup_simulate(const Options& app) {
  auto args = std::make_shared<SimulateArgs>();
  Options cmd = app.subcommand(
      "simulate", "A serving instance over time: KV occupancy, preemptions, throughput and "
                  "latency on a workload or a trace (docs/simulate.md)");
  cmd.option("models", args->models, k_models_help).type_name("MODEL").required();
  cmd.option("--workload", args->workload,
             "Synthetic workload YAML (docs/simulate.md); options below override its keys")
      .type_name("FILE.yaml")
      .group(k_group_workload);
  cmd.option("--trace", args->trace,
             "Requests to replay: CSV (arrival_s,prompt_tokens,output_tokens[,prefix_id,"
             "prefix_tokens]) or JSONL with the same keys")
      .type_name("FILE")
      .group(k_group_workload);
  add_parsed(
      cmd, "--arrival", args->arrival,
      [](const std::string& text, const std::string&) {
        return k_arrival_processes.find_any_case(text);
      },
      "Arrivals: poisson, constant (every 1/rate s) or burst (--requests at t = 0) "
      "[default: the workload's, else poisson]")
      .check(choice_of(k_arrival_processes))
      .group(k_group_workload);
  add_parsed(
      cmd, "--rate", args->rates,
      [](const std::string& text, const std::string&) { return parse_rates(text); },
      "Requests per second; a comma-separated list sweeps [default: the workload's, "
      "else 10]")
      .type_name("R,...")
      .group(k_group_workload);
  cmd.option("--prompt-tokens", args->prompt_tokens,
             "Prompt tokens: N, uniform:LOW,HIGH, normal:MEAN,STD, lognormal:MEAN,SIGMA or "
             "cdf:TOKENS=P,...,TOKENS=1 [default: the workload's, else 1024]")
      .type_name("DIST")
      .group(k_group_workload);
  cmd.option("--output-tokens", args->output_tokens,
             "Output tokens, as --prompt-tokens [default: the workload's, else 256]")
      .type_name("DIST")
      .group(k_group_workload);
  add_renamed(cmd, "--prompt", "--prompt-tokens");
  cmd.option("--duration", args->duration, "Seconds of arrivals; the run then drains what arrived")
      .type_name("SECONDS")
      .group(k_group_workload);
  add_count(cmd, "--concurrency", args->concurrency,
            "A closed loop of N clients, each sending its next request when its last one "
            "finishes (vllm bench serve --max-concurrency); stops at --requests or --duration")
      .type_name("N")
      .group(k_group_workload);
  add_count(cmd, "--requests", args->requests,
            "At most this many requests [default: 1000 when neither this nor --duration nor a "
            "workload is given]")
      .group(k_group_workload);
  cmd.option("--seed", args->seed, "Random seed [default: the workload's, else 1]")
      .type_name("N")
      .group(k_group_workload);
  add_choice(cmd, "--preemption", args->preemption, k_preemptions,
             "When a sequence needs a block and none is free, the latest-arrived running "
             "sequence is preempted: recompute (vLLM's default) or swap (to host memory)")
      .group(k_group_workload);
  cmd.option("--swap-bandwidth", args->swap_bandwidth,
             "Host link of one GPU, one direction, in bytes per second (PCIe 4.0 x16 ≈ "
             "25GB, 5.0 ≈ 50GB), for --preemption swap [default: 25GB]")
      .type_name("BYTES/S")
      .group(k_group_workload);
  cmd.flag("--no-prefix-sharing", args->no_prefix_sharing,
           "Compute every prompt in full, shared prefixes included")
      .group(k_group_workload);
  add_choice(cmd, "--mla", args->mla, k_mla_modes,
             "MLA mode of each step: auto (absorbed for decode and chunks of ≤ 128 tokens over a "
             "prefix, naive for prompts), absorbed or naive")
      .group(k_group_workload);
  add_cache_options(cmd, args->cache);
  add_parallel_options(cmd, args->parallel, ParallelScope::deployment, true);
  cmd.option("--prefill", args->prefill_pool,
             "Disaggregated serving: the prefill pool, NODESxGPUS[:tpT][:ppP][:epE][:dp[N]] "
             "(without tp one instance over its GPUs, attention data parallel when ep > 1); "
             "needs --decode")
      .type_name("SPEC")
      .group(k_group_deployment);
  cmd.option("--decode", args->decode_pool,
             "Disaggregated serving: the decode pool, as --prefill; requests' caches cross "
             "the NICs to it")
      .type_name("SPEC")
      .group(k_group_deployment);
  add_step_pricing_options(cmd, args->overlap, args->imbalance);
  cmd.find("--tp").description(
      "Tensor parallel size; a comma-separated list sweeps [default: --gpus / --pp, else 1]");
  add_engine_options(cmd, args->engine);
  cmd.find("--max-batched-tokens")
      .description("Tokens per scheduler step (chunked prefill budget) [default: the engine's: "
                   "vLLM 8192 (2048 below 70 GiB or on A100), SGLang by GPU memory, else 8192]");
  cmd.find("--max-seqs")
      .description("Running sequences at most [default: vLLM 1024 (256 below 70 GiB or on "
                   "A100), else 256]");
  add_count(cmd, "--block-size", args->block_size,
            "Page size in tokens [default: vLLM 16 (MLA 64 on Hopper, 128 on Blackwell), "
            "TensorRT-LLM 32, SGLang and plain 1]")
      .type_name("TOKENS")
      .group(k_group_engine);
  cmd.option("--efficiency", args->efficiency,
             "Scale the datasheet ceilings: bw=F,flops=F [default: 1, the datasheet]")
      .type_name("bw=F,flops=F")
      .group(k_group_ceilings);
  add_ceiling_options(cmd, args->ceilings,
                      "Measured ceilings (a profile `kvcalc measure --profile` writes)");
  add_choice(cmd, "--ceilings", args->pricing, k_pricings,
             "Price steps with the estimate (the kernels' measured efficiency, where a profile "
             "covers the GPU) or at the datasheet bound")
      .each([args](const std::string&) { args->pricing_given = true; })
      .group(k_group_ceilings);
  cmd.option("--slo", args->slo,
             "Latency targets, METRIC_STAT=DURATION,... (ttft_p99=2s,tpot_p99=50ms): the "
             "highest arrival rate each deployment meets them at (doubling, then "
             "bisection), or with --rate or --trace whether it meets them there and the "
             "fewest GPUs that do; every run is listed")
      .type_name("TARGETS")
      .group(k_group_workload);
  add_choice(cmd, "--slo-search", args->slo_search, k_slo_searches,
             "With --slo, what to search: the highest arrival rate, or the largest batch "
             "(requests arriving at once, doubling then bisection to the exact count)")
      .each([args](const std::string&) { args->slo_search_given = true; })
      .group(k_group_workload);
  cmd.option("--timeline", args->timeline,
             "Write every step as CSV: time, running, waiting, tokens, KV blocks")
      .type_name("FILE.csv")
      .group(k_group_output);
  cmd.option("--plot", args->plot, "Write an SVG of KV occupancy and throughput over time")
      .type_name("FILE.svg")
      .group(k_group_output);
  add_output_options(cmd, args->output, ScaledBytes::no);
  return {cmd.app(), [args](std::ostream& out, std::ostream& err) {
            if (args->slo.empty() && args->slo_search_given) {
              throw InputError("--slo-search says what an SLO search looks for; give the "
                               "targets with --slo (ttft_p99=2s,tpot_p99=50ms)");
            }
            return run_simulate(*args, out, err);
          }};
}

std::string pricing_note(const SimConfig& c) {
  const DeviceRates& r = c.step.rates;
  if (c.pricing == Pricing::estimate) {
    return "steps priced by the estimate, what the kernels reach: " + r.estimate_note +
           "; --ceilings datasheet prices them at the bound";
  }
  return "steps priced at the roofline's bound (" + r.source + "), an upper bound on speed" +
         (r.estimate ? std::string() : "; " + r.estimate_note);
}

} // namespace kvcalc::cli
