#pragma once
/// Parameter count from the architecture, tensor by tensor (docs/formulas.md, "Parameters").
/// The tensor list also drives weight bytes in any dtype (block scales need each shape) and
/// their sharding over tensor, pipeline and expert parallelism.

#include <string>
#include <vector>

#include <kvcalc/model/model.hpp>

namespace kvcalc::model {

/// Where a tensor sits, for sharding and reporting.
enum class TensorPlace {
  embedding, ///< token (and learned position) embeddings
  lm_head,   ///< output projection (absent when tied), with the final norm
  layer,     ///< inside a transformer block, not an expert
  expert,    ///< a routed expert: sharded over expert parallelism
};

/// `count` identical tensors of shape rows × cols (a vector has rows = 1).
struct TensorGroup {
  std::string name; ///< "attention.q_proj", "moe.experts.down_proj", ...
  u64 rows = 0;     ///< output features
  u64 cols = 0;     ///< input features
  u64 count = 0;    ///< instances in the model (layers × experts, ...)
  TensorPlace place = TensorPlace::layer;
  bool linear = false; ///< a matmul weight: what weight_dtype quantizes
  bool mtp = false;    ///< belongs to the multi-token-prediction module

  [[nodiscard]] u64 params() const;
};

/// The key of `t` in Model::weight_formats: its name, "mtp." before an MTP block's.
[[nodiscard]] std::string format_key(const TensorGroup& t);

struct ParamCount {
  std::vector<TensorGroup> tensors; ///< main model and MTP, in model order
  u64 main = 0;             ///< every parameter outside the MTP module (tied embeddings once)
  u64 mtp = 0;              ///< the MTP module's own parameters (embedding and head shared)
  u64 embedding = 0;        ///< token and position embeddings
  u64 experts = 0;          ///< routed experts, main model
  u64 active_per_token = 0; ///< main, counting experts_per_token of the routed experts
  bool overridden = false;  ///< `params` in the model file replaced the formula's `main`
};

/// Counts `m`. Models with linear-attention layers need a `params` override (their layer
/// weights are not in the formula): without one this is an InputError naming the fix.
[[nodiscard]] ParamCount count_params(const Model& m);

} // namespace kvcalc::model
