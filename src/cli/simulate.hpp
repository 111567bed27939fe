#pragma once
// What `simulate`'s two paths share: the command line read and checked, the instances of its
// deployment and the requests of a run. simulate.cpp runs the scenarios and renders them;
// simulate_slo.cpp searches or checks each instance against latency targets (--slo).

#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <kvcalc/device/profile.hpp>
#include <kvcalc/report/record.hpp>
#include <kvcalc/roofline/roofline.hpp>
#include <kvcalc/sim/simulator.hpp>
#include <kvcalc/sim/slo.hpp>
#include <kvcalc/sim/workload.hpp>

#include "command.hpp"
#include "sweep.hpp"

namespace kvcalc::cli {

struct SimulateArgs {
  std::vector<std::string> models;
  std::string workload;                       ///< workload YAML (docs/simulate.md)
  std::string trace;                          ///< CSV or JSONL requests
  std::optional<sim::ArrivalProcess> arrival; ///< overrides the workload's
  std::vector<double> rates;                  ///< requests per second, a list sweeps
  std::string prompt_tokens;                  ///< length distribution
  std::string output_tokens;
  std::string duration;
  std::optional<u64> requests;
  std::optional<u64> concurrency; ///< a closed loop of this many clients
  std::string seed;
  sim::Preemption preemption = sim::Preemption::recompute;
  std::string swap_bandwidth = "25GB"; ///< bytes per second, one GPU's host link
  bool no_prefix_sharing = false;
  roofline::MlaMode mla = roofline::MlaMode::automatic;
  std::string efficiency;
  CeilingOptions ceilings;
  roofline::Pricing pricing = roofline::Pricing::estimate; ///< --ceilings
  bool pricing_given = false;
  std::string timeline; ///< per-step CSV file
  std::string slo;      ///< latency targets: find the highest rate meeting them
  sim::SloSearchKind slo_search = sim::SloSearchKind::rate; ///< or the largest batch
  bool slo_search_given = false;                            ///< --slo-search on the command line
  std::string plot;                                         ///< SVG file
  std::string prefill_pool; ///< disaggregated: the prefill pool's deployment, NxG[:tpT][:epE]...
  std::string decode_pool;  ///< and the decode pool's
  roofline::Overlap overlap = roofline::Overlap::none;
  std::string imbalance = "1";
  std::optional<u64> block_size;
  CacheRequest cache;
  ParallelOptions parallel = ParallelOptions::on({"h100-sxm"});
  EngineOptions engine = EngineOptions::of(Engine::vllm);
  OutputOptions output;
};

/// The command line read and checked: all that a run needs before a model is loaded.
struct SimulateInputs {
  bool trace = false;
  /// A trace that comes through a pipe, read once and replayed from memory for every scenario
  /// (a file is read again for each).
  std::optional<std::string> piped_trace;
  sim::Workload workload;                   ///< a synthetic run's
  std::vector<std::optional<double>> rates; ///< one empty entry for a trace, a burst, a loop
  std::optional<u64> concurrency;           ///< a closed loop of this many clients
  Efficiency efficiency;
  std::optional<DeviceProfile> profile;
  double swap_bandwidth = 0; ///< bytes per second
  ParallelOptions deployment;
  std::optional<ParallelOptions> prefill_pool; ///< disaggregated serving
  std::optional<ParallelOptions> decode_pool;
  double imbalance = 1;
};

/// A disaggregated scenario's pools, their runs and the transfers between them.
struct Pools {
  sim::SimConfig prefill;
  sim::SimResult prefill_run;
  sim::SimResult decode_run;
  sim::KvTransfer transfer;
  sim::LatencySummary transfers;
};

struct Scenario {
  sim::SimConfig config; ///< the instance; disaggregated: the decode pool
  std::optional<Pools> pools;
  std::string model;
  std::string gpu;
  Engine engine = Engine::plain;
  std::optional<double> rate;     ///< synthetic workloads
  std::optional<u64> concurrency; ///< a closed loop's clients
  std::string unfit;              ///< why the model does not fit (then nothing was simulated)
  std::optional<Error> error;     ///< why the combination cannot run (then nothing was simulated)
  u64 kv_pool_bytes_per_gpu = 0;  ///< what a fraction of its pool stands for
  sim::SimResult result;
  std::string label; ///< for plots and timelines
};

/// Whether a scenario ran, did not fit or could not run (docs/cli.md, "Exit codes").
Outcome outcome_of(const Scenario& s);
/// The outcomes of `scenarios`: the command fails when none ran, else its exit code.
SweepOutcomes outcomes_of(const std::vector<Scenario>& scenarios);

/// Every model on every GPU and tp of the deployment as an instance, not yet run; where it does
/// not fit, or cannot run at all, the reason.
std::vector<Scenario> instances(const SimulateArgs& args, const SimulateInputs& in,
                                const std::vector<Model>& models,
                                std::vector<std::string>& warnings);

/// The requests of one run: the trace (read through `file`), or the synthetic workload at
/// `rate`.
std::unique_ptr<sim::RequestSource> open_source(const SimulateArgs& args, const SimulateInputs& in,
                                                std::optional<double> rate,
                                                std::unique_ptr<std::istream>& file);

/// Whether the run's arrivals outran it (its queue grew through the run).
bool overloaded(const sim::SimResult& x);

/// The workload: the trace's file, or the synthetic workload's parameters.
Record describe_workload(const SimulateArgs& args, const SimulateInputs& in);

/// --slo: each instance searched for the highest rate (or largest batch) meeting the targets, or
/// checked at the rates (or trace) given; returns the exit code.
int run_slo(const SimulateArgs& args, const SimulateInputs& in, const std::vector<Model>& models,
            CommandOutput& out, std::ostream& err);

/// How a run priced its steps, for people: by the estimate and its profile, or at the bound.
[[nodiscard]] std::string pricing_note(const sim::SimConfig& config);

} // namespace kvcalc::cli
