#pragma once
/// Weight bytes in a storage dtype, scales included, and their share on one GPU under tensor,
/// pipeline and expert parallelism (docs/formulas.md, "Weights").

#include <optional>

#include <kvcalc/core/dtype.hpp>
#include <kvcalc/kv/deployment.hpp>
#include <kvcalc/model/params.hpp>

namespace kvcalc::kv {

/// How one copy of the model is split over GPUs.
struct WeightSharding {
  /// Everything but the routed experts splits over this many GPUs: tp, or 1 under attention
  /// data parallel, where each rank runs them on its own tokens.
  u64 dense_tp = 1;
  u64 pp = 1; ///< pipeline stages: layers split evenly
  /// Routed experts (redundant copies included) on the busiest expert-parallel rank; 0: all of
  /// them.
  u64 experts_per_rank = 0;
  u64 expert_tp = 1; ///< ranks each expert's matrices split over
  bool mtp = false;  ///< load the multi-token-prediction module (speculative decoding)
};

/// The sharding a resolved deployment gives the weights.
[[nodiscard]] WeightSharding weight_sharding(const Deployment& d, bool mtp);

/// Bytes of every instance of `t` stored as `dtype`: 16/32-bit plain; fp8 with one fp32 scale
/// per 128 × 128 block; int8 with an fp32 scale per output row; int4 with an fp16 scale per 128
/// inputs; nvfp4 with an fp8 scale per 16 inputs plus an fp32 tensor scale; mxfp4 with an e8m0
/// scale per 32 inputs.
[[nodiscard]] u64 tensor_bytes(const model::TensorGroup& t, DType dtype);

/// The dtype `t` is stored in: `weight_dtype` for the linear weights it covers
/// (Model::quantized_weights), the model dtype for everything else.
[[nodiscard]] DType tensor_dtype(const model::Model& m, const model::TensorGroup& t,
                                 DType weight_dtype);

struct WeightBytes {
  u64 total = 0;   ///< one full copy of the model (MTP only when loaded)
  u64 per_gpu = 0; ///< on the most loaded GPU of one copy
  u64 experts = 0; ///< routed experts, one full copy
};

/// `weight_dtype` nullopt: the model's own (`weight_dtype`, else `dtype`).
[[nodiscard]] WeightBytes weight_bytes(const model::Model& m, const model::ParamCount& params,
                                       std::optional<DType> weight_dtype,
                                       const WeightSharding& sharding);

} // namespace kvcalc::kv
