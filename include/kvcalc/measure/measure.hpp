#pragma once
/// `kvcalc measure`: probes and MLA decode kernels on a backend (cpu, fake; cuda when built),
/// checked against a reference before they are timed, then turned into a device profile that
/// calibrates the roofline (docs/device-profile.md, docs/formulas.md §11, "Measured ceilings and
/// kernel bounds").

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <kvcalc/kernels/cpu/probes.hpp>
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
  /// Of the absorbed kernel's FLOPs: the scores against the latent (q · [c; k_R], d_c + d_R
  /// wide) and the weighted sum of the latent (P · c, d_c wide); the rest are the projections
  /// (q · W_UK, o · W_UV). Zero for the naive kernel, whose FLOPs are all GEMMs.
  double score_flops = 0;
  double value_flops = 0;
};

/// One step of a kernel, run to its end before the next begins (a barrier between thread pool
/// tasks, a launch on a GPU stream): the bound of a kernel is the sum of its steps' bounds.
struct KernelStep {
  std::string name; ///< "q_absorb", "attention", "w_uv"; the naive kernel's one step "decode"
  KernelCost cost;
};

/// The steps of one MLA decode kernel, in order. Absorbed: q_absorb (q_nope · W_UK over the
/// batch: W_UK and the queries read), attention (scores and weighted sum over the latent cache),
/// w_uv (the latent output · W_UV: W_UV read, the output written). Naive: one step, since each
/// task decompresses a chunk and attends to it before the next. `naive` true: decompression per
/// head with K and V written and read back (materialized).
[[nodiscard]] std::vector<KernelStep> mla_kernel_steps(const MlaKernelConfig& c, bool naive,
                                                       double bytes_per_element);

/// The sum of mla_kernel_steps.
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

using kernels::Spread;

/// Runs of a figure disagree beyond this, (max − min) / median: 10%. Such a figure is flagged
/// in the table, the JSON and the profile (docs/device-profile.md).
inline constexpr double k_spread_bound = 0.10;

/// (max − min) / median; 0 for a single run.
[[nodiscard]] double relative_spread(const Spread& s);

/// Whether a figure's runs disagree beyond k_spread_bound.
[[nodiscard]] bool disagrees(const Spread& s);

struct KernelMeasurement {
  std::string name; ///< "mla_decode.absorbed", "mla_decode.naive"
  MlaKernelConfig config;
  Spread time_s; ///< of the timed runs
  std::vector<KernelPhase> phases;
  KernelCost cost;
  double achieved_bytes_per_s = 0;
  double achieved_flops_per_s = 0;
  /// Its inputs (mla_inputs_bytes), and the memory level they live in between runs: the
  /// innermost that holds them, or main memory where the backend flushes the caches first.
  double working_set_bytes = 0;
  std::string memory_level;
  double memory_bytes_per_s = 0; ///< that level's read rate
  double memory_time_s = 0;      ///< bytes at that rate
  double compute_time_s = 0;     ///< FLOPs at the ceilings of the instructions the kernel runs
  /// Σ over the kernel's steps (mla_kernel_steps) of the larger of each step's memory and compute
  /// time; memory_time_s and compute_time_s are the sums of the steps' own.
  double predicted_time_s = 0;
  std::string bound;            ///< "compute" or "memory": which sets most of predicted_time_s
  double roofline_fraction = 0; ///< predicted / measured
  double max_abs_error = 0;     ///< against the double reference
  double cos_diff = 0;
};

/// GEMM rates per input dtype, where measured.
struct GemmSpreads {
  std::optional<Spread> fp32;
  std::optional<Spread> fp16;
  std::optional<Spread> bf16;
};

/// One level of the memory hierarchy, measured by reading an array that fits it.
struct MemoryLevel {
  std::string name;             ///< "L2", "L3", "DRAM" on a CPU; "L2", "device memory" on a GPU
  double capacity_bytes = 0;    ///< what it holds for the threads measured; 0: main memory
  double working_set_bytes = 0; ///< the array its probe read
  Spread read_bytes_per_s;
  /// One instance serves every thread measured. A private level (a CPU's per-core L2) holds what
  /// its own core read last; the kernels hand out work to whichever thread is free, so a run
  /// finds its inputs there only by chance, and no kernel is placed in it.
  bool shared = true;
};

/// A compute ceiling measured at one of the kernels' shapes: its query rows per sequence
/// (heads × query).
struct RowsRate {
  u64 rows = 0;
  Spread flops_per_s;
};

struct ProbeResults {
  /// Innermost first; the last is main memory, its rate the read probe's.
  std::vector<MemoryLevel> levels;
  /// The innermost shared level whose capacity holds `bytes`; main memory where none does.
  [[nodiscard]] const MemoryLevel& level_holding(double bytes) const;

  Spread read_bytes_per_s;
  Spread copy_bytes_per_s;
  Spread triad_bytes_per_s;
  /// The roofline's memory ceiling: the read probe. What the roofline times when memory-bound
  /// (decode, the absorbed kernel) reads memory; copy and triad add a write stream, which on
  /// some machines (a few CPU cores) moves more bytes per second than reads alone ever can.
  double bandwidth_bytes_per_s = 0;
  Spread fma_flops_per_s; ///< fp32 FMA loop
  /// bf16 pair dot products into fp32 (a CPU with AVX512-BF16); none where not measured.
  std::optional<Spread> fma_bf16_flops_per_s;
  GemmSpreads gemm; ///< GEMM per dtype (fp32 on the CPU), at a square shape: the profile's
  /// fp32 GEMM at the shape of the naive kernel's own products (a chunk of latent rows times one
  /// head's weight), where the backend runs them itself (cpu); its bound is the faster of this
  /// and gemm.fp32.
  std::optional<Spread> kernel_gemm_fp32;
  /// The absorbed kernel's attention over one page held in the caches, at each row count the
  /// kernels run (kernels::measure_absorbed_page_flops), where the backend runs it itself (cpu):
  /// the in-core ceiling of its scores and weighted sum. Ascending rows.
  std::vector<RowsRate> absorbed_page_flops_per_s;
  /// The rate at `rows`; none where not measured.
  [[nodiscard]] std::optional<Spread> absorbed_page_at(u64 rows) const;

  /// The GEMM medians: the roofline's compute ceilings.
  [[nodiscard]] device::PeakFlops gemm_flops_per_s() const;
  /// Every figure by its profile key ("read_bytes_per_s", "gemm_bf16_flops_per_s", ...).
  [[nodiscard]] std::vector<std::pair<std::string, Spread>> figures() const;
};

/// One timed GEMM of a sweep: A (m × k) times the weights Bᵀ (n × k), in `dtype`, the weights
/// read from main memory each call.
struct TimedGemm {
  std::string dtype; ///< "bf16", "fp32"
  u64 m = 0;
  u64 n = 0;
  u64 k = 0;
  double element_bytes = 2;
  double calls = 1; ///< products run at once (a CPU: one a thread), each m × n × k
  Spread time_s;
  [[nodiscard]] double flops() const;
  [[nodiscard]] double bytes() const; ///< weights, inputs and outputs of every product
};

/// A sweep's GEMMs in `dtype`, `calls` products at once: one row over square weights of each of
/// `sizes` (n = k: the floor and the streaming rate), then each of `rows` over the largest (the
/// compute curve), each timed by `time`.
[[nodiscard]] std::vector<TimedGemm>
sweep_gemms(const std::string& dtype, double element_bytes, double calls,
            const std::vector<u64>& sizes, const std::vector<u64>& rows,
            const std::function<Spread(const TimedGemm&)>& time);

/// One timed pass reading `bytes` once, as a norm or an activation does.
struct TimedPass {
  double bytes = 0;
  Spread time_s;
};

/// The sweeps behind a profile's efficiency curves (docs/device-profile.md): GEMMs over M and
/// over the weights' size, and passes over memory from a few KiB to well beyond the caches.
struct EfficiencySweeps {
  std::vector<TimedGemm> gemm;
  std::vector<TimedPass> passes;
  [[nodiscard]] bool empty() const { return gemm.empty() && passes.empty(); }
};

/// What one kernel run returned.
struct KernelRun {
  Spread time_s;
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
  /// Probes every memory level (ProbeResults::levels, main memory last), the FMA loops and the
  /// GEMMs, at the shapes of `configs`' kernels where that matters.
  [[nodiscard]] virtual ProbeResults probe(bool quick,
                                           const std::vector<MlaKernelConfig>& configs) = 0;
  /// Whether the caches are flushed before every timed kernel run (a GPU's L2): the kernels'
  /// inputs are then read from main memory whatever their size.
  [[nodiscard]] virtual bool flushes_caches() const { return false; }
  /// Seconds the kernel's FLOPs take at the ceilings of what it runs them on: by default every
  /// FLOP at the GEMM rate (bf16 where measured, else fp32).
  [[nodiscard]] virtual double compute_seconds(const MlaKernelConfig& config,
                                               const KernelCost& cost, bool naive,
                                               const ProbeResults& probes) const;
  /// Checks the kernel against the reference on these inputs (and naive against absorbed when
  /// the same configuration ran absorbed just before), then times it; a failed check throws
  /// Error.
  [[nodiscard]] virtual KernelRun run_mla(const MlaKernelConfig& config, bool naive,
                                          bool quick) = 0;
  /// The GEMM and memory-pass sweeps of the efficiency curves; none where the backend runs
  /// none.
  [[nodiscard]] virtual EfficiencySweeps sweep(bool /*quick*/) { return {}; }
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
  EfficiencySweeps sweeps;
};

/// Checks that every configuration's inputs fit the backend's memory (an InputError naming
/// the first that does not), then probes and runs each configuration.
[[nodiscard]] MeasureResult run_measure(MeasureBackend& backend, const MeasureOptions& options);

/// A GEMM's efficiency from its sweep (`calls` of one dtype): the floor and the streaming
/// fraction from the calls of at most 16 rows, the least-squares line of time against bytes
/// (its intercept the floor, its slope 1 / (stream × bandwidth)); the compute curve from the
/// calls of at least 256 rows that took a quarter longer than streaming their bytes, FLOPs /
/// ((time − floor) × peak) at each row count (the median over shapes). None without two small
/// calls of different sizes on a rising line, or without a compute-bound call.
[[nodiscard]] std::optional<device::GemmEfficiency> fit_gemm(const std::vector<TimedGemm>& calls,
                                                             double peak, double bandwidth);

/// Elementwise kernels from memory passes: the least-squares line of time against bytes, its
/// intercept the floor and its slope 1 / (efficiency × bandwidth). None with fewer than two
/// sizes on a rising line.
[[nodiscard]] std::optional<device::EfficiencyProfile::Elementwise>
fit_passes(const std::vector<TimedPass>& passes, double bandwidth);

/// MLA decode from the absorbed kernels measured: the least-squares line of time against bytes
/// over the memory-bound configurations (floor, bandwidth), and the highest FLOP rate any
/// reached over `peak`. None with fewer than two memory-bound configurations of different sizes.
[[nodiscard]] std::optional<device::EfficiencyProfile::MlaDecode>
fit_mla_decode(const std::vector<KernelMeasurement>& kernels, double bandwidth, double peak);

/// The efficiency section of a measurement against `datasheet` (the catalog entry of the GPU
/// measured; a CPU's own measured ceilings): each class its sweeps measured, fitted; the
/// others from `fallback` (the device's typical profile, named `fallback_name`) or, without
/// one, at the bound (floor 0, efficiency 1). `source` says which is which.
[[nodiscard]] device::EfficiencyProfile
measured_efficiency(const MeasureResult& result, const device::Gpu& datasheet,
                    const device::EfficiencyProfile* fallback, const std::string& fallback_name);

/// The profile of a measurement (`file` names its origin), its details included.
[[nodiscard]] device::DeviceProfile to_device_profile(const MeasureResult& result,
                                                      std::string file);

} // namespace kvcalc::measure
