#pragma once
/// A model spread over GPUs: the parallelism a command is given, checked against the
/// model, with the counts every command derives from it (docs/cli.md, "Deployments").

#include <optional>

#include <kvcalc/core/dtype.hpp>
#include <kvcalc/model/model.hpp>

namespace kvcalc::kv {

struct Parallelism {
  u64 gpus = 0; ///< GPUs in the deployment; 0: tp × pp
  u64 tp = 1;   ///< tensor parallel
  u64 pp = 1;   ///< pipeline parallel
  u64 ep = 0;   ///< expert-parallel ranks; 0: tp with dp-attention, else 1 (experts split over tp)
  u64 dcp = 1;  ///< decode context parallel: MLA tokens sharded over dcp TP ranks
  bool dp_attention = false; ///< attention data parallel over the tp ranks (own sequences each)
  u64 redundant_experts = 0; ///< extra copies of hot experts over the ep ranks (EPLB)
  /// Attention data-parallel groups per copy (SGLang --dp with --enable-dp-attention): each of
  /// tp / dp GPUs; 0: tp with dp_attention, else 1. Above 1 it implies dp_attention.
  u64 dp = 0;
};

/// A parallelism that holds for its model, and what follows from it.
struct Deployment {
  Parallelism parallel; ///< gpus and ep filled in
  u64 replicas = 1;     ///< model copies: gpus / (tp × pp)
  u64 attention_tp = 1; ///< ranks the attention heads split over: tp / dp
  u64 attention_dp = 1; ///< attention groups per copy, each with its own sequences
  u64 kv_pools = 1;     ///< KV pools of the deployment: one per attention group of each copy
  u64 expert_tp = 1;    ///< ranks each expert's matrices split over: tp / ep when ep < tp
  /// Tokens travel to their experts' GPUs and back (all-to-all dispatch and combine): with
  /// dp-attention, or experts spread over more GPUs than a copy's tp.
  bool expert_all_to_all = false;
  /// Routed experts (redundant copies included) on the busiest expert-parallel rank.
  u64 experts_per_rank = 0;
  DType weight_dtype{}; ///< the one asked for, else the checkpoint's, else the model dtype
};

/// Checks `p` against `m` (sizes of at least 1, whole copies, a dcp that divides tp on a model
/// it applies to, at least one layer per pipeline stage, expert ranks that tile a stage's GPUs)
/// and resolves it; an InputError saying which flag to change otherwise.
[[nodiscard]] Deployment resolve_deployment(const model::Model& m, const Parallelism& p,
                                            std::optional<DType> weight_dtype);

} // namespace kvcalc::kv
