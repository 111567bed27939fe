#pragma once
// The CUDA micro-kernels behind `kvcalc measure --backend cuda`: probes and MLA decode in both
// strategies. Declared with no CUDA types so plain C++ can call them; every CUDA and cuBLAS
// call inside is checked and a failure throws std::runtime_error naming the call.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <kvcalc/kernels/cpu/mla_decode.hpp>
#include <kvcalc/kernels/cpu/probes.hpp>

namespace kvcalc::kernels::cuda {

/// Devices the runtime sees; 0 when there is no driver or no GPU (never throws).
[[nodiscard]] int device_count() noexcept;

/// cuBLAS is opened on first use, not linked (cublas_on_demand.cpp), so a kvcalc that measures
/// no GPU never loads it. open_cublas() opens it now and throws std::runtime_error with the
/// dynamic loader's reason when it cannot; cublas_library() names the file it looks for
/// ("libcublas.so.13"). Until it is open, every cuBLAS call returns
/// CUBLAS_STATUS_NOT_INITIALIZED.
void open_cublas();
[[nodiscard]] std::string cublas_library();

/// What `kvcalc measure` records about the GPU it measured (device 0).
struct DeviceInfo {
  std::string name;
  int sm_count = 0;
  int compute_major = 0;
  int compute_minor = 0;
  std::uint64_t memory_bytes = 0;
  std::uint64_t l2_bytes = 0;
  double sm_clock_hz = 0;     ///< the maximum the driver reports
  double memory_clock_hz = 0; ///< likewise
  int memory_bus_bits = 0;
  std::string driver_version;  ///< "13.0"
  std::string runtime_version; ///< the CUDA runtime built in
};
[[nodiscard]] DeviceInfo device_info();

/// Device memory free now (device 0).
[[nodiscard]] std::uint64_t device_free_bytes();

/// STREAM-style read (sum), copy and triad over float4 arrays of `bytes_per_array` in device
/// memory; the median of `repeats` timed passes after a warm-up, bytes read + written counted.
[[nodiscard]] BandwidthResult measure_bandwidth(std::uint64_t bytes_per_array, unsigned repeats);

/// Read rate of an array of `bytes` in device memory summed over and over in each timed launch
/// (4 GiB a launch): with an array that fits the L2, the L2's read rate. Over `repeats` launches
/// after a warm-up.
[[nodiscard]] Spread measure_read_bandwidth(std::uint64_t bytes, unsigned repeats);

/// FP32 FLOP/s of independent FMA chains in registers over the whole GPU, over `repeats` runs.
[[nodiscard]] Spread measure_fma_flops(unsigned repeats);

/// cuBLAS n × n × n GEMM rates on random data, 2·n³ FLOPs, over `repeats` runs.
struct GemmRates {
  Spread bf16; ///< bf16 inputs, fp32 accumulate (tensor cores)
  Spread fp16; ///< fp16 inputs, fp32 accumulate (tensor cores)
  Spread fp32; ///< SGEMM without TF32
};
[[nodiscard]] GemmRates measure_gemm_flops(std::uint64_t n, unsigned repeats);

/// Seconds of one cuBLAS bf16 GEMM (fp32 accumulate) of m rows against n × k weights, each
/// call reading its own copy of the weights from device memory (copies fill twice `l2_bytes`),
/// over `repeats` calls after a warm-up.
[[nodiscard]] Spread time_gemm_bf16(std::uint64_t m, std::uint64_t n, std::uint64_t k,
                                    unsigned repeats, std::uint64_t l2_bytes);

/// Seconds of one named phase of a kernel run, measured with CUDA events.
struct PhaseTime {
  std::string name;
  double seconds = 0;
};

/// One timed run: each phase, and the whole from first to last event.
struct MlaRunTimes {
  std::vector<PhaseTime> phases;
  double total_s = 0;
};

/// The absorbed path's attention kernel. `mma_sync`: warp-level tensor-core MMA, any GPU this
/// build targets. `wgmma`: Hopper's warpgroup MMA (sm_90a), 64 query rows per CTA.
enum class AbsorbedKernel { mma_sync, wgmma };

/// One MLA decode problem resident on the GPU: bf16 inputs generated in place from `seed`
/// (mla_values.hpp), a randomly permuted block table, NaN-filled page tails, and the
/// workspaces both strategies need.
///
/// `absorbed`: q_nope·W_UK (cuBLAS), a fused split-KV attention over the 576-wide latent on
/// tensor cores (bf16 in, fp32 accumulate, online softmax), a combine step over the splits,
/// and W_UV (cuBLAS). `naive`: gather the paged latent, decompress it into per-head K and V
/// (cuBLAS), scores (cuBLAS), softmax, P·V (cuBLAS); sequences go in chunks that fit the
/// workspace.
class MlaDecodeCuda {
public:
  /// Device memory the constructor needs for `shape`: inputs, the absorbed path's buffers at
  /// the largest split count, and the naive workspace at its smallest (one sequence), in
  /// floating point so no shape overflows it. It is what the constructor takes for one
  /// sequence; for more, the naive workspace holds as many as a quarter of the memory then free
  /// (16 GiB at most) allows, so it may take more than this, never less memory than is free.
  [[nodiscard]] static double device_bytes(const MlaShape& shape);

  /// Whether device 0 can run AbsorbedKernel::wgmma: a compute capability 9.0 GPU running code
  /// this build compiled for sm_90a.
  [[nodiscard]] static bool wgmma_supported();

  /// `splits`: KV splits of the absorbed kernel; 0 chooses them for the GPU (whole waves, at
  /// least 128 tokens each). 1 to 64 asks for about that many, for tuning: the tiles go in runs
  /// of ceil(tiles / splits), so ceil(tiles / ceil(tiles / splits)) run, never more than asked
  /// (splits() says). Throws std::invalid_argument for a shape the kernels are not built
  /// for, a split count out of range, or `wgmma` where wgmma_supported() is false.
  MlaDecodeCuda(const MlaShape& shape, std::uint64_t seed,
                AbsorbedKernel kernel = AbsorbedKernel::mma_sync, int splits = 0);
  ~MlaDecodeCuda();
  MlaDecodeCuda(const MlaDecodeCuda&) = delete;
  MlaDecodeCuda& operator=(const MlaDecodeCuda&) = delete;

  /// The first sequence's inputs on the host, identical to what the GPU holds (batch 1, its
  /// pages in order), for mla_decode_reference.
  [[nodiscard]] MlaInputs first_sequence() const;

  /// Runs one strategy once. With `flush_l2` the L2 is overwritten first (not timed).
  MlaRunTimes run(bool naive, bool flush_l2);

  /// The last run's output [batch][query][heads][d_v] as floats (NaN-poisoned before each run,
  /// so an unwritten element shows).
  [[nodiscard]] std::vector<float> output() const;

  /// Splits of the KV sequence the absorbed kernel uses for this shape.
  [[nodiscard]] int splits() const;

private:
  struct State;
  std::unique_ptr<State> m_state;
};

} // namespace kvcalc::kernels::cuda
