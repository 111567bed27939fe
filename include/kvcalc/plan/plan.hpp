#pragma once
/// Capacity plans for CI: scenarios (model, GPUs, parallelism, engine, dtypes) with
/// requirements, each checked against compute_capacity (docs/capacity-plans.md).

#include <optional>
#include <string>
#include <vector>

#include <kvcalc/core/names.hpp>
#include <kvcalc/kv/capacity.hpp>
#include <kvcalc/model/loader.hpp>

namespace kvcalc::plan {

enum class RequirementKind {
  min_sequences, ///< at least `value` sequences of `context` tokens fit
  min_context,   ///< at `sequences` concurrent sequences, contexts of at least `value` fit
  max_kv_share,  ///< the KV pool is at most `share` of each GPU's memory
  min_kv_share,  ///< the KV pool is at least `share` of each GPU's memory
  min_kv_tokens, ///< the pool holds at least `value` tokens
  fits,          ///< the weights and the reserve fit at all
};
inline constexpr NameTable<RequirementKind, 6> k_requirement_kinds{
    "requirement",
    {{{RequirementKind::min_sequences, "min_sequences"},
      {RequirementKind::min_context, "min_context"},
      {RequirementKind::max_kv_share, "max_kv_share"},
      {RequirementKind::min_kv_share, "min_kv_share"},
      {RequirementKind::min_kv_tokens, "min_kv_tokens"},
      {RequirementKind::fits, "fits"}}}};

/// Whether a requirement bounds a count (sequences, tokens), a share of memory, or neither.
[[nodiscard]] constexpr bool is_share(RequirementKind k) {
  return k == RequirementKind::max_kv_share || k == RequirementKind::min_kv_share;
}

struct Requirement {
  RequirementKind kind = RequirementKind::fits;
  u64 value = 0;     ///< sequences, tokens, or context, by kind
  u64 context = 0;   ///< min_sequences: at this context
  u64 sequences = 0; ///< min_context: at this concurrency
  double share = 0;  ///< max_kv_share / min_kv_share
  SourceLocation where;
};

struct PlanScenario {
  std::string name;
  std::string model; ///< name or path, resolved against the plan's folder
  std::string gpu;
  kv::CapacityRequest request; ///< model and gpu filled in when evaluated
  std::vector<Requirement> requirements;
  SourceLocation where;
};

struct Plan {
  std::string file;
  std::string gpu_file; ///< optional user catalog, relative to the plan
  std::vector<PlanScenario> scenarios;
};

/// Parses a plan; every error is an InputError at file:line:col.
[[nodiscard]] Plan parse_plan(const std::string& text, const std::string& file);

struct RequirementResult {
  Requirement requirement;
  bool passed = false;
  std::string text;        ///< "≥ 16 sequences at 131,072 tokens"
  std::string actual;      ///< "48", for people
  u64 actual_count = 0;    ///< sequences or tokens reached (the count kinds)
  double actual_share = 0; ///< the KV pool's share of GPU memory (the share kinds)
};

struct ScenarioResult {
  const PlanScenario* scenario = nullptr;
  model::Model model;
  kv::CapacityResult capacity;
  std::vector<RequirementResult> requirements;
  [[nodiscard]] bool passed() const;
};

/// Loads each scenario's model and GPU and checks its requirements.
[[nodiscard]] std::vector<ScenarioResult> evaluate_plan(const Plan& plan,
                                                        model::Diagnostics& diagnostics);

} // namespace kvcalc::plan
