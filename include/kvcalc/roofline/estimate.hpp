#pragma once
/// The estimate: each op priced by what its kernels reach on the device (a profile's
/// efficiency curves, docs/device-profile.md) rather than at the datasheet's ceilings
/// (docs/formulas.md, "Estimate"). The roofline prices every op both ways; the bound is the
/// datasheet's, the estimate what a deployment should see.

#include <algorithm>
#include <array>
#include <cstddef>
#include <memory>
#include <string>

#include <kvcalc/core/dtype.hpp>
#include <kvcalc/device/gpu.hpp>
#include <kvcalc/device/profile.hpp>
#include <kvcalc/roofline/collective.hpp>

namespace kvcalc::roofline {

struct AttentionSums;

/// The kind of kernel an op runs, which decides the curves that price it.
enum class KernelClass {
  gemm,          ///< a dense matmul over the step's tokens (rows = M)
  grouped_gemm,  ///< a layer's MoE module (rows = one expert's intermediate width)
  attention,     ///< decode attention over the cache, prefill attention over the prompt
  mla_attention, ///< MLA attention over the latent (FlashMLA class)
  elementwise,   ///< norms, rotary, cache writes, a recurrent scan
};

/// The kernels one op launches in a step.
struct Kernels {
  KernelClass kind = KernelClass::elementwise;
  double calls = 0; ///< launches of the op's kernel in the step (layers × kernels a layer)
  double rows = 0;  ///< gemm: tokens through one call (M); grouped_gemm: an expert's width
  bool block_scales = false;    ///< gemm in fp8: weights with block scales (else per tensor)
  double elementwise_calls = 0; ///< elementwise kernels the op launches besides (activations)
  const AttentionSums* sums = nullptr; ///< attention: what its sequences attend, prefill apart
  DType kv = DType::bf16;              ///< attention: the cache's dtype
};

/// The last points read off a step's curves: the ops of one step read the same curve at the
/// same shape again and again (every projection at the step's tokens), so a sink that prices a
/// step keeps one, and each curve is read once a shape.
class CurveMemo {
public:
  [[nodiscard]] double at(const device::Curve& curve, double x);

private:
  struct Entry {
    const device::Curve* curve = nullptr;
    double x = 0;
    double y = 0;
  };
  std::array<Entry, 4> m_entries{};
  std::size_t m_next = 0;
};

/// Prices ops and collectives with one device's efficiency curves against its datasheet.
class Estimator {
public:
  /// `gpu`'s datasheet ceilings with `profile`'s efficiencies; `source` names them for people.
  Estimator(device::EfficiencyProfile profile, const device::Gpu& gpu, std::string source);

  /// Seconds of an op on one GPU: per class, calls × floor + max(FLOPs / (η_c · peak), bytes
  /// / (η_bw · bandwidth)); attention prices its decode and prefill sequences apart.
  /// `memo`, when given, remembers the curves' points for the step's other ops.
  [[nodiscard]] double op_s(const Kernels& k, DType math, double flops, double weights,
                            double activations, double kv, CurveMemo* memo = nullptr) const;
  /// Seconds of one collective: an all-reduce inside a domain from the measured tables
  /// (`graph`: replayed in a CUDA graph), anything else at its links' measured efficiency.
  [[nodiscard]] double collective_s(const Collective& c, const Topology& links, bool graph) const;
  /// The engine's own time each step.
  [[nodiscard]] double step_overhead_s() const { return m_profile.step_overhead_s; }
  [[nodiscard]] const std::string& source() const { return m_source; }
  [[nodiscard]] const device::EfficiencyProfile& profile() const { return m_profile; }

private:
  [[nodiscard]] double peak(DType math) const;
  [[nodiscard]] static double read(const device::Curve& curve, double x, CurveMemo* memo);
  /// The dtypes that run on the bf16 curves (16 bits or wider), and fp8.
  [[nodiscard]] static bool is_wide(DType t) {
    return t == DType::bf16 || t == DType::fp16 || t == DType::fp32;
  }
  [[nodiscard]] static bool is_fp8(DType t) { return t == DType::fp8_e4m3 || t == DType::fp8_e5m2; }
  [[nodiscard]] double gemm_s(const Kernels& k, DType math, double flops, double bytes,
                              CurveMemo* memo) const;
  [[nodiscard]] double attention_s(const Kernels& k, DType math, double flops, double weights,
                                   double activations, double kv, CurveMemo* memo) const;

  device::EfficiencyProfile m_profile;
  double m_bandwidth = 0;
  device::PeakFlops m_peaks;
  /// The datasheet peak of each DType (mxfp4 the last), worked out once.
  std::array<double, static_cast<std::size_t>(DType::mxfp4) + 1> m_peak_of{};
  std::string m_source;
};

// The per-op pricing, inline: the simulator prices every op of every step through it.

inline double CurveMemo::at(const device::Curve& curve, double x) {
  for (const Entry& e : m_entries) {
    if (e.curve == &curve && e.x == x) {
      return e.y;
    }
  }
  Entry& e = m_entries[m_next];
  m_next = (m_next + 1) % m_entries.size();
  e = {&curve, x, curve.at(x)};
  return e.y;
}

inline double Estimator::read(const device::Curve& curve, double x, CurveMemo* memo) {
  return memo ? memo->at(curve, x) : curve.at(x);
}

inline double Estimator::peak(DType math) const {
  return m_peak_of[static_cast<std::size_t>(math)];
}

inline double Estimator::gemm_s(const Kernels& k, DType math, double flops, double bytes,
                                CurveMemo* memo) const {
  // 16-bit math on the bf16 curve; fp8 by its scales; the other narrow types (int8, fp4) are
  // block- or row-scaled like fp8 with block scales, and take that curve at their own peak.
  const device::GemmEfficiency& g = is_wide(math)                     ? m_profile.gemm_bf16
                                    : is_fp8(math) && !k.block_scales ? m_profile.gemm_fp8
                                                                      : m_profile.gemm_fp8_block;
  double p = peak(math);
  double compute = p > 0 ? flops / (read(g.compute, std::max(k.rows, 1.0), memo) * p) : 0;
  double memory = bytes / (g.stream * m_bandwidth);
  return k.calls * g.floor_s + std::max(compute, memory) +
         k.elementwise_calls * m_profile.elementwise.floor_s;
}

inline double Estimator::op_s(const Kernels& k, DType math, double flops, double weights,
                              double activations, double kv, CurveMemo* memo) const {
  double bytes = weights + activations + kv;
  double p = peak(math);
  switch (k.kind) {
  case KernelClass::gemm:
    return gemm_s(k, math, flops, bytes, memo);
  case KernelClass::grouped_gemm: {
    const auto& g = m_profile.grouped;
    const device::Curve& c = is_wide(math) ? g.compute_bf16 : g.compute_fp8;
    double compute = p > 0 ? flops / (read(c, std::max(k.rows, 1.0), memo) * p) : 0;
    return k.calls * g.floor_s + std::max(compute, bytes / (g.stream * m_bandwidth));
  }
  case KernelClass::attention:
    return attention_s(k, math, flops, weights, activations, kv, memo);
  case KernelClass::mla_attention: {
    const auto& a = m_profile.mla_decode;
    double compute = p > 0 ? flops / (a.compute * p) : 0;
    return k.calls * a.floor_s + std::max(compute, bytes / (a.bandwidth * m_bandwidth));
  }
  case KernelClass::elementwise: {
    const auto& e = m_profile.elementwise;
    double compute = p > 0 ? flops / p : 0;
    return k.calls * e.floor_s + std::max(compute, bytes / (e.bandwidth * m_bandwidth));
  }
  }
  return 0;
}

/// The estimator for `gpu`: `measured`'s efficiencies when the profile has them, else the
/// typical profile of the GPU's kind; none (null) when no measurement covers the GPU, with
/// `note` saying so.
struct EstimateChoice {
  std::shared_ptr<const Estimator> estimator;
  std::string note; ///< where the estimate comes from, or why there is none
};
[[nodiscard]] EstimateChoice choose_estimator(const device::Gpu& gpu,
                                              const device::DeviceProfile* measured);

} // namespace kvcalc::roofline
