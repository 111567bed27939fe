#pragma once
/// Weight bytes in a storage dtype, scales included, and their share on one GPU under tensor,
/// pipeline and expert parallelism (docs/formulas.md, "Weights").

#include <optional>
#include <string>

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

/// Bytes of every instance of `t` stored in `format`.
[[nodiscard]] u64 tensor_bytes(const model::TensorGroup& t, const model::WeightFormat& format);
/// Bytes of every instance of `t` stored as `dtype` in kvcalc's layout for it
/// (WeightFormat::of).
[[nodiscard]] u64 tensor_bytes(const model::TensorGroup& t, DType dtype);

/// How `t` is stored. With `asked` (--weight-dtype), the tensors the checkpoint quantizes (all
/// linear ones of an unquantized model; Model::quantized_weights) take kvcalc's layout of it;
/// without, the checkpoint's own weight_formats, else its weight_dtype over quantized_weights;
/// everything else is the model dtype.
[[nodiscard]] model::WeightFormat tensor_format(const model::Model& m, const model::TensorGroup& t,
                                                std::optional<DType> asked);

struct WeightBytes {
  u64 total = 0;   ///< one full copy of the model (MTP only when loaded)
  u64 per_gpu = 0; ///< on the most loaded GPU of one copy
  u64 experts = 0; ///< routed experts, one full copy
};

/// `weight_dtype`: --weight-dtype, nullopt for the checkpoint's own (tensor_format).
[[nodiscard]] WeightBytes weight_bytes(const model::Model& m, const model::ParamCount& params,
                                       std::optional<DType> weight_dtype,
                                       const WeightSharding& sharding);

} // namespace kvcalc::kv
