// Fuzz target: every model that loads must also compute. After a model description (kvcalc
// YAML or config.json) parses, its footprint, parameter count, capacity on one bundled GPU and
// decode roofline either succeed or throw kvcalc::Error (overflow included), never crash.

#include "fuzz_target.hpp"

#include <kvcalc/core/error.hpp>
#include <kvcalc/kv/capacity.hpp>
#include <kvcalc/kv/footprint.hpp>
#include <kvcalc/model/loader.hpp>
#include <kvcalc/model/params.hpp>
#include <kvcalc/roofline/roofline.hpp>

namespace {

/// Contexts from the smallest to one past any model's max_context (2^20 = 1M tokens).
const std::vector<kvcalc::u64> k_contexts{1, 4096, 131072, kvcalc::u64{1} << 20};

void compute_all(const kvcalc::model::Model& model) {
  kvcalc::kv::FootprintOptions footprint;
  footprint.contexts = k_contexts;
  footprint.block_size = 16;
  (void)kvcalc::kv::compute_footprint(model, footprint);
  (void)kvcalc::model::count_params(model);

  const kvcalc::device::Gpu& gpu = kvcalc::device::builtin_gpus().front();
  for (kvcalc::kv::Engine engine : {kvcalc::kv::Engine::plain, kvcalc::kv::Engine::vllm,
                                    kvcalc::kv::Engine::sglang, kvcalc::kv::Engine::trtllm}) {
    try {
      kvcalc::kv::CapacityRequest request;
      request.model = model;
      request.gpu = gpu;
      request.engine.engine = engine;
      request.contexts = k_contexts;
      request.max_context_at = 1;
      (void)kvcalc::kv::compute_capacity(request);
    } catch (const kvcalc::Error&) {
    }
  }

  kvcalc::roofline::RooflineRequest roofline;
  roofline.model = model;
  roofline.gpu = gpu;
  roofline.rates = kvcalc::roofline::device_rates(gpu);
  roofline.context = 4096;
  (void)kvcalc::roofline::compute_roofline(roofline);
  roofline.parallel.tp = 2;
  try {
    (void)kvcalc::roofline::compute_roofline(roofline);
  } catch (const kvcalc::Error&) {
  }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    kvcalc::model::Diagnostics diagnostics;
    compute_all(kvcalc::model::parse_model_document(kvcalc::fuzz::as_text(data, size), "fuzz.yaml",
                                                    diagnostics));
  } catch (const kvcalc::Error&) {
  }
  return 0;
}
