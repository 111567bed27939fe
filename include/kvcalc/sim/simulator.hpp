#pragma once
/// The serving simulator: one serving instance stepped by a vLLM-v1-like scheduler over a
/// paged KV pool sized by the capacity engine, each step priced by the roofline
/// (docs/simulate.md). A pure function of its inputs and its request source.

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <kvcalc/core/names.hpp>
#include <kvcalc/kv/capacity.hpp>
#include <kvcalc/roofline/roofline.hpp>
#include <kvcalc/sim/metrics.hpp>
#include <kvcalc/sim/workload.hpp>

namespace kvcalc::sim {

/// What happens to a running sequence that loses its blocks.
enum class Preemption {
  recompute, ///< free its blocks; prompt and generated tokens are prefilled again (vLLM)
  swap,      ///< copy its blocks to host memory and back when it resumes
};
inline constexpr NameTable<Preemption, 2> k_preemptions{
    "preemption mode", {{{Preemption::recompute, "recompute"}, {Preemption::swap, "swap"}}}};

[[nodiscard]] std::string_view preemption_name(Preemption p);
[[nodiscard]] Preemption parse_preemption(std::string_view text);

/// The most requests one instance may hold at once, waiting or running: 2^21 (2,097,152), a
/// thousand times any engine's batch. Each takes about 200 bytes, so this bounds a run's memory
/// near 400 MiB however many requests arrive at once.
inline constexpr u64 k_max_requests_in_system = u64{1} << 21;

/// All that the capacity engine decides of a simulated instance: its pools and what a sequence
/// holds of them, the token budget, the sequence limit and the longest request
/// (docs/simulate.md, "The instance").
struct InstanceSize {
  /// The engine's pools with the capacity of the whole instance, and what a sequence holds in
  /// each (docs/simulate.md, "KV pools"). Empty: one pool of `pool_blocks` blocks of
  /// `block_size` tokens, every layer holding every token.
  std::vector<kv::SequencePool> pools;
  std::vector<u64> pool_limits;     ///< most units one sequence may hold in each (one rank's pool)
  u64 pool_blocks = 0;              ///< units of the first pool (KV blocks, or tokens, or bytes)
  u64 block_size = 1;               ///< tokens per block of its full layers (1: token-granular)
  u64 sequence_blocks_limit = 0;    ///< most units one sequence may hold in it (one rank's pool)
  std::string pool_unit = "blocks"; ///< what the first pool counts
  u64 max_batched_tokens = 8192;    ///< tokens per step
  u64 max_seqs = 256;               ///< running sequences
  u64 max_context = 0;              ///< longest prompt + output; 0: no limit
  double kv_bytes_per_token = 0;    ///< on one GPU (swap traffic)
};

/// Why a capacity result gives no instance to simulate.
struct InstanceRefusal {
  enum class Reason {
    does_not_fit, ///< the model does not fit the deployment (capacity's reason)
    model_copies, ///< the deployment holds more than one copy of the model
    empty_pool,   ///< one of the engine's pools holds nothing
    no_cache,     ///< no layer keeps a cache
  };
  Reason reason = Reason::does_not_fit;
  std::string message; ///< what is wrong, for people
};

/// The instance that `capacity` sized for `model`: each of the engine's pools at one
/// attention-DP rank's capacity times the instance's `kv_pools` ranks, one rank's capacity
/// bounding one sequence; the first pool's figures (its block size that of its full layers,
/// else of its first term, at least 1; a pool of bytes the engine's block size); the engine's
/// token budget, sequence limit and max model length; or why there is none. Pure.
[[nodiscard]] std::variant<InstanceSize, InstanceRefusal>
size_instance(std::string_view model, const kv::CapacityResult& capacity);

/// One serving instance, ready to simulate: its size, how its steps are priced and how it
/// schedules.
struct SimConfig : InstanceSize {
  roofline::RooflineRequest step; ///< model, GPU, rates, cache, weights, parallelism, MLA mode
  /// How steps are priced: the bound, or the estimate where the rates carry one (plus the
  /// engine's own time each step).
  roofline::Pricing pricing = roofline::Pricing::bound;
  Preemption preemption = Preemption::recompute;
  double swap_bytes_per_s = 25e9; ///< host link of one GPU, one direction (swap)
  bool prefix_sharing = true;     ///< share the blocks of requests' common prefixes
};

/// The instance of `size`, its steps priced for `request`'s model, GPU, cache and weights over
/// `parallel` at `rates`, MLA in `mla`.
[[nodiscard]] SimConfig instance_config(InstanceSize size, const kv::CapacityRequest& request,
                                        const kv::Parallelism& parallel,
                                        const roofline::DeviceRates& rates, roofline::MlaMode mla);

/// The instance that `capacity` sized for `request` (size_instance), its steps priced at
/// `rates` with `mla`. Throws InputError with the refusal's message when there is none.
[[nodiscard]] SimConfig instance_config(const kv::CapacityRequest& request,
                                        const kv::CapacityResult& capacity,
                                        const roofline::DeviceRates& rates, roofline::MlaMode mla);

/// One step of the run, for timelines.
struct StepRecord {
  u64 step = 0;
  double start_s = 0;
  double duration_s = 0;
  u64 running = 0;        ///< sequences holding KV during the step
  u64 waiting = 0;        ///< arrived, not running (queued or preempted)
  u64 decode_tokens = 0;  ///< sequences generating one token
  u64 prefill_tokens = 0; ///< prompt (or recompute) tokens in the step
  u64 blocks_used = 0;
  double kv_occupancy = 0; ///< blocks used / pool
  u64 preemptions = 0;     ///< so far
  u64 completed = 0;       ///< so far
};

struct SimResult {
  u64 requests_arrived = 0;
  u64 requests_completed = 0;
  u64 requests_rejected = 0;
  u64 rejected_pool = 0;    ///< needed more of a pool than one sequence may hold
  u64 rejected_context = 0; ///< prompt + output past the engine's max model length
  u64 preemptions = 0;
  u64 steps = 0;
  double first_arrival_s = 0;
  double last_arrival_s = 0;
  double end_s = 0;          ///< when the last step ended
  double makespan_s = 0;     ///< end − first arrival
  double busy_s = 0;         ///< time in steps
  double swap_s = 0;         ///< of busy_s, copying blocks to and from the host
  u64 input_tokens = 0;      ///< prompts of completed requests
  u64 output_tokens = 0;     ///< outputs of completed requests
  u64 computed_tokens = 0;   ///< every token run through the model (prefill, recompute, decode)
  u64 recomputed_tokens = 0; ///< of those, recomputed after a preemption
  u64 prefix_hit_tokens = 0; ///< prompt tokens not computed: a shared prefix held them
  double input_tokens_per_s = 0;
  double output_tokens_per_s = 0;
  double total_tokens_per_s = 0;
  LatencySummary ttft;  ///< arrival → first token
  LatencySummary tpot;  ///< (finish − first token) / (output − 1), outputs of 2+ tokens
  LatencySummary e2e;   ///< arrival → last token
  LatencySummary queue; ///< arrival → first scheduled
  /// How fast the queue grew: the least-squares slope of each request's queue time over its
  /// arrival time (s per s); about 0 when the instance keeps up, offered/served − 1 when
  /// arrivals outrun it (request k arrives at k/offered, starts at k/served). Unset under 20
  /// requests or with every arrival at one instant.
  std::optional<double> queue_growth;
  u64 pool_blocks = 0;
  u64 block_size = 0;
  u64 kv_peak_blocks = 0;   ///< peak units used of the first pool
  double kv_peak = 0;       ///< peak over the pools of units used / capacity
  double kv_mean = 0;       ///< time-weighted over the makespan
  double fragmentation = 0; ///< allocated-but-empty slots / allocated, time-weighted
  u64 peak_running = 0;
  double mean_running = 0;     ///< time-weighted over busy time
  double mean_step_tokens = 0; ///< tokens per step
  std::vector<TimePoint> timeline;
};

/// Arrivals outrun the instance when its queue grows by at least this many seconds per second
/// of arrivals (it serves under 1 / 1.05 = 95% of what is offered).
inline constexpr double k_overload_queue_growth = 0.05;

/// Requests per second offered: arrivals over the span from the first to the last; 0 when they
/// all come at once.
[[nodiscard]] double offered_rate(const SimResult& r);

/// A request that finished: when its first token came and when its last did.
using OnComplete = std::function<void(const Request&, double first_token_s, double end_s)>;

/// Runs the instance until `source` is exhausted and every admitted request has finished.
/// `on_step`, when set, sees every step (timelines), `on_complete` every finished request;
/// memory grows with the requests in the system (running and waiting), not with the requests
/// of the run.
[[nodiscard]] SimResult simulate(const SimConfig& config, RequestSource& source,
                                 const std::function<void(const StepRecord&)>& on_step = {},
                                 const OnComplete& on_complete = {});

/// How a request's cache moves from the prefill pool to the decode pool: each GPU holding it
/// sends its own share over its NIC, and each GPU that will hold it takes its share in over its
/// own, all at once; the slower side sets the time (docs/simulate.md).
struct KvTransfer {
  double bytes_per_token = 0;            ///< KV of one prompt token on one prefill GPU
  double bytes_per_sequence = 0;         ///< per-sequence state on one prefill GPU
  double receive_bytes_per_token = 0;    ///< KV of one prompt token on one decode GPU
  double receive_bytes_per_sequence = 0; ///< per-sequence state on one decode GPU
  double bytes_per_s = 0;                ///< the NIC, one direction
  double latency_s = 0;                  ///< α of one message
  /// Attention groups of each pool: each group's NICs carry one cache at a time, so a cache
  /// waits for its group on each side (taken as the one free first).
  u64 send_lanes = 1;
  u64 receive_lanes = 1;
  [[nodiscard]] double send_s(u64 prompt_tokens) const;    ///< α + sent / β
  [[nodiscard]] double receive_s(u64 prompt_tokens) const; ///< α + received / β
  /// One cache alone: the slower side.
  [[nodiscard]] double time_s(u64 prompt_tokens) const;
};

/// A disaggregated run: the pools' own runs and the requests' latencies end to end.
struct DisaggregatedResult {
  /// The requests as users see them: TTFT from arrival at the prefill pool to the first token
  /// out of the decode pool (prefill, transfer and the wait for a decode slot included), TPOT
  /// and E2E likewise; throughput over the whole run.
  SimResult requests;
  SimResult prefill;       ///< each request to its first token, on the prefill pool
  SimResult decode;        ///< from the cache's arrival, on the decode pool
  LatencySummary transfer; ///< of each request's cache
};

/// Prefill and decode on pools of their own: every request of `source` is prefilled (its
/// output cut to the first token) on `prefill`, its cache sent by `transfer`, then queued for
/// a slot on `decode`, where the rest of its output is generated. Memory grows with the
/// requests of the run (one handed-off request each).
[[nodiscard]] DisaggregatedResult simulate_disaggregated(const SimConfig& prefill,
                                                         const SimConfig& decode,
                                                         const KvTransfer& transfer,
                                                         RequestSource& source);

} // namespace kvcalc::sim
