#include <kvcalc/sim/workload.hpp>

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <numbers>

#include <fmt/format.h>

#include <kvcalc/core/spell.hpp>
#include <kvcalc/core/units.hpp>

#include "../core/yaml_support.hpp"

namespace kvcalc::sim {

double Rng::uniform() {
  return static_cast<double>(m_engine() >> 11) * 0x1.0p-53;
}

double Rng::normal() {
  if (m_spare) {
    double z = *m_spare;
    m_spare.reset();
    return z;
  }
  // Box-Muller on (0, 1]: 1 − uniform() is never 0.
  double r = std::sqrt(-2.0 * std::log(1.0 - uniform()));
  double angle = 2.0 * std::numbers::pi * uniform();
  m_spare = r * std::sin(angle);
  return r * std::cos(angle);
}

double Rng::exponential(double rate) {
  return -std::log(1.0 - uniform()) / rate;
}

namespace {

u64 clamp_tokens(double v, u64 min, u64 max) {
  double r = std::round(v);
  if (!(r >= static_cast<double>(min))) {
    return min;
  }
  if (r >= static_cast<double>(max)) {
    return max;
  }
  return static_cast<u64>(r);
}

/// A real number; token-count suffixes ("2k") are accepted for convenience.
double parse_real(std::string_view raw, std::string_view what) {
  std::string_view text = trim(raw);
  double v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec == std::errc() && end == text.data() + text.size() && std::isfinite(v)) {
    return v;
  }
  return static_cast<double>(parse_count(text, what));
}

std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> out;
  std::size_t start = 0;
  while (true) {
    std::size_t at = text.find(sep, start);
    out.push_back(trim(text.substr(start, at - start)));
    if (at == std::string_view::npos) {
      return out;
    }
    start = at + 1;
  }
}

const std::vector<std::string> k_length_kinds{"fixed", "uniform", "normal", "lognormal", "cdf"};

std::string length_usage() {
  return "expected N, fixed:N, uniform:LOW,HIGH, normal:MEAN,STD, lognormal:MEAN,SIGMA or "
         "cdf:TOKENS=P,...,TOKENS=1";
}

void check_distribution(const LengthDistribution& d, std::string_view what) {
  auto fail = [&](const std::string& why) {
    throw InputError(std::string(what) + " '" + describe(d) + "': " + why);
  };
  switch (d.kind) {
  case LengthKind::fixed:
    if (d.a < 1) {
      fail("a length must be at least 1 token");
    }
    break;
  case LengthKind::uniform:
    if (d.a < 1 || d.b < d.a) {
      fail("uniform:LOW,HIGH needs 1 ≤ LOW ≤ HIGH");
    }
    break;
  case LengthKind::normal:
  case LengthKind::lognormal:
    if (d.a <= 0) {
      fail("the mean must be above 0");
    }
    if (d.b < 0) {
      fail("the spread must not be negative");
    }
    // σ of the log: 10 already spreads lengths over e^±20; past it the samples overflow.
    if (d.kind == LengthKind::lognormal ? d.b > 10 : d.b > k_max_request_tokens) {
      fail(d.kind == LengthKind::lognormal ? "σ of the log must be at most 10"
                                           : "the standard deviation must be at most 2^32 tokens");
    }
    break;
  case LengthKind::cdf: {
    if (d.cdf.empty()) {
      fail("an empirical CDF needs at least one TOKENS=P point");
    }
    for (std::size_t i = 0; i < d.cdf.size(); ++i) {
      const auto& [tokens, p] = d.cdf[i];
      if (tokens < 1) {
        fail("a length must be at least 1 token");
      }
      if (!(p > 0) || p > 1) {
        fail("probabilities must lie in (0, 1]");
      }
      if (i > 0 && (tokens <= d.cdf[i - 1].first || p < d.cdf[i - 1].second)) {
        fail("points must rise in tokens and must not fall in probability");
      }
    }
    if (d.cdf.back().second != 1.0) {
      fail("the last point's probability must be 1");
    }
    break;
  }
  }
  const double largest = d.kind == LengthKind::uniform ? d.b
                         : d.kind == LengthKind::cdf   ? static_cast<double>(d.cdf.back().first)
                                                       : d.a;
  if (largest > k_max_request_tokens) {
    fail("lengths of more than 2^32 tokens are beyond any model's context");
  }
  if (d.min < 1 || d.max < d.min) {
    fail("needs 1 ≤ min ≤ max");
  }
}

} // namespace

u64 LengthDistribution::sample(Rng& rng) const {
  switch (kind) {
  case LengthKind::fixed:
    return clamp_tokens(a, min, max);
  case LengthKind::uniform: {
    double span = std::floor(b) - std::ceil(a) + 1;
    return clamp_tokens(std::ceil(a) + std::floor(rng.uniform() * span), min, max);
  }
  case LengthKind::normal:
    return clamp_tokens(a + b * rng.normal(), min, max);
  case LengthKind::lognormal: {
    // E[e^(μ + σZ)] = e^(μ + σ²/2): μ = ln(mean) − σ²/2.
    double mu = std::log(a) - b * b / 2;
    return clamp_tokens(std::exp(mu + b * rng.normal()), min, max);
  }
  case LengthKind::cdf: {
    // An atom of P₁ at the first point, linear between points.
    double u = rng.uniform();
    if (u <= cdf.front().second) {
      return clamp_tokens(static_cast<double>(cdf.front().first), min, max);
    }
    for (std::size_t i = 1; i < cdf.size(); ++i) {
      auto [t1, p1] = cdf[i];
      if (u <= p1) {
        auto [t0, p0] = cdf[i - 1];
        double f = p1 > p0 ? (u - p0) / (p1 - p0) : 1.0;
        return clamp_tokens(static_cast<double>(t0) + f * static_cast<double>(t1 - t0), min, max);
      }
    }
    return clamp_tokens(static_cast<double>(cdf.back().first), min, max);
  }
  }
  return min;
}

double LengthDistribution::mean() const {
  switch (kind) {
  case LengthKind::fixed:
  case LengthKind::normal:
  case LengthKind::lognormal:
    return a;
  case LengthKind::uniform:
    return (a + b) / 2;
  case LengthKind::cdf: {
    double m = static_cast<double>(cdf.front().first) * cdf.front().second;
    for (std::size_t i = 1; i < cdf.size(); ++i) {
      // In doubles: the sum of two token counts near 2^64 does not fit in u64.
      double mid = (static_cast<double>(cdf[i].first) + static_cast<double>(cdf[i - 1].first)) / 2;
      m += mid * (cdf[i].second - cdf[i - 1].second);
    }
    return m;
  }
  }
  return 0;
}

LengthDistribution parse_length_distribution(std::string_view raw, std::string_view what) {
  std::string_view text = trim(raw);
  LengthDistribution d;
  auto colon = text.find(':');
  std::string_view kind = colon == std::string_view::npos ? "fixed" : text.substr(0, colon);
  std::string_view args = colon == std::string_view::npos ? text : text.substr(colon + 1);
  auto bad = [&](const std::string& why) {
    throw InputError("invalid " + std::string(what) + " '" + std::string(raw) + "': " + why);
  };
  auto pair = [&](const char* names) {
    auto parts = split(args, ',');
    if (parts.size() != 2) {
      bad(std::string(kind) + " takes two numbers, " + names);
    }
    d.a = parse_real(parts[0], what);
    d.b = parse_real(parts[1], what);
  };
  if (kind == "fixed") {
    d.kind = LengthKind::fixed;
    d.a = static_cast<double>(parse_count(args, what));
  } else if (kind == "uniform") {
    d.kind = LengthKind::uniform;
    pair("LOW,HIGH");
  } else if (kind == "normal") {
    d.kind = LengthKind::normal;
    pair("MEAN,STD");
  } else if (kind == "lognormal") {
    d.kind = LengthKind::lognormal;
    pair("MEAN,SIGMA (σ of the log)");
  } else if (kind == "cdf") {
    d.kind = LengthKind::cdf;
    for (std::string_view point : split(args, ',')) {
      auto eq = point.find('=');
      if (eq == std::string_view::npos) {
        bad("a CDF point is TOKENS=P, got '" + std::string(point) + "'");
      }
      d.cdf.emplace_back(parse_count(point.substr(0, eq), what),
                         parse_real(point.substr(eq + 1), what));
    }
  } else {
    bad("unknown distribution '" + std::string(kind) + "'" + did_you_mean(kind, k_length_kinds) +
        " (" + length_usage() + ")");
  }
  check_distribution(d, what);
  return d;
}

std::string describe(const LengthDistribution& d) {
  switch (d.kind) {
  case LengthKind::fixed:
    return fmt::format("{:g}", d.a);
  case LengthKind::uniform:
    return fmt::format("uniform:{:g},{:g}", d.a, d.b);
  case LengthKind::normal:
    return fmt::format("normal:{:g},{:g}", d.a, d.b);
  case LengthKind::lognormal:
    return fmt::format("lognormal:{:g},{:g}", d.a, d.b);
  case LengthKind::cdf: {
    std::string s = "cdf:";
    for (std::size_t i = 0; i < d.cdf.size(); ++i) {
      s += fmt::format("{}{}={:g}", i ? "," : "", d.cdf[i].first, d.cdf[i].second);
    }
    return s;
  }
  }
  return "?";
}

std::string_view arrival_name(ArrivalProcess a) {
  return k_arrival_processes.name(a);
}

ArrivalProcess parse_arrival(std::string_view text) {
  return k_arrival_processes.parse(text);
}

namespace {

using detail::MapReader;

LengthDistribution read_length(const MapReader& r, std::string_view key) {
  std::string name = r.path_of(key);
  YAML::Node n = r.node(key);
  if (n.IsScalar()) {
    return r.parsed(key, [&](const std::string& s) { return parse_length_distribution(s, name); });
  }
  MapReader m = *r.map(key);
  m.allow_only({"distribution", "value", "min", "max", "mean", "std", "sigma", "points"});
  LengthDistribution d;
  std::string kind = m.required_text("distribution", "fixed, uniform, normal, lognormal or cdf");
  auto need = [&](std::string_view k, std::string_view meaning) {
    auto v = m.number(k);
    if (!v) {
      m.missing(k, meaning);
    }
    return *v;
  };
  if (kind == "fixed") {
    d.kind = LengthKind::fixed;
    d.a = need("value", "the length in tokens");
  } else if (kind == "uniform") {
    d.kind = LengthKind::uniform;
    d.a = need("min", "the shortest length");
    d.b = need("max", "the longest length");
  } else if (kind == "normal") {
    d.kind = LengthKind::normal;
    d.a = need("mean", "the mean length");
    d.b = need("std", "the standard deviation");
  } else if (kind == "lognormal") {
    d.kind = LengthKind::lognormal;
    d.a = need("mean", "the mean length");
    d.b = need("sigma", "σ of the log");
  } else if (kind == "cdf") {
    d.kind = LengthKind::cdf;
    YAML::Node points = m.node("points");
    if (!points.IsDefined() || !points.IsSequence()) {
      m.fail("points",
             "'" + m.path_of("points") + "' must be a list of [tokens, probability] pairs");
    }
    for (std::size_t i = 0; i < points.size(); ++i) {
      YAML::Node p = points[i];
      auto where = detail::location_of(p, m.locations()->file());
      if (!p.IsSequence() || p.size() != 2) {
        throw InputError(where, "a CDF point is [tokens, probability]");
      }
      try {
        d.cdf.emplace_back(parse_count(p[0].Scalar(), "tokens"),
                           parse_real(p[1].Scalar(), "probability"));
      } catch (const InputError& e) {
        throw InputError(where, e.what());
      }
    }
  } else {
    m.fail("distribution", "unknown distribution '" + kind + "'" +
                               did_you_mean(kind, k_length_kinds) +
                               " (one of: fixed, uniform, normal, lognormal, cdf)");
  }
  if (d.kind != LengthKind::uniform) {
    d.min = m.count("min").value_or(1);
    d.max = m.count("max").value_or(UINT64_MAX);
  }
  try {
    check_distribution(d, name);
  } catch (const InputError& e) {
    throw InputError(r.where(key), e.what());
  }
  return d;
}

} // namespace

Workload parse_workload(const std::string& text, const std::string& file) {
  YAML::Node root = detail::parse_yaml(text, file);
  if (!root.IsDefined() || root.IsNull()) {
    throw InputError(SourceLocation{file, 0, 0},
                     "empty workload; expected the keys of docs/simulate.md (arrival, rate, "
                     "duration or requests, prompt, output)");
  }
  auto locations = std::make_shared<detail::LocationMap>(file, detail::location_of(root, file),
                                                         "docs/simulate.md");
  MapReader r(root, "", locations);
  r.allow_only(
      {"name", "seed", "arrival", "rate", "duration", "requests", "prompt", "output", "prefix"});
  Workload w;
  w.name = r.text("name").value_or("");
  w.seed = r.count("seed").value_or(1);
  if (r.has("arrival")) {
    w.arrival = r.parsed("arrival", [](const std::string& s) { return parse_arrival(s); });
  }
  if (auto rate = r.number("rate")) {
    if (*rate < k_min_arrival_rate) {
      r.fail("rate", "'rate' must be at least 1e-6 requests per second");
    }
    w.rate = *rate;
  }
  w.duration_s = r.number("duration");
  if (w.duration_s && *w.duration_s <= 0) {
    r.fail("duration", "'duration' must be above 0 seconds");
  }
  w.requests = r.count("requests");
  if (w.requests && *w.requests == 0) {
    r.fail("requests", "'requests' must be at least 1");
  }
  if (!r.has("prompt")) {
    r.missing("prompt", "the prompt length distribution, e.g. lognormal:2000,0.8");
  }
  if (!r.has("output")) {
    r.missing("output", "the output length distribution, e.g. uniform:100,800");
  }
  w.prompt = read_length(r, "prompt");
  w.output = read_length(r, "output");
  if (auto p = r.map("prefix")) {
    p->allow_only({"fraction", "count", "tokens"});
    w.prefix.fraction = p->number("fraction").value_or(1.0);
    if (w.prefix.fraction > 1) {
      p->fail("fraction", "'prefix.fraction' must lie in [0, 1]");
    }
    w.prefix.count = p->count("count").value_or(1);
    if (w.prefix.count == 0) {
      p->fail("count", "'prefix.count' must be at least 1");
    }
    w.prefix.tokens = p->required_count("tokens", "the shared prefix length in tokens");
    if (w.prefix.tokens == 0) {
      p->fail("tokens", "'prefix.tokens' must be at least 1");
    }
  }
  try {
    validate_workload(w);
  } catch (const InputError& e) {
    throw InputError(SourceLocation{file, 0, 0}, e.what());
  }
  return w;
}

void validate_workload(const Workload& w) {
  if (w.arrival == ArrivalProcess::burst) {
    if (!w.requests) {
      throw InputError("a burst needs a request count (requests, --requests): all of them "
                       "arrive at t = 0");
    }
    return;
  }
  if (!(w.rate >= k_min_arrival_rate)) {
    throw InputError("the arrival rate must be at least 1e-6 requests per second");
  }
  if (!w.duration_s && !w.requests) {
    throw InputError("give a duration (seconds of arrivals) or a request count");
  }
}

SyntheticSource::SyntheticSource(const Workload& workload)
    : m_workload(workload), m_arrivals(workload.seed),
      m_prompts(workload.seed ^ 0x9e3779b97f4a7c15), m_outputs(workload.seed ^ 0xbf58476d1ce4e5b9),
      m_prefixes(workload.seed ^ 0x94d049bb133111eb) {
  validate_workload(m_workload);
}

std::optional<Request> SyntheticSource::next() {
  const Workload& w = m_workload;
  if (w.requests && m_emitted >= *w.requests) {
    return std::nullopt;
  }
  Request r;
  switch (w.arrival) {
  case ArrivalProcess::poisson:
    m_clock += m_arrivals.exponential(w.rate);
    r.arrival_s = m_clock;
    break;
  case ArrivalProcess::constant:
    r.arrival_s = static_cast<double>(m_emitted) / w.rate;
    break;
  case ArrivalProcess::burst:
    r.arrival_s = 0;
    break;
  }
  if (w.duration_s && r.arrival_s >= *w.duration_s) {
    return std::nullopt;
  }
  r.prompt_tokens = w.prompt.sample(m_prompts);
  r.output_tokens = w.output.sample(m_outputs);
  if (w.prefix.fraction > 0) {
    // Two draws per request whether or not it carries a prefix, so streams stay aligned.
    double carries = m_prefixes.uniform();
    double which = m_prefixes.uniform();
    if (carries < w.prefix.fraction) {
      r.prefix_id = 1 + std::min(w.prefix.count - 1,
                                 static_cast<u64>(which * static_cast<double>(w.prefix.count)));
      r.prefix_tokens = w.prefix.tokens;
      r.prompt_tokens = checked_add(r.prompt_tokens, w.prefix.tokens);
    }
  }
  ++m_emitted;
  return r;
}

namespace {

/// The workload whose requests a closed loop sends: all "at once", the loop setting the time.
Workload lengths_only(Workload w) {
  w.arrival = ArrivalProcess::burst;
  w.duration_s.reset();
  w.requests = w.requests.value_or(UINT64_MAX); // a duration alone: the loop stops at it
  return w;
}

} // namespace

ClosedLoopSource::ClosedLoopSource(const Workload& workload, u64 clients)
    : m_lengths(lengths_only(workload)), m_duration_s(workload.duration_s), m_free(clients, 0.0) {
  if (clients == 0) {
    throw InputError("--concurrency must be at least 1 client");
  }
  if (!workload.requests && !workload.duration_s) {
    throw InputError("a closed loop needs a stop: --requests or --duration");
  }
}

std::optional<Request> ClosedLoopSource::next() {
  if (m_free.empty() || m_rejected_in_a_row >= k_max_rejected_in_a_row) {
    return std::nullopt; // every client waits on a request in flight
  }
  double at = m_free.front();
  if (m_duration_s && at >= *m_duration_s) {
    return std::nullopt;
  }
  std::optional<Request> r = m_lengths.next();
  if (!r) {
    return std::nullopt;
  }
  std::pop_heap(m_free.begin(), m_free.end(), std::greater<>());
  m_free.pop_back();
  r->arrival_s = at;
  return r;
}

void ClosedLoopSource::left(double at, bool served) {
  m_rejected_in_a_row = served ? 0 : m_rejected_in_a_row + 1;
  m_free.push_back(at);
  std::push_heap(m_free.begin(), m_free.end(), std::greater<>());
}

} // namespace kvcalc::sim
