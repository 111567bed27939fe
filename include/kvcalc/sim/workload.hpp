#pragma once
/// Requests for the serving simulator: a seeded random generator with fixed transforms, length
/// distributions, synthetic workloads (docs/simulate.md, "Workload YAML") and the source
/// interface the simulator pulls requests from, one at a time.

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <kvcalc/core/checked.hpp>
#include <kvcalc/core/names.hpp>

namespace kvcalc::sim {

/// One request as the simulator sees it.
struct Request {
  double arrival_s = 0;  ///< seconds from the start of the run
  u64 prompt_tokens = 0; ///< the whole prompt, a shared prefix included
  u64 output_tokens = 0; ///< tokens to generate (at least 1)
  u64 prefix_id = 0;     ///< 0: no shared prefix; else requests with the same id share it
  u64 prefix_tokens = 0; ///< leading prompt tokens that are the shared prefix
  /// Disaggregated serving: the prompt's cache arrives computed from a prefill pool, with the
  /// first token; `origin_s` is when the request reached the prefill pool.
  bool prefilled = false;
  double origin_s = 0;
  u64 id = 0; ///< the request's number in its run, from 0 (set by the disaggregated run)
};

/// Where the simulator pulls requests from, in arrival order; memory stays independent of the
/// number of requests.
class RequestSource {
public:
  virtual ~RequestSource() = default;
  /// The next request, or nullopt when there are none now. The simulator asks again after a
  /// request leaves: a closed loop's next request comes only then.
  virtual std::optional<Request> next() = 0;
  /// A request left the instance at `at` seconds: `served` (finished), or rejected on arrival.
  virtual void left(double /*at*/, bool /*served*/) {}
};

/// Random numbers that are the same on every platform: std::mt19937_64 (its output is fixed by
/// the standard) with kvcalc's own transforms (std:: distributions differ between libraries).
class Rng {
public:
  explicit Rng(u64 seed) : m_engine(seed) {}
  /// Uniform in [0, 1), 53 random bits.
  double uniform();
  /// Standard normal (Box-Muller).
  double normal();
  /// Exponential with the given rate.
  double exponential(double rate);

private:
  std::mt19937_64 m_engine;
  std::optional<double> m_spare;
};

enum class LengthKind { fixed, uniform, normal, lognormal, cdf };

/// A distribution of token counts. Samples are rounded to whole tokens and clamped to
/// [min, max] (min at least 1).
struct LengthDistribution {
  LengthKind kind = LengthKind::fixed;
  double a = 0; ///< fixed: the value; uniform: low; normal and lognormal: the mean
  double b = 0; ///< uniform: high; normal: standard deviation; lognormal: σ of the log
  std::vector<std::pair<u64, double>> cdf; ///< tokens, P(X ≤ tokens): increasing, last 1
  u64 min = 1;
  u64 max = UINT64_MAX;

  [[nodiscard]] u64 sample(Rng& rng) const;
  /// The mean before clamping (for people and for checks).
  [[nodiscard]] double mean() const;
};

/// Parses "512", "fixed:512", "uniform:100,800", "normal:1000,200", "lognormal:2000,0.8"
/// (mean, σ of the log) or "cdf:100=0.2,500=0.7,2000=1". Errors name `what`.
[[nodiscard]] LengthDistribution parse_length_distribution(std::string_view text,
                                                           std::string_view what);
/// "lognormal:2000,0.8" back from a distribution.
[[nodiscard]] std::string describe(const LengthDistribution& d);

enum class ArrivalProcess {
  poisson,  ///< exponential gaps at `rate`
  constant, ///< one request every 1/rate seconds, the first at 0
  burst,    ///< `requests` requests, all at t = 0
};
inline constexpr NameTable<ArrivalProcess, 3> k_arrival_processes{
    "arrival process",
    {{{ArrivalProcess::poisson, "poisson"},
      {ArrivalProcess::constant, "constant"},
      {ArrivalProcess::burst, "burst"}}}};

[[nodiscard]] std::string_view arrival_name(ArrivalProcess a);
[[nodiscard]] ArrivalProcess parse_arrival(std::string_view text);

/// Requests that start with one of `count` shared prefixes.
struct PrefixSharing {
  double fraction = 0; ///< of requests that carry a prefix
  u64 count = 1;       ///< distinct prefixes, picked uniformly
  u64 tokens = 0;      ///< prefix length, added in front of the sampled prompt
};

/// A synthetic workload (docs/simulate.md): arrivals, lengths and prefixes, with a seed.
struct Workload {
  std::string name;
  u64 seed = 1;
  ArrivalProcess arrival = ArrivalProcess::poisson;
  double rate = 10;                 ///< requests per second (poisson, constant)
  std::optional<double> duration_s; ///< arrivals before this time
  std::optional<u64> requests;      ///< at most this many requests
  LengthDistribution prompt;
  LengthDistribution output;
  PrefixSharing prefix;
};

/// Parses a workload YAML; errors are InputErrors at file:line:col with a did-you-mean.
[[nodiscard]] Workload parse_workload(const std::string& text, const std::string& file);

/// The most tokens a request's prompt or output may have, 2^32: no model's context comes near,
/// and it keeps every token sum of the simulator far from 2^64.
inline constexpr double k_max_request_tokens = 4294967296.0;

/// The latest arrival a trace may give, 1e9 s (31 years) after its first: later, the clock's
/// steps of milliseconds lose their digits and throughputs are divided by the span.
inline constexpr double k_max_arrival_s = 1e9;

/// The lowest arrival rate, requests per second (one request in 11.6 days): the simulator's
/// clock is a double from the first arrival, and 100,000 requests below this rate would push
/// it past 10^11 s, where its steps of milliseconds lose their last digits.
inline constexpr double k_min_arrival_rate = 1e-6;

/// Checks a workload is complete: a rate of at least k_min_arrival_rate unless burst, a stop
/// (duration or requests), burst with a request count. Throws InputError.
void validate_workload(const Workload& w);

/// Generates a workload's requests lazily, in arrival order. Arrival times, prompt lengths,
/// output lengths and prefixes draw from separate streams of the seed, so changing one
/// distribution leaves the others' samples as they were.
class SyntheticSource : public RequestSource {
public:
  explicit SyntheticSource(const Workload& workload);
  std::optional<Request> next() override;

private:
  Workload m_workload;
  Rng m_arrivals;
  Rng m_prompts;
  Rng m_outputs;
  Rng m_prefixes;
  u64 m_emitted = 0;
  double m_clock = 0;
};

/// A closed loop of clients, as `vllm bench serve --max-concurrency` and genai-perf run: each
/// of `clients` sends a request at 0 and its next one the moment the previous leaves the
/// instance (finished, or rejected). Lengths and prefixes are the workload's (its arrival
/// process and rate are not used); it stops at the workload's request count, sends nothing
/// after its duration, and stops after k_max_rejected_in_a_row rejections with nothing served
/// between them (requests that can never run, sent again at the same instant).
class ClosedLoopSource : public RequestSource {
public:
  ClosedLoopSource(const Workload& workload, u64 clients);
  std::optional<Request> next() override;
  void left(double at, bool served) override;

  static constexpr u64 k_max_rejected_in_a_row = 100000;

private:
  SyntheticSource m_lengths;
  std::optional<double> m_duration_s;
  std::vector<double> m_free; ///< when each idle client sends: a min-heap
  u64 m_rejected_in_a_row = 0;
};

/// Requests from a list (tests, small traces held in memory).
class ListSource : public RequestSource {
public:
  explicit ListSource(std::vector<Request> requests) : m_requests(std::move(requests)) {}
  std::optional<Request> next() override {
    if (m_next >= m_requests.size()) {
      return std::nullopt;
    }
    return m_requests[m_next++];
  }

private:
  std::vector<Request> m_requests;
  std::size_t m_next = 0;
};

} // namespace kvcalc::sim
