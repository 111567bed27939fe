#include <kvcalc/sim/slo.hpp>

#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include <kvcalc/core/error.hpp>

namespace kvcalc::sim {

namespace {

constexpr std::string_view k_slo_help =
    "expected METRIC_STAT=DURATION,... with METRIC ttft, tpot, e2e or queue, STAT mean, p50, "
    "p90, p99 or max, and a duration such as 2s, 50ms, 800us or 1min (e.g. "
    "ttft_p99=2s,tpot_p99=50ms)";

/// "2s", "50ms", "800us", "1.5min" in seconds.
double duration(std::string_view text, std::string_view whole) {
  std::size_t unit = 0;
  while (unit < text.size() && ((text[unit] >= '0' && text[unit] <= '9') || text[unit] == '.')) {
    ++unit;
  }
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + unit, v);
  std::string_view u = text.substr(unit);
  double scale = u == "s"                 ? 1
                 : u == "ms"              ? 1e-3
                 : u == "us" || u == "µs" ? 1e-6
                 : u == "min"             ? 60
                                          : 0;
  if (unit == 0 || ec != std::errc() || end != text.data() + unit || scale == 0 ||
      !std::isfinite(v) || v <= 0) {
    throw InputError("invalid --slo '" + std::string(whole) + "': '" + std::string(text) +
                     "' is not a duration above 0 with a unit (s, ms, us, min); " +
                     std::string(k_slo_help));
  }
  return v * scale;
}

} // namespace

std::vector<SloTarget> parse_slo(std::string_view text) {
  std::vector<SloTarget> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t comma = text.find(',', start);
    std::string_view item = text.substr(start, comma - start);
    std::size_t eq = item.find('=');
    std::size_t underscore = item.find('_');
    if (eq == std::string_view::npos || underscore == std::string_view::npos || underscore > eq) {
      throw InputError("invalid --slo '" + std::string(text) + "': '" + std::string(item) + "'; " +
                       std::string(k_slo_help));
    }
    SloTarget t;
    t.metric = std::string(item.substr(0, underscore));
    t.statistic = std::string(item.substr(underscore + 1, eq - underscore - 1));
    bool metric =
        t.metric == "ttft" || t.metric == "tpot" || t.metric == "e2e" || t.metric == "queue";
    bool statistic = t.statistic == "mean" || t.statistic == "p50" || t.statistic == "p90" ||
                     t.statistic == "p99" || t.statistic == "max";
    if (!metric || !statistic) {
      throw InputError("invalid --slo '" + std::string(text) + "': unknown target '" +
                       std::string(item.substr(0, eq)) + "'; " + std::string(k_slo_help));
    }
    for (const SloTarget& seen : out) {
      if (seen.metric == t.metric && seen.statistic == t.statistic) {
        throw InputError("invalid --slo '" + std::string(text) + "': " + t.metric + "_" +
                         t.statistic + " is given twice");
      }
    }
    t.seconds = duration(item.substr(eq + 1), text);
    out.push_back(t);
    if (comma == std::string_view::npos) {
      break;
    }
    start = comma + 1;
  }
  return out;
}

std::string describe(const SloTarget& t) {
  std::string metric = t.metric == "ttft"   ? "TTFT"
                       : t.metric == "tpot" ? "TPOT"
                       : t.metric == "e2e"  ? "E2E"
                                            : "queue";
  std::string bound = t.seconds >= 1      ? fmt::format("{:.3f} s", t.seconds)
                      : t.seconds >= 1e-3 ? fmt::format("{:.3f} ms", t.seconds * 1e3)
                                          : fmt::format("{:.2f} µs", t.seconds * 1e6);
  return metric + " " + t.statistic + " ≤ " + bound;
}

double measured(const SimResult& r, const SloTarget& t) {
  const LatencySummary& s = t.metric == "ttft"   ? r.ttft
                            : t.metric == "tpot" ? r.tpot
                            : t.metric == "e2e"  ? r.e2e
                                                 : r.queue;
  return t.statistic == "mean"  ? s.mean
         : t.statistic == "p50" ? s.p50
         : t.statistic == "p90" ? s.p90
         : t.statistic == "p99" ? s.p99
                                : s.max;
}

bool meets(const SimResult& r, const std::vector<SloTarget>& targets) {
  if (r.requests_rejected > 0 || r.requests_completed == 0) {
    return false;
  }
  if (r.queue_growth && *r.queue_growth >= k_overload_queue_growth) {
    return false;
  }
  for (const SloTarget& t : targets) {
    if (!(measured(r, t) <= t.seconds)) {
      return false;
    }
  }
  return true;
}

namespace {

/// Runs at `value`, keeping the run as evidence and the bounds it moves.
struct Searcher {
  const std::function<SimResult(double)>& run;
  const std::vector<SloTarget>& targets;
  std::size_t max_runs;
  SloSearch out;

  bool attempt(double value) {
    SimResult r = run(value);
    bool ok = meets(r, targets);
    out.runs.push_back({value, std::move(r), ok});
    if (ok) {
      out.best = std::max(out.best, value);
    } else if (out.failed == 0 || value < out.failed) {
      out.failed = value;
    }
    return ok;
  }
  [[nodiscard]] bool more() const { return out.runs.size() < max_runs; }
};

} // namespace

SloSearch search_max_rate(const std::function<SimResult(double)>& run,
                          const std::vector<SloTarget>& targets, double start, double precision,
                          std::size_t max_runs) {
  Searcher s{run, targets, max_runs, {}};
  constexpr double k_lowest = 1e-3;
  constexpr double k_highest = 1e6;
  double rate = start;
  if (s.attempt(rate)) {
    while (rate * 2 <= k_highest && s.more() && s.attempt(rate * 2)) {
      rate *= 2;
    }
  } else {
    while (rate / 2 >= k_lowest && s.more() && !s.attempt(rate / 2)) {
      rate /= 2;
    }
  }
  if (s.out.best == 0 || s.out.failed == 0) {
    return s.out; // nothing met, or the ceiling of the search did
  }
  while (s.out.failed / s.out.best > 1 + precision && s.more()) {
    s.attempt(std::sqrt(s.out.best * s.out.failed));
  }
  return s.out;
}

SloSearch search_max_batch(const std::function<SimResult(u64)>& run,
                           const std::vector<SloTarget>& targets, u64 limit, std::size_t max_runs) {
  std::function<SimResult(double)> by_count = [&](double n) { return run(static_cast<u64>(n)); };
  Searcher s{by_count, targets, max_runs, {}};
  u64 n = 1;
  if (!s.attempt(1)) {
    return s.out; // not even one request at a time
  }
  while (n < limit && s.more() && s.attempt(static_cast<double>(std::min(n * 2, limit)))) {
    n = std::min(n * 2, limit);
  }
  if (s.out.failed == 0) {
    return s.out; // the limit met the targets
  }
  while (s.out.failed - s.out.best > 1 && s.more()) {
    auto low = static_cast<u64>(s.out.best);
    auto high = static_cast<u64>(s.out.failed);
    s.attempt(static_cast<double>(low + (high - low) / 2));
  }
  return s.out;
}

} // namespace kvcalc::sim
