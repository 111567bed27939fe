#pragma once
/// Streaming statistics of the simulator, in memory independent of the number of requests:
/// latency distributions in log-spaced buckets, and a timeline that halves its resolution as
/// the run grows (docs/simulate.md, "Metrics").

#include <cstdint>
#include <vector>

#include <kvcalc/core/checked.hpp>

namespace kvcalc::sim {

/// Mean, percentiles and maximum of one latency, in seconds.
struct LatencySummary {
  u64 count = 0;
  double mean = 0;
  double p50 = 0;
  double p90 = 0;
  double p99 = 0;
  double max = 0;
};

/// A latency distribution in buckets 0.1% wide from 1 µs to 10⁶ s: percentiles are within
/// 0.1% of the exact order statistic (clamped to the exact min and max); count, mean, min and
/// max are exact. Values below 1 µs fall in the first bucket.
class LatencyHistogram {
public:
  LatencyHistogram();
  void add(double seconds);
  /// The value below which a fraction `q` of the samples lie (nearest rank).
  [[nodiscard]] double quantile(double q) const;
  [[nodiscard]] LatencySummary summary() const;
  [[nodiscard]] u64 count() const { return m_count; }

private:
  std::vector<u64> m_buckets;
  u64 m_count = 0;
  double m_sum = 0;
  double m_min = 0;
  double m_max = 0;
};

/// One bucket of the timeline.
struct TimePoint {
  double start_s = 0;
  double end_s = 0;
  double kv_occupancy = 0;        ///< time-weighted mean fraction of the pool in use
  double running = 0;             ///< time-weighted mean running sequences
  double output_tokens_per_s = 0; ///< tokens generated in the bucket / its length
  double total_tokens_per_s = 0;  ///< prompt and generated tokens computed / its length
};

/// Aggregates steps into at most `limit` equal buckets from t = 0, doubling the bucket width
/// (merging pairs) whenever the run outgrows them.
class TimeSeries {
public:
  explicit TimeSeries(std::size_t limit = 400, double width_s = 0.05);
  /// One step from `start` lasting `duration`: its occupancy and running count, and the tokens
  /// it computed and generated, spread over the buckets it spans.
  void add(double start_s, double duration_s, double occupancy, double running,
           double computed_tokens, double output_tokens);
  /// The buckets up to `end_s` (the last one cut there).
  [[nodiscard]] std::vector<TimePoint> points(double end_s) const;

private:
  struct Bucket {
    double occupancy_time = 0;
    double running_time = 0;
    double computed = 0;
    double output = 0;
  };
  std::size_t m_limit;
  double m_width;
  std::vector<Bucket> m_buckets;
};

} // namespace kvcalc::sim
