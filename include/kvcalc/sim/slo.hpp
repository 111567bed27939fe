#pragma once
/// Service-level objectives over simulations: latency targets a run meets or not, and the
/// highest arrival rate that meets them, found by doubling then bisection over runs
/// (docs/simulate.md, "SLO search").

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <kvcalc/sim/simulator.hpp>

namespace kvcalc::sim {

/// What an SLO search looks for: the highest arrival rate, or the largest batch (requests
/// arriving at once).
enum class SloSearchKind { rate, batch };
inline constexpr NameTable<SloSearchKind, 2> k_slo_searches{
    "SLO search", {{{SloSearchKind::rate, "rate"}, {SloSearchKind::batch, "batch"}}}};

/// One target: a latency's statistic at most `seconds` ("ttft_p99=2s").
/// The largest batch a search tries: 2^20 requests at once.
inline constexpr u64 k_max_slo_batch = 1ULL << 20;

struct SloTarget {
  std::string metric;    ///< ttft, tpot, e2e or queue
  std::string statistic; ///< mean, p50, p90, p99 or max
  double seconds = 0;
};

/// "ttft_p99=2s,tpot_p99=50ms": targets joined by commas, each METRIC_STAT=DURATION with a
/// unit of s, ms, us or min. An InputError says what is wrong.
[[nodiscard]] std::vector<SloTarget> parse_slo(std::string_view text);

/// "TTFT p99 ≤ 2.000 s".
[[nodiscard]] std::string describe(const SloTarget& t);

/// The statistic a target names, of a run.
[[nodiscard]] double measured(const SimResult& r, const SloTarget& t);

/// Whether a run meets every target: each statistic within its bound, no request rejected, and
/// the queue not growing (an overloaded run's percentiles grow with its length).
[[nodiscard]] bool meets(const SimResult& r, const std::vector<SloTarget>& targets);

/// One simulation of a search, at one value of what is searched (a rate, or a burst's size).
struct SloRun {
  double value = 0;
  SimResult result;
  bool meets = false;
};

struct SloSearch {
  std::vector<SloRun> runs; ///< in the order run: the evidence
  double best = 0;          ///< the highest value run that met the targets; 0: none did
  double failed = 0;        ///< the lowest value run above it that did not; 0: none failed
};

/// The highest arrival rate meeting the targets. Doubles from `start` while runs meet them
/// (halves while they do not, down to 1e-3/s), then bisects between the highest meeting rate
/// and the lowest failing one until they are within `precision` (relative) of each other, or
/// `max_runs` runs have been made.
[[nodiscard]] SloSearch search_max_rate(const std::function<SimResult(double rate)>& run,
                                        const std::vector<SloTarget>& targets, double start,
                                        double precision = 0.02, std::size_t max_runs = 40);

/// The largest batch meeting the targets: `requests` arriving at once. Doubles from 1 while runs
/// meet them, up to `limit`, then bisects on whole counts to the exact largest (the lowest
/// failing count is the largest plus one), or until `max_runs` runs have been made.
[[nodiscard]] SloSearch search_max_batch(const std::function<SimResult(u64 requests)>& run,
                                         const std::vector<SloTarget>& targets,
                                         u64 limit = k_max_slo_batch, std::size_t max_runs = 60);

} // namespace kvcalc::sim
