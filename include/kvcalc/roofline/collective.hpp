#pragma once
/// Collectives on an α–β model over the links they cross: the scale-up interconnect inside a
/// domain (an HGX board, an NVL72 rack) and each GPU's NIC beyond it (docs/formulas.md,
/// "Collectives"). Pure functions of the topology, the group and the bytes.

#include <string>
#include <string_view>

#include <kvcalc/core/checked.hpp>

namespace kvcalc::roofline {

/// The links one GPU talks over, with their one-direction rates and per-message latencies.
struct Topology {
  std::string gpu;            ///< named in errors
  u64 domain = 0;             ///< GPUs the scale-up link joins; 0: every GPU (not stated)
  double up_bytes_per_s = 0;  ///< scale-up link, one direction
  double up_latency_s = 0;    ///< α of one step over it
  double out_bytes_per_s = 0; ///< NIC, one direction; 0: none
  double out_latency_s = 0;   ///< α of one step over it
};

/// What a collective does, which decides how the estimate prices it.
enum class CollectiveKind {
  all_reduce,
  dispatch, ///< tokens to their experts
  combine,  ///< the experts' outputs back
  send,     ///< one GPU to the next (a pipeline stage's hand-over)
};

/// What one collective costs one GPU.
struct Collective {
  CollectiveKind kind = CollectiveKind::send;
  double message_bytes = 0;   ///< all-reduce: the buffer each GPU holds; else what it sends
  std::string_view algorithm; ///< "one-shot", "two-shot", ... (a static string)
  u64 group = 1;              ///< GPUs taking part
  u64 domains = 1;            ///< scale-up domains they span
  double up_bytes = 0;        ///< this GPU sends over the scale-up link
  double out_bytes = 0;       ///< this GPU sends over its NIC
  double latency_s = 0;       ///< Σ α of its steps
  double time_s = 0;          ///< latency + the slower link's bytes / rate
  /// "nvlink"-style name of the links crossed: "scale-up", "scale-out" or "scale-up+out".
  [[nodiscard]] std::string link() const;
};

/// GPUs of a group of `group` that share one domain, with groups packed into domains: the
/// group itself when it fits, else the largest count that divides both.
[[nodiscard]] u64 group_in_domain(const Topology& t, u64 group);

/// All-reduce of a `bytes` buffer held by each of `group` GPUs. Inside a domain, the faster of
/// one-shot (α + (g−1)·B/β) and two-shot (2α + 2(g−1)/g·B/β); across domains, reduce-scatter
/// inside each, all-reduce of 1/L of the buffer across the N domains over the NICs, all-gather
/// inside. An InputError when the group leaves its domain and the GPU has no NIC.
[[nodiscard]] Collective all_reduce(const Topology& t, u64 group, double bytes);

/// Expert dispatch (or combine) of `tokens` tokens of `bytes` each, every token to `k` experts
/// spread evenly over `group` GPUs: a token crosses once to each other domain that holds one of
/// its experts, (N − 1)·(1 − (1 − 1/N)^k) of the N domains on average, and is forwarded inside
/// it over the scale-up link (DeepEP's normal kernels); copies for its own domain go over the
/// scale-up link directly. The two links work at once.
/// `local`: the group's GPUs in one domain, where a placement other than packing sets it (0:
/// packed, group_in_domain).
[[nodiscard]] Collective expert_exchange(const Topology& t, u64 group, double tokens, double k,
                                         double bytes, u64 local = 0);

/// `bytes` from one GPU to another, over the NIC when `crosses_domain`.
[[nodiscard]] Collective send(const Topology& t, bool crosses_domain, double bytes);

} // namespace kvcalc::roofline
