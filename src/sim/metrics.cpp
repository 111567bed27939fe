#include <kvcalc/sim/metrics.hpp>

#include <algorithm>
#include <cmath>

namespace kvcalc::sim {

namespace {

constexpr double k_lowest = 1e-6;        ///< seconds at the lower edge of the first bucket
constexpr double k_growth = 1.002;       ///< bucket edges rise by 0.2%: a midpoint is within 0.1%
constexpr std::size_t k_buckets = 13820; ///< ln(10¹²) / ln(1.002): up to 10⁶ s

std::size_t bucket_of(double seconds) {
  if (!(seconds > k_lowest)) {
    return 0;
  }
  auto b = static_cast<std::size_t>(std::log(seconds / k_lowest) / std::log(k_growth));
  return std::min(b, k_buckets - 1);
}

} // namespace

LatencyHistogram::LatencyHistogram() : m_buckets(k_buckets, 0) {
}

void LatencyHistogram::add(double seconds) {
  if (m_count == 0) {
    m_min = m_max = seconds;
  }
  m_min = std::min(m_min, seconds);
  m_max = std::max(m_max, seconds);
  m_sum += seconds;
  ++m_count;
  ++m_buckets[bucket_of(seconds)];
}

double LatencyHistogram::quantile(double q) const {
  if (m_count == 0) {
    return 0;
  }
  // Nearest rank: the ⌈q·n⌉-th smallest sample.
  auto rank = static_cast<u64>(std::ceil(q * static_cast<double>(m_count)));
  rank = std::clamp<u64>(rank, 1, m_count);
  u64 seen = 0;
  for (std::size_t b = 0; b < m_buckets.size(); ++b) {
    seen += m_buckets[b];
    if (seen >= rank) {
      double mid = k_lowest * std::pow(k_growth, static_cast<double>(b) + 0.5);
      return std::clamp(mid, m_min, m_max);
    }
  }
  return m_max;
}

LatencySummary LatencyHistogram::summary() const {
  LatencySummary s;
  s.count = m_count;
  if (m_count == 0) {
    return s;
  }
  s.mean = m_sum / static_cast<double>(m_count);
  s.p50 = quantile(0.50);
  s.p90 = quantile(0.90);
  s.p99 = quantile(0.99);
  s.max = m_max;
  return s;
}

TimeSeries::TimeSeries(std::size_t limit, double width_s)
    : m_limit(std::max<std::size_t>(limit, 2)), m_width(width_s) {
}

void TimeSeries::add(double start_s, double duration_s, double occupancy, double running,
                     double computed_tokens, double output_tokens) {
  double end_s = start_s + duration_s;
  while (end_s > m_width * static_cast<double>(m_limit)) {
    // Merge pairs: the run outgrew the buckets.
    std::vector<Bucket> merged((m_buckets.size() + 1) / 2);
    for (std::size_t i = 0; i < m_buckets.size(); ++i) {
      Bucket& into = merged[i / 2];
      into.occupancy_time += m_buckets[i].occupancy_time;
      into.running_time += m_buckets[i].running_time;
      into.computed += m_buckets[i].computed;
      into.output += m_buckets[i].output;
    }
    m_buckets = std::move(merged);
    m_width *= 2;
  }
  // Spread the step over the buckets it spans, in proportion to the time in each.
  auto first = static_cast<std::size_t>(start_s / m_width);
  auto last = std::max(first, static_cast<std::size_t>(std::ceil(end_s / m_width)) - 1);
  if (m_buckets.size() <= last) {
    m_buckets.resize(last + 1);
  }
  for (std::size_t i = first; i <= last; ++i) {
    double lo = std::max(start_s, m_width * static_cast<double>(i));
    double hi = std::min(end_s, m_width * static_cast<double>(i + 1));
    double overlap = duration_s > 0 ? std::max(0.0, hi - lo) : 0;
    double share = duration_s > 0 ? overlap / duration_s : (i == first ? 1.0 : 0.0);
    Bucket& b = m_buckets[i];
    b.occupancy_time += occupancy * overlap;
    b.running_time += running * overlap;
    b.computed += computed_tokens * share;
    b.output += output_tokens * share;
  }
}

std::vector<TimePoint> TimeSeries::points(double end_s) const {
  std::vector<TimePoint> out;
  for (std::size_t i = 0; i < m_buckets.size(); ++i) {
    TimePoint p;
    p.start_s = m_width * static_cast<double>(i);
    p.end_s = std::min(m_width * static_cast<double>(i + 1), std::max(end_s, p.start_s));
    double span = p.end_s - p.start_s;
    if (span <= 0) {
      break;
    }
    const Bucket& b = m_buckets[i];
    p.kv_occupancy = std::min(1.0, b.occupancy_time / span);
    p.running = b.running_time / span;
    p.output_tokens_per_s = b.output / span;
    p.total_tokens_per_s = b.computed / span;
    out.push_back(p);
  }
  return out;
}

} // namespace kvcalc::sim
