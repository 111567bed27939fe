#include <kvcalc/device/efficiency.hpp>

#include <algorithm>
#include <cmath>

namespace kvcalc::device {

namespace {

/// The index i of the segment [x[i], x[i+1]] holding v, for 0 < v within the ends.
std::size_t segment(const std::vector<double>& x, double v) {
  auto above = std::upper_bound(x.begin(), x.end(), v);
  return static_cast<std::size_t>(above - x.begin()) - 1;
}

} // namespace

double Curve::at(double v) const {
  if (x.empty()) {
    return 0;
  }
  if (v <= x.front()) {
    return y.front();
  }
  if (v >= x.back()) {
    return y.back();
  }
  std::size_t i = segment(x, v);
  double f = std::log(v / x[i]) / std::log(x[i + 1] / x[i]);
  return y[i] + f * (y[i + 1] - y[i]);
}

double LatencyTable::at(double message_bytes) const {
  if (bytes.empty()) {
    return 0;
  }
  if (message_bytes <= bytes.front()) {
    return time_s.front();
  }
  if (message_bytes >= bytes.back()) {
    return time_s.back() * message_bytes / bytes.back();
  }
  std::size_t i = segment(bytes, message_bytes);
  double f = std::log(message_bytes / bytes[i]) / std::log(bytes[i + 1] / bytes[i]);
  return time_s[i] * std::pow(time_s[i + 1] / time_s[i], f);
}

std::optional<double> all_reduce_time(const std::vector<AllReduceTable>& tables, u64 gpus,
                                      double bytes) {
  const AllReduceTable* below = nullptr;
  const AllReduceTable* above = nullptr;
  for (const AllReduceTable& t : tables) {
    if (t.gpus == gpus) {
      return t.table.at(bytes);
    }
    if (t.gpus < gpus && (!below || t.gpus > below->gpus)) {
      below = &t;
    }
    if (t.gpus > gpus && (!above || t.gpus < above->gpus)) {
      above = &t;
    }
  }
  if (!above) {
    return std::nullopt;
  }
  if (!below) {
    return above->table.at(bytes); // a smaller group takes no longer than the smallest measured
  }
  double lo = below->table.at(bytes);
  double hi = above->table.at(bytes);
  double f = std::log(static_cast<double>(gpus) / static_cast<double>(below->gpus)) /
             std::log(static_cast<double>(above->gpus) / static_cast<double>(below->gpus));
  return lo * std::pow(hi / lo, f);
}

} // namespace kvcalc::device
