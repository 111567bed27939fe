#pragma once
/// `kvcalc measure`: probes and MLA decode kernels on a backend (cpu, fake; cuda when built),
/// checked against a reference before they are timed, then turned into a device profile that
/// calibrates the roofline (docs/device-profile.md, docs/formulas.md §13).

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <kvcalc/roofline/roofline.hpp>

namespace kvcalc::measure {

/// One MLA decode configuration (DeepSeek dimensions).
struct MlaKernelConfig {
  u64 heads = 16;
  u64 batch = 4;
  u64 context = 2048;
  u64 query = 1;
};

/// FLOPs and bytes one MLA decode kernel moves, as the backend stores its data.
struct KernelCost {
  double flops = 0;
  double bytes = 0;
};

/// `naive` true: decompression per head with K and V written and read back (materialized).
[[nodiscard]] KernelCost mla_kernel_cost(const MlaKernelConfig& c, bool naive,
                                         double bytes_per_element);

/// Bytes a configuration's inputs occupy where its kernels run: the latent cache in whole
/// pages of 64 tokens and W_UK and W_UV at `bytes_per_element`, and the fp32 queries. In
/// floating point, so an absurd configuration cannot overflow the check it exists for.
[[nodiscard]] double mla_inputs_bytes(const MlaKernelConfig& c, double bytes_per_element);

/// Median seconds of one phase of a kernel ("attention", "decompress", ...), where the backend
/// times phases separately.
struct KernelPhase {
  std::string name;
  double time_s = 0;
};

struct KernelMeasurement {
  std::string name; ///< "mla_decode.absorbed", "mla_decode.naive"
  MlaKernelConfig config;
  double time_s = 0;
  std::vector<KernelPhase> phases;
  KernelCost cost;
  double achieved_bytes_per_s = 0;
  double achieved_flops_per_s = 0;
  double predicted_time_s = 0;  ///< max(FLOPs / measured GEMM rate, bytes / measured bandwidth)
  double roofline_fraction = 0; ///< predicted / measured
  double max_abs_error = 0;     ///< against the double reference
  double cos_diff = 0;
};

struct ProbeResults {
  double read_bytes_per_s = 0;
  double copy_bytes_per_s = 0;
  double triad_bytes_per_s = 0;
  /// The roofline's memory ceiling: the read probe. What the roofline times when memory-bound
  /// (decode, the absorbed kernel) reads memory; copy and triad add a write stream, which on
  /// some machines (a few CPU cores) moves more bytes per second than reads alone ever can.
  double bandwidth_bytes_per_s = 0;
  double fma_flops_per_s = 0; ///< fp32 FMA loop
  /// bf16 pair dot products into fp32 (a CPU with AVX512-BF16); none where not measured.
  std::optional<double> fma_bf16_flops_per_s;
  device::PeakFlops gemm_flops_per_s; ///< GEMM per dtype (fp32 on the CPU)
};

/// What one kernel run returned.
struct KernelRun {
  double time_s = 0;
  std::vector<KernelPhase> phases; ///< empty when the backend times the kernel as one piece
  double max_abs_error = 0;
  double cos_diff = 0;
};

class MeasureBackend {
public:
  virtual ~MeasureBackend() = default;
  [[nodiscard]] virtual std::string name() const = 0;
  [[nodiscard]] virtual std::string device() const = 0;
  [[nodiscard]] virtual unsigned threads() const = 0;
  [[nodiscard]] virtual double bytes_per_element() const = 0; ///< how it stores the cache
  /// Memory free for the kernels now: the host's available memory for a CPU (within its
  /// cgroup's limit), free device memory for a GPU.
  [[nodiscard]] virtual double memory_available_bytes() const = 0;
  /// Memory a configuration's kernels need there at most: their inputs (mla_inputs_bytes)
  /// and their working buffers.
  [[nodiscard]] virtual double memory_needed_bytes(const MlaKernelConfig& config) const = 0;
  [[nodiscard]] virtual ProbeResults probe(bool quick) = 0;
  /// Checks the kernel against the reference on these inputs (and naive against absorbed when
  /// the same configuration ran absorbed just before), then times it; a failed check throws
  /// Error.
  [[nodiscard]] virtual KernelRun run_mla(const MlaKernelConfig& config, bool naive,
                                          bool quick) = 0;
};

/// "cpu", "fake", "cuda", or "auto" (cuda when built and a GPU is present, else cpu).
[[nodiscard]] std::unique_ptr<MeasureBackend> make_measure_backend(std::string_view name);

/// Whether this build has the CUDA backend, and whether it sees a GPU now.
[[nodiscard]] bool cuda_backend_built();
[[nodiscard]] bool cuda_device_present();

struct MeasureOptions {
  std::vector<u64> heads; ///< empty: the backend's defaults
  std::vector<u64> batches;
  std::vector<u64> contexts;
  u64 query = 1;
  bool quick = false;
  std::function<void(const std::string&)> progress; ///< for people; may be empty
};

struct MeasureResult {
  std::string backend;
  std::string device;
  unsigned threads = 0;
  std::string date; ///< UTC, YYYY-MM-DD
  ProbeResults probes;
  std::vector<KernelMeasurement> kernels;
};

/// Checks that every configuration's inputs fit the backend's memory (an InputError naming
/// the first that does not), then probes and runs each configuration.
[[nodiscard]] MeasureResult run_measure(MeasureBackend& backend, const MeasureOptions& options);

/// The profile of a measurement (`file` names its origin), its details included.
[[nodiscard]] device::DeviceProfile to_device_profile(const MeasureResult& result,
                                                      std::string file);

} // namespace kvcalc::measure
