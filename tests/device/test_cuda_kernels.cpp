// The CUDA kernels against the double reference, on small shapes that cover every code path:
// one, two and four row groups (and, on Hopper, the wgmma kernel's row blocks of 64), padded
// query rows, several KV splits (chosen, and asked for as the bench's sweep asks), partial tiles
// and pages, MTP (query 2), and the cuda measure backend end to end.

#include <catch2/catch.hpp>

#include <cmath>
#include <stdexcept>

#include <kvcalc/kernels/cpu/mla_decode.hpp>
#include <kvcalc/kernels/cuda/cuda_kernels.hpp>

#include <kvcalc/measure/measure.hpp>

using namespace kvcalc::kernels;
using namespace kvcalc::measure;

namespace {

MlaShape shape(std::uint64_t batch, std::uint64_t heads, std::uint64_t query,
               std::uint64_t context) {
  MlaShape s;
  s.batch = batch;
  s.heads = heads;
  s.query = query;
  s.context = context;
  return s;
}

bool all_finite(const std::vector<float>& v) {
  for (float x : v) {
    if (!std::isfinite(x)) {
      return false;
    }
  }
  return true;
}

/// Whether this GPU and build can run the wgmma kernel; says so where not.
bool wgmma_here() {
  if (cuda::MlaDecodeCuda::wgmma_supported()) {
    return true;
  }
  WARN("the wgmma kernel is not checked here: it needs a compute capability 9.0 GPU and "
       "sm_90a code in the build");
  return false;
}

/// Both strategies against the double reference, and against each other over every sequence.
void check_against_reference(cuda::AbsorbedKernel kernel) {
  for (MlaShape s : {shape(3, 16, 1, 100),     // one row group, a partial tile and page
                     shape(2, 20, 1, 65),      // two row groups, padded rows, a token past a page
                     shape(2, 128, 2, 1000),   // four row groups over four row blocks, MTP
                     shape(1, 1, 1, 33),       // one head: 15 (wgmma: 63) padded rows
                     shape(3, 96, 1, 200),     // wgmma: a full and a half row block
                     shape(4, 64, 1, 4096)}) { // many tiles: several KV splits
    INFO("batch " << s.batch << " heads " << s.heads << " query " << s.query << " context "
                  << s.context);
    cuda::MlaDecodeCuda problem(s, 7, kernel);
    std::vector<double> ref = mla_decode_reference(problem.first_sequence(), 1);
    INFO("splits " << problem.splits());
    (void)problem.run(false, true);
    std::vector<float> absorbed = problem.output();
    REQUIRE(absorbed.size() == s.batch * s.query * s.heads * 128);
    CHECK(all_finite(absorbed));
    Agreement a = compare(absorbed, ref);
    INFO("absorbed against the reference: " << describe_misses(absorbed, ref, s));
    CHECK(a.finite);
    CHECK(a.cos_diff <= 1e-5);
    CHECK(a.elements_over_bar == 0);

    cuda::MlaRunTimes times = problem.run(true, false);
    std::vector<float> naive = problem.output();
    CHECK(all_finite(naive));
    Agreement n = compare(naive, ref);
    INFO("naive against the reference: " << describe_misses(naive, ref, s));
    CHECK(n.cos_diff <= 1e-5);
    CHECK(n.elements_over_bar == 0);
    // Every sequence, not only the reference's first.
    // Each is within the bars of the reference, so the two may differ by twice them.
    const std::vector<double> absorbed_all(absorbed.begin(), absorbed.end());
    Agreement both = compare(naive, absorbed_all, 2 * k_abs_bar, 2 * k_rel_bar);
    INFO("naive against absorbed: " << describe_misses(naive, absorbed_all, s, 2 * k_abs_bar,
                                                       2 * k_rel_bar));
    CHECK(both.cos_diff <= 2e-5);
    CHECK(both.elements_over_bar == 0);
    CHECK(times.total_s > 0);
    CHECK(times.phases.size() == 5);
  }
}

/// Split counts asked for, as the bench's sweep asks them: one split, counts that run as asked
/// and one that rounds down, one per tile. Each against the reference, and against the split
/// rule's output over every sequence.
void check_asked_splits(cuda::AbsorbedKernel kernel) {
  const MlaShape s = shape(2, 16, 1, 1000);
  cuda::MlaDecodeCuda chosen(s, 5, kernel);
  std::vector<double> ref = mla_decode_reference(chosen.first_sequence(), 1);
  (void)chosen.run(false, true);
  const std::vector<float> rule_out = chosen.output();
  const std::vector<double> rule(rule_out.begin(), rule_out.end());
  const int tile = kernel == cuda::AbsorbedKernel::wgmma ? 64 : 32;
  const int tiles = (1000 + tile - 1) / tile; // 32 of mma_sync's, 16 of wgmma's
  for (int asked : {1, 3, 10, 64}) {
    INFO("splits asked " << asked);
    cuda::MlaDecodeCuda problem(s, 5, kernel, asked);
    // Runs of ceil(tiles / asked) tiles: 10 asked of 32 tiles run 8 (runs of 4), of 16 run 8.
    const int run = (tiles + asked - 1) / asked;
    CHECK(problem.splits() == (tiles + run - 1) / run);
    CHECK(problem.splits() <= asked);
    (void)problem.run(false, true);
    std::vector<float> out = problem.output();
    INFO("against the reference: " << describe_misses(out, ref, s));
    Agreement a = compare(out, ref);
    CHECK(a.finite);
    CHECK(a.cos_diff <= 1e-5);
    CHECK(a.elements_over_bar == 0);
    INFO("against the split rule: " << describe_misses(out, rule, s, 2 * k_abs_bar, 2 * k_rel_bar));
    Agreement both = compare(out, rule, 2 * k_abs_bar, 2 * k_rel_bar);
    CHECK(both.cos_diff <= 2e-5);
    CHECK(both.elements_over_bar == 0);
  }
}

/// The measure backend refuses a configuration by device_bytes before allocating anything, so
/// it must not be below what the constructor needs. With one sequence that is what it takes
/// (with more, the naive workspace grows into free memory, by design).
void check_device_bytes(cuda::AbsorbedKernel kernel) {
  for (MlaShape s : {shape(1, 16, 1, 4096), shape(1, 128, 2, 1000), shape(1, 128, 1, 32768)}) {
    INFO("batch " << s.batch << " heads " << s.heads << " context " << s.context);
    std::uint64_t before = cuda::device_free_bytes();
    cuda::MlaDecodeCuda problem(s, 3, kernel);
    std::uint64_t taken = before - cuda::device_free_bytes();
    // The slack: cuBLAS's handle and allocation granularity.
    CHECK(static_cast<double>(taken) <= cuda::MlaDecodeCuda::device_bytes(s) + (64 << 20));
  }
}

} // namespace

// The wgmma kernel's cases carry the tag [wgmma]: device_check.sh runs them in a process of
// their own, so a fault there cannot take the other cases' CUDA context with it.

TEST_CASE("CUDA MLA decode: absorbed and naive match the double reference", "[cuda][mla]") {
  check_against_reference(cuda::AbsorbedKernel::mma_sync);
}

TEST_CASE("CUDA MLA decode (wgmma): absorbed and naive match the double reference",
          "[cuda][mla][wgmma]") {
  if (wgmma_here()) {
    check_against_reference(cuda::AbsorbedKernel::wgmma);
  }
}

TEST_CASE("CUDA MLA decode runs the wgmma kernel only where it can", "[cuda][mla][wgmma]") {
  MlaShape s = shape(1, 64, 1, 128);
  if (cuda::MlaDecodeCuda::wgmma_supported()) {
    CHECK_NOTHROW(cuda::MlaDecodeCuda(s, 1, cuda::AbsorbedKernel::wgmma));
    s.block = 32; // its tile is 64 tokens, which must lie in one page
    CHECK_THROWS_AS(cuda::MlaDecodeCuda(s, 1, cuda::AbsorbedKernel::wgmma), std::invalid_argument);
    CHECK_NOTHROW(cuda::MlaDecodeCuda(s, 1, cuda::AbsorbedKernel::mma_sync));
  } else {
    CHECK_THROWS_AS(cuda::MlaDecodeCuda(s, 1, cuda::AbsorbedKernel::wgmma), std::invalid_argument);
  }
}

TEST_CASE("CUDA MLA decode runs the KV splits it is asked for", "[cuda][mla]") {
  check_asked_splits(cuda::AbsorbedKernel::mma_sync);
}

TEST_CASE("CUDA MLA decode (wgmma) runs the KV splits it is asked for", "[cuda][mla][wgmma]") {
  if (wgmma_here()) {
    check_asked_splits(cuda::AbsorbedKernel::wgmma);
  }
}

TEST_CASE("CUDA MLA decode allocates no more than device_bytes says", "[cuda][mla]") {
  check_device_bytes(cuda::AbsorbedKernel::mma_sync);
}

TEST_CASE("CUDA MLA decode (wgmma) allocates no more than device_bytes says",
          "[cuda][mla][wgmma]") {
  if (wgmma_here()) {
    check_device_bytes(cuda::AbsorbedKernel::wgmma);
  }
}

TEST_CASE("CUDA MLA decode refuses shapes it was not built for", "[cuda][mla]") {
  MlaShape s = shape(1, 16, 1, 64);
  s.d_c = 256;
  CHECK_THROWS_AS(cuda::MlaDecodeCuda(s, 1), std::invalid_argument);
  CHECK_THROWS_AS(cuda::MlaDecodeCuda(shape(0, 16, 1, 64), 1), std::invalid_argument);
  for (int splits : {-1, 65}) {
    CHECK_THROWS_AS(
        cuda::MlaDecodeCuda(shape(1, 16, 1, 64), 1, cuda::AbsorbedKernel::mma_sync, splits),
        std::invalid_argument);
  }
}

TEST_CASE("CUDA probes give plausible ceilings", "[cuda][probes]") {
  cuda::DeviceInfo info = cuda::device_info();
  CHECK(info.sm_count > 0);
  CHECK(info.memory_bytes > (1ULL << 30));
  BandwidthResult bw = cuda::measure_bandwidth(256ULL << 20, 3);
  // 4 bytes of 1.0 per float: the read pass sums to the element count.
  CHECK(bw.checksum == Approx(static_cast<double>(256ULL << 20) / 4).epsilon(1e-3));
  CHECK(bw.copy_bytes_per_s.median > 1e11);
  CHECK(bw.copy_bytes_per_s.median < 2e13);
  CHECK(bw.copy_bytes_per_s.runs == 3);
  // Half the L2, summed over and over: faster than device memory, and not the L1's rate (an L2
  // reads at 2-4x device memory on the GPUs kvcalc knows).
  Spread l2 = cuda::measure_read_bandwidth(info.l2_bytes / 2, 3);
  CHECK(l2.runs == 3);
  CHECK(l2.median > bw.read_bytes_per_s.median);
  CHECK(l2.median < 6 * bw.read_bytes_per_s.median);
  cuda::GemmRates g = cuda::measure_gemm_flops(2048, 3);
  CHECK(g.bf16.median > 1e12);
  CHECK(g.bf16.median < 1e16);
  CHECK(g.bf16.min <= g.bf16.max);
  CHECK(cuda::measure_fma_flops(3).median > 1e11);
}

TEST_CASE("the cuda measure backend checks, times and reports phases", "[cuda][measure]") {
  auto backend = make_measure_backend("cuda");
  MeasureOptions o;
  o.quick = true;
  o.heads = {16};
  o.batches = {8};
  o.contexts = {1024};
  MeasureResult r = run_measure(*backend, o);
  REQUIRE(r.kernels.size() == 2);
  for (const auto& k : r.kernels) {
    CHECK(k.time_s.median > 0);
    CHECK(k.cos_diff <= 1e-5);
    CHECK_FALSE(k.phases.empty());
    // The L2 is flushed before every run: the kernels read device memory, small as they are.
    CHECK(k.memory_level == "device memory");
  }
  CHECK(r.probes.gemm.bf16.has_value());
  REQUIRE(r.probes.levels.size() == 2);
  CHECK(r.probes.levels[0].name == "L2");
  CHECK(r.probes.levels[1].read_bytes_per_s.median == r.probes.read_bytes_per_s.median);
}

TEST_CASE("the cuda backend's sweeps fit plausible efficiency curves", "[cuda][measure][sweep]") {
  auto backend = make_measure_backend("cuda");
  EfficiencySweeps s = backend->sweep(true);
  REQUIRE(s.gemm.size() == 8);
  REQUIRE(s.passes.size() == 2);
  // One row over weights four times larger each time: each call takes longer.
  for (std::size_t i = 1; i < 4; ++i) {
    CHECK(s.gemm[i].time_s.median > s.gemm[i - 1].time_s.median);
  }
  // Fractions of this GPU's own measured ceilings: a floor of a launch and a few waves, weights
  // streamed at a good share of the bandwidth, large GEMMs at a good share of the GEMM rate.
  ProbeResults p = backend->probe(true, {});
  REQUIRE(p.gemm.bf16.has_value());
  auto g = fit_gemm(s.gemm, p.gemm.bf16->median, p.read_bytes_per_s.median);
  REQUIRE(g.has_value());
  CHECK(g->floor_s > 5e-7);
  CHECK(g->floor_s < 5e-5);
  CHECK(g->stream > 0.4);
  REQUIRE(g->compute.x.size() == 3);
  CHECK(g->compute.y.back() > 0.5);
  auto e = fit_passes(s.passes, p.read_bytes_per_s.median);
  REQUIRE(e.has_value());
  CHECK(e->floor_s > 5e-7);
  CHECK(e->floor_s < 5e-5);
  CHECK(e->bandwidth > 0.5);
}
