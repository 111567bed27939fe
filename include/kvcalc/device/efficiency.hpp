#pragma once
/// What kernels and links reach on a device, as curves over their shape: the `efficiency`
/// section of a device profile (docs/device-profile.md), which the roofline's estimate prices
/// each op with (docs/formulas.md, "Estimate"). The typical profiles of measured GPUs are
/// compiled in (src/device/profiles/), each number traced to a published kernel- or link-level
/// measurement (docs/accuracy.md).

#include <optional>
#include <string>
#include <vector>

#include <kvcalc/device/gpu.hpp>

namespace kvcalc::device {

/// y against x > 0, linear in log x between its points and flat beyond its ends.
struct Curve {
  std::vector<double> x; ///< ascending
  std::vector<double> y;
  /// Each segment's log x and slope in it, worked out by prepare() so that at() takes one
  /// logarithm; without them at() works them out each time.
  std::vector<double> log_x = {};
  std::vector<double> slope = {};
  [[nodiscard]] double at(double v) const;
  [[nodiscard]] bool empty() const { return x.empty(); }
  void prepare();
};

/// Seconds against bytes: log-log between its points, the first point's time below it, and
/// beyond the last at the last point's rate (time proportional to bytes).
struct LatencyTable {
  std::vector<double> bytes; ///< ascending
  std::vector<double> time_s;
  std::vector<double> log_bytes = {}; ///< prepare()'s, as Curve's
  std::vector<double> log_time = {};
  std::vector<double> slope = {};
  [[nodiscard]] double at(double message_bytes) const;
  void prepare();
};

/// A dense GEMM of one scheme: t = floor + max(FLOPs / (compute(M) · peak), bytes / (stream ·
/// bandwidth)), M the rows (tokens) of one call.
struct GemmEfficiency {
  double floor_s = 0;
  double stream = 1; ///< of the datasheet bandwidth, weights streamed at small M
  Curve compute;     ///< of the dtype's datasheet peak, against M
};

/// The measured all-reduce of one group size: seconds against the buffer's bytes.
struct AllReduceTable {
  u64 gpus = 0;
  LatencyTable table;
};

/// One device's kernel and link efficiencies (docs/device-profile.md, `efficiency`).
struct EfficiencyProfile {
  std::string source; ///< where the figures come from, for people
  GemmEfficiency gemm_bf16;
  GemmEfficiency gemm_fp8;       ///< per-tensor scales, the activations quantized per call
  GemmEfficiency gemm_fp8_block; ///< 1×128 / 128×128 block scales (DeepGEMM class)
  /// The whole MoE module of a layer: its floor, its weight streaming, and its compute
  /// against one expert's intermediate width (fine-grained experts reach less).
  struct Grouped {
    double floor_s = 0;
    double stream = 1;
    Curve compute_bf16;
    Curve compute_fp8;
  } grouped;
  /// Decode attention (one query token a sequence) over a KV cache of one dtype: the floor,
  /// and the bandwidth beyond it against the KV bytes one call reads.
  struct DecodeAttention {
    double floor_s = 0;
    Curve bandwidth;
    double compute = 1;
  } decode_bf16, decode_fp8;
  /// MLA decode over the latent (FlashMLA class).
  struct MlaDecode {
    double floor_s = 0;
    double bandwidth = 1;
    double compute = 1;
  } mla_decode;
  /// Causal prefill attention: the floor, and compute against the sequence length.
  struct PrefillAttention {
    double floor_s = 0;
    Curve compute;
  } prefill_bf16, prefill_fp8;
  /// Norms, rotary, activations, cache writes: one floor a kernel, and the bandwidth.
  struct Elementwise {
    double floor_s = 0;
    double bandwidth = 1;
  } elementwise;
  std::vector<AllReduceTable> all_reduce_graph; ///< replayed in a CUDA graph (decode)
  std::vector<AllReduceTable> all_reduce_eager; ///< launched one by one (prefill)
  /// Fractions of each link's rate that collectives beyond the tables reach.
  struct Links {
    double scale_up = 1;
    double scale_out = 1;
    double dispatch = 1; ///< expert dispatch over the scale-up link
    double combine = 1;
  } links;
  double step_overhead_s = 0; ///< the engine's own time each step, not hidden by its scheduler

  /// Every curve and table prepared (Curve::prepare), for pricing many steps.
  void prepare();
};

/// Seconds of an all-reduce of `bytes` over `gpus` GPUs of one domain from `tables`: the
/// group's table, or log-log between the two group sizes around it; nullopt when `gpus` is
/// beyond the largest group measured.
[[nodiscard]] std::optional<double> all_reduce_time(const std::vector<AllReduceTable>& tables,
                                                    u64 gpus, double bytes);

} // namespace kvcalc::device
