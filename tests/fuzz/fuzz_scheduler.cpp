// Fuzz target: the scheduler over a trace. The first byte picks an instance (preemption by
// recompute or swap, a sliding-window model's two pools, a pool small enough that requests
// wait and are preempted); the rest is a trace, CSV or JSONL, simulated to its end. Every
// instance is started for requests of at most 1,024 tokens, so a run stays short.

#include "fuzz_target.hpp"

#include <array>
#include <sstream>

#include <kvcalc/core/error.hpp>
#include <kvcalc/device/gpu.hpp>
#include <kvcalc/kv/capacity.hpp>
#include <kvcalc/model/registry.hpp>
#include <kvcalc/roofline/roofline.hpp>
#include <kvcalc/sim/simulator.hpp>
#include <kvcalc/sim/trace.hpp>

namespace {

using namespace kvcalc;

sim::SimConfig instance(const char* model, u64 blocks, sim::Preemption preemption) {
  kv::CapacityRequest q;
  q.model = *model::find_builtin_model(model);
  q.gpu = device::GpuCatalog().find("h100-sxm");
  q.engine.engine = kv::Engine::vllm;
  q.engine.max_model_len = 1024;
  q.engine.num_gpu_blocks = blocks;
  sim::SimConfig c = sim::instance_config(q, kv::compute_capacity(q), roofline::device_rates(q.gpu),
                                          roofline::MlaMode::automatic);
  c.preemption = preemption;
  return c;
}

const std::array<sim::SimConfig, 4>& instances() {
  static const std::array<sim::SimConfig, 4> all{
      instance("llama-3.1-8b", 4096, sim::Preemption::recompute),
      instance("llama-3.1-8b", 96, sim::Preemption::recompute),
      instance("llama-3.1-8b", 96, sim::Preemption::swap),
      instance("gemma-3-12b", 512, sim::Preemption::recompute)};
  return all;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) {
    return 0;
  }
  const sim::SimConfig& config = instances()[data[0] % instances().size()];
  std::istringstream in(kvcalc::fuzz::as_text(data + 1, size - 1));
  try {
    sim::TraceReader trace(in, "fuzz.trace");
    sim::SimResult r = sim::simulate(config, trace);
    (void)r;
  } catch (const kvcalc::Error&) {
  }
  return 0;
}
