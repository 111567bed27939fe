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
  if (slope.size() + 1 == x.size()) {
    return y[i] + (std::log(v) - log_x[i]) * slope[i];
  }
  double f = std::log(v / x[i]) / std::log(x[i + 1] / x[i]);
  return y[i] + f * (y[i + 1] - y[i]);
}

void Curve::prepare() {
  log_x.clear();
  slope.clear();
  for (double v : x) {
    log_x.push_back(std::log(v));
  }
  for (std::size_t i = 0; i + 1 < x.size(); ++i) {
    slope.push_back((y[i + 1] - y[i]) / (log_x[i + 1] - log_x[i]));
  }
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
  if (slope.size() + 1 == bytes.size()) {
    return std::exp(log_time[i] + (std::log(message_bytes) - log_bytes[i]) * slope[i]);
  }
  double f = std::log(message_bytes / bytes[i]) / std::log(bytes[i + 1] / bytes[i]);
  return time_s[i] * std::pow(time_s[i + 1] / time_s[i], f);
}

void LatencyTable::prepare() {
  log_bytes.clear();
  log_time.clear();
  slope.clear();
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    log_bytes.push_back(std::log(bytes[i]));
    log_time.push_back(std::log(time_s[i]));
  }
  for (std::size_t i = 0; i + 1 < bytes.size(); ++i) {
    slope.push_back((log_time[i + 1] - log_time[i]) / (log_bytes[i + 1] - log_bytes[i]));
  }
}

void EfficiencyProfile::prepare() {
  for (GemmEfficiency* g : {&gemm_bf16, &gemm_fp8, &gemm_fp8_block}) {
    g->compute.prepare();
  }
  grouped.compute_bf16.prepare();
  grouped.compute_fp8.prepare();
  decode_bf16.bandwidth.prepare();
  decode_fp8.bandwidth.prepare();
  prefill_bf16.compute.prepare();
  prefill_fp8.compute.prepare();
  for (auto* tables : {&all_reduce_graph, &all_reduce_eager}) {
    for (AllReduceTable& t : *tables) {
      t.table.prepare();
    }
  }
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
