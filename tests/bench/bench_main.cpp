// Throughput of the pure-arithmetic paths, printed for docs/performance.md. Not a test: run
// `build/tests/kvcalc_bench` on a quiet machine and compare ratios within one run. Names given
// on the command line restrict the footprint line to those bundled models (to set one build's
// zoo against another's); by default it runs them all.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

#include <kvcalc/kv/capacity.hpp>
#include <kvcalc/kv/footprint.hpp>
#include <kvcalc/model/registry.hpp>
#include <kvcalc/roofline/roofline.hpp>
#include <kvcalc/sim/simulator.hpp>

using namespace kvcalc;
using namespace kvcalc::sim;
using namespace kvcalc::roofline;
using namespace kvcalc::kv;
using namespace kvcalc::device;
using namespace kvcalc::model;

namespace {

template <class F> double seconds(F&& f) {
  auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// Seconds of the CLI's 10,000 scenarios (contexts 1k…100k × batches 1…100) on one prepared
/// deployment and one result buffer, as the command prices them; each step's time (the
/// estimate's where the deployment has one) added to `checksum`.
double prepared_sweep_s(const RooflineRequest& deployment, double& checksum) {
  return seconds([&] {
    RooflineRequest r = deployment;
    Roofline roofline(r);
    RooflineResult result;
    for (u64 c = 1; c <= 100; ++c) {
      for (u64 b = 1; b <= 100; ++b) {
        r.context = c * 1024;
        r.batch = b;
        roofline.step(r, result);
        checksum += result.estimate ? result.estimate->time_s : result.time_s;
      }
    }
  });
}

/// The CLI's sweep `kvcalc roofline deepseek-v3 --gpu h200 --gpus 8 --tp 8 --batch 1..100
/// --context 1k..100k` (decode, MLA auto): 10,000 scenarios, first each on its own
/// (compute_roofline), then on one prepared deployment with one result buffer, as the command
/// prices them. docs/performance.md compares the command's wall time with these.
void time_cli_sweep(const RooflineRequest& base, const Gpu& h200) {
  RooflineRequest sweep = base;
  sweep.parallel.gpus = 8;
  sweep.rates.links.domain = scale_up_domain(h200, 8);
  double single_checksum = 0;
  double single_s = seconds([&] {
    for (u64 c = 1; c <= 100; ++c) {
      for (u64 b = 1; b <= 100; ++b) {
        RooflineRequest r = sweep;
        r.context = c * 1024;
        r.batch = b;
        single_checksum += compute_roofline(r).time_s;
      }
    }
  });
  double prepared_checksum = 0;
  double prepared_s = prepared_sweep_s(sweep, prepared_checksum);
  std::printf("roofline sweep (the CLI's 10,000): each alone %.4f s = %.0f scenarios/s; prepared "
              "%.4f s = %.0f scenarios/s (checksums %.6g, %.6g)\n",
              single_s, 1e4 / single_s, prepared_s, 1e4 / prepared_s, single_checksum,
              prepared_checksum);
}

/// The estimate's cost beside the bound's, alternating runs of each and keeping each's fastest:
/// the CLI's 10,000-scenario sweep on a prepared deployment (every op priced both ways against
/// the bound alone), and the simulator's path (StepCost::time_s of one mixed step, bound
/// against estimate).
void time_estimate(const RooflineRequest& base, const Gpu& h200) {
  RooflineRequest bound = base;
  bound.parallel.gpus = 8;
  bound.rates.links.domain = scale_up_domain(h200, 8);
  bound.rates.estimate.reset();
  RooflineRequest both = bound;
  both.rates.estimate = choose_estimator(h200, nullptr).estimator;
  auto steps = [](const RooflineRequest& deployment, Pricing pricing, double& checksum) {
    StepCost cost(deployment);
    StepLoad load;
    cost.add(load, Phase::decode, 1, 4096, 64, 64);
    cost.add(load, Phase::extend, 512, 1024, 2, 2);
    return seconds([&] {
      for (int i = 0; i < 100000; ++i) {
        checksum += cost.time_s(load, pricing);
      }
    });
  };
  double sweep_bound = 1e9;
  double sweep_both = 1e9;
  double step_bound = 1e9;
  double step_estimate = 1e9;
  double checksum = 0;
  for (int round = 0; round < 5; ++round) {
    sweep_bound = std::min(sweep_bound, prepared_sweep_s(bound, checksum));
    sweep_both = std::min(sweep_both, prepared_sweep_s(both, checksum));
    step_bound = std::min(step_bound, steps(both, Pricing::bound, checksum));
    step_estimate = std::min(step_estimate, steps(both, Pricing::estimate, checksum));
  }
  std::printf("estimate: the CLI's 10,000-scenario sweep prepared, bound alone %.4f s, bound and "
              "estimate %.4f s (%.2fx); the simulator's step, bound %.3f us, estimate %.3f us "
              "(%.2fx); fastest of 5 alternating runs (checksum %.6g)\n",
              sweep_bound, sweep_both, sweep_both / sweep_bound, step_bound * 10,
              step_estimate * 10, step_estimate / step_bound, checksum);
}

} // namespace

int main(int argc, char** argv) {
  std::vector<const Model*> zoo;
  for (int i = 1; i < argc; ++i) {
    const Model* m = find_builtin_model(argv[i]);
    if (m == nullptr) {
      std::fprintf(stderr, "kvcalc_bench: no bundled model '%s' (see `kvcalc models`)\n", argv[i]);
      return 2;
    }
    zoo.push_back(m);
  }
  if (zoo.empty()) {
    for (const Model& m : builtin_models()) {
      zoo.push_back(&m);
    }
  }
  const Model& v3 = *find_builtin_model("deepseek-v3");
  GpuCatalog catalog;
  const Gpu& h200 = catalog.find("h200");

  // 10,000 roofline scenarios: 25 batches × 100 contexts × 2 MLA modes × 2 phases.
  RooflineRequest base;
  base.model = v3;
  base.gpu = h200;
  base.rates = device_rates(h200);
  base.parallel.tp = 8;
  double checksum = 0;
  u64 scenarios = 0;
  double roofline_s = seconds([&] {
    for (u64 b = 1; b <= 25; ++b) {
      for (u64 c = 1; c <= 100; ++c) {
        for (MlaMode mode : {MlaMode::absorbed, MlaMode::naive}) {
          for (Phase phase : {Phase::decode, Phase::extend}) {
            RooflineRequest r = base;
            r.batch = b * 8;
            r.context = c * 1024;
            r.mla = mode;
            r.phase = phase;
            r.query = phase == Phase::decode ? 1 : 256;
            checksum += compute_roofline(r).time_s;
            ++scenarios;
          }
        }
      }
    }
  });
  std::printf("roofline: %llu DeepSeek-V3 scenarios in %.3f s = %.0f scenarios/s (checksum %.6g)\n",
              static_cast<unsigned long long>(scenarios), roofline_s,
              static_cast<double>(scenarios) / roofline_s, checksum);

  time_cli_sweep(base, h200);
  time_estimate(base, h200);

  u64 capacity_runs = 0;
  double capacity_s = seconds([&] {
    for (u64 i = 0; i < 1000; ++i) {
      CapacityRequest q;
      q.model = v3;
      q.gpu = h200;
      q.parallel.tp = 8;
      q.engine.engine = i % 2 ? Engine::vllm : Engine::sglang;
      q.contexts = {4096, 32768, 131072};
      checksum += compute_capacity(q).contexts[0].max_concurrency;
      ++capacity_runs;
    }
  });
  std::printf("capacity: %llu DeepSeek-V3 budgets (3 contexts each) in %.3f s = %.0f/s\n",
              static_cast<unsigned long long>(capacity_runs), capacity_s,
              static_cast<double>(capacity_runs) / capacity_s);

  u64 footprints = 0;
  double footprint_s = seconds([&] {
    FootprintOptions o;
    o.contexts = {4096, 32768, 131072};
    for (int i = 0; i < 2000; ++i) {
      for (const Model* m : zoo) {
        checksum += static_cast<double>(compute_footprint(*m, o).bytes_per_token);
        ++footprints;
      }
    }
  });
  std::printf("footprint: %llu footprints (%zu models) in %.3f s = %.0f/s (checksum %.6g)\n",
              static_cast<unsigned long long>(footprints), zoo.size(), footprint_s,
              static_cast<double>(footprints) / footprint_s, checksum);

  // The serving simulator: 100,000 requests of the chat workload (docs/examples/chat.yaml)
  // on DeepSeek-V3, 8 × H200, TP 8, vLLM budget, at its own rate, near the instance's capacity,
  // and past it (the queue grows; preemptions).
  std::ifstream chat_file(KVCALC_SOURCE_DIR "/docs/examples/chat.yaml");
  std::stringstream chat_text;
  chat_text << chat_file.rdbuf();
  Workload chat = parse_workload(chat_text.str(), "docs/examples/chat.yaml");
  chat.duration_s.reset();
  chat.requests = 100000;
  CapacityRequest cq;
  cq.model = v3;
  cq.gpu = h200;
  cq.parallel.gpus = 8;
  cq.parallel.tp = 8;
  cq.engine.engine = Engine::vllm;
  CapacityResult capacity = compute_capacity(cq);
  SimConfig config = instance_config(cq, capacity, device_rates(h200), MlaMode::automatic);
  // The same run priced by the estimate, side by side with the bound, fastest of 3 each.
  {
    SimConfig estimated = config;
    estimated.step.rates.estimate = choose_estimator(h200, nullptr).estimator;
    estimated.pricing = Pricing::estimate;
    Workload w = chat;
    w.requests = 20000;
    double bound_s = 1e9;
    double estimate_s = 1e9;
    u64 bound_steps = 0;
    u64 estimate_steps = 0;
    for (int round = 0; round < 3; ++round) {
      bound_s = std::min(bound_s, seconds([&] {
                           SyntheticSource source(w);
                           bound_steps = simulate(config, source).steps;
                         }));
      estimate_s = std::min(estimate_s, seconds([&] {
                              SyntheticSource source(w);
                              estimate_steps = simulate(estimated, source).steps;
                            }));
    }
    std::printf("simulate priced by the estimate: 20,000 chat requests at %.0f/s, bound %.3f s "
                "(%llu steps, %.2f us a step), estimate %.3f s (%llu steps, %.2f us a step): "
                "%.2fx a step\n",
                chat.rate, bound_s, static_cast<unsigned long long>(bound_steps),
                bound_s / static_cast<double>(bound_steps) * 1e6, estimate_s,
                static_cast<unsigned long long>(estimate_steps),
                estimate_s / static_cast<double>(estimate_steps) * 1e6,
                (estimate_s / static_cast<double>(estimate_steps)) /
                    (bound_s / static_cast<double>(bound_steps)));
  }
  for (double rate : {chat.rate, 20.0, 40.0}) {
    Workload w = chat;
    w.rate = rate;
    SimResult sim;
    double sim_s = seconds([&] {
      SyntheticSource source(w);
      sim = simulate(config, source);
    });
    std::printf("simulate: %llu chat requests at %.0f/s on DeepSeek-V3 8xH200 TP8 in %.3f s = "
                "%.0f requests/s; %llu steps = %.0f steps/s (simulated %.0f s, peak KV %.1f%%, "
                "%llu preemptions, %.0f output tokens/s)\n",
                static_cast<unsigned long long>(sim.requests_completed), rate, sim_s,
                static_cast<double>(sim.requests_completed) / sim_s,
                static_cast<unsigned long long>(sim.steps), static_cast<double>(sim.steps) / sim_s,
                sim.makespan_s, sim.kv_peak * 100, static_cast<unsigned long long>(sim.preemptions),
                sim.output_tokens_per_s);
  }
  return 0;
}
