#include <catch2/catch.hpp>

#include <kvcalc/measure/measure.hpp>

#include "../../src/measure/backends.hpp"

using namespace kvcalc;
using namespace kvcalc::measure;
using namespace kvcalc::device;

TEST_CASE("MLA kernel costs match the worked example of docs/formulas.md", "[measure]") {
  // DeepSeek dims, one head, 8 sequences of 4096 tokens, one query token, bf16.
  MlaKernelConfig c{1, 8, 4096, 1};
  KernelCost absorbed = mla_kernel_cost(c, false, 2);
  // Latent 8·4096·576·2 + W_UK and W_UV 512·256·2 + q and o 8·(128 + 64 + 128)·2.
  CHECK(absorbed.bytes == 38'016'000.0);
  // Q absorption 2·8·128·512, scores 2·8·4096·576, P·V 2·8·4096·512, W_UV 2·8·512·128.
  CHECK(absorbed.flops == 73'400'320.0);
  KernelCost naive = mla_kernel_cost(c, true, 2);
  // The same bytes plus the decompressed K and V written and read back: 2·8·4096·256·2.
  CHECK(naive.bytes == 71'570'432.0);
  // Decompression 2·8·4096·512·256, scores 2·8·4096·192, P·V 2·8·4096·128.
  CHECK(naive.flops == 8'610'906'112.0);

  // The absorbed kernel's three steps: q_absorb reads W_UK (512·128·2) and the queries
  // (8·192·2), attention the latent, w_uv W_UV and writes the output (8·128·2).
  std::vector<KernelStep> steps = mla_kernel_steps(c, false, 2);
  REQUIRE(steps.size() == 3);
  CHECK(steps[0].name == "q_absorb");
  CHECK(steps[0].cost.flops == 1'048'576.0);
  CHECK(steps[0].cost.bytes == 134'144.0);
  CHECK(steps[1].name == "attention");
  CHECK(steps[1].cost.flops == 71'303'168.0);
  CHECK(steps[1].cost.score_flops == 37'748'736.0);
  CHECK(steps[1].cost.bytes == 37'748'736.0);
  CHECK(steps[2].name == "w_uv");
  CHECK(steps[2].cost.flops == 1'048'576.0);
  CHECK(steps[2].cost.bytes == 133'120.0);
  // The naive kernel is one step, its whole cost.
  std::vector<KernelStep> one = mla_kernel_steps(c, true, 2);
  REQUIRE(one.size() == 1);
  CHECK(one[0].cost.flops == naive.flops);
  CHECK(one[0].cost.bytes == naive.bytes);
}

TEST_CASE("MLA inputs take whole pages of the cache, the weights and the fp32 queries",
          "[measure]") {
  // 8 · 64 pages · 64 · 576 · 2 + 512 · 256 · 2 + 8 · 1 · 1 · 192 · 4.
  CHECK(mla_inputs_bytes({1, 8, 4096, 1}, 2) == 38'017'024.0);
  // One token more opens a 65th page in each sequence: 8 · 64 · 576 · 2 more.
  CHECK(mla_inputs_bytes({1, 8, 4097, 1}, 2) == 38'017'024.0 + 589'824.0);
  // No overflow where a product in integers would wrap: 2^40 sequences of 2^40 tokens.
  double huge = mla_inputs_bytes({1, 1ULL << 40, 1ULL << 40, 1}, 2);
  CHECK(huge > 1e27);
}

TEST_CASE("the CPU backend needs the inputs and its kernels' working buffers", "[measure]") {
  auto cpu = make_measure_backend("cpu");
  MlaKernelConfig c{1, 8, 4096, 1};
  double threads = cpu->threads();
  // Naive (the larger here): fp32 W_UK and W_UV 1·256·512·4, and per thread a chunk of 1024
  // tokens of fp32 latent, K and V and one score row, 1024·(576 + 256 + 1)·4; then three kept
  // outputs of 8 rows of 128 fp32.
  double want = 38'017'024.0 + 524'288.0 + threads * 3'411'968.0 + 12'288.0;
  CHECK(cpu->memory_needed_bytes(c) == want);
  // At 128 heads the absorbed kernel's latent query and output still fall short of the naive
  // kernel's weights: 8·128·1088·4 = 4,456,448 against 128·256·512·4 = 67,108,864 and up.
  MlaKernelConfig wide{128, 8, 4096, 1};
  CHECK(cpu->memory_needed_bytes(wide) ==
        mla_inputs_bytes(wide, 2) + 67'108'864.0 + threads * 3'411'968.0 + 3 * 1024 * 128 * 4.0);
}

TEST_CASE("/proc/meminfo figures are read by their exact key", "[measure]") {
  auto total = meminfo_bytes("MemTotal");
  auto available = meminfo_bytes("MemAvailable");
  if (!total) {
    WARN("no /proc/meminfo here: not checked");
    return;
  }
  REQUIRE(available);
  CHECK(*total > (64ULL << 20));
  CHECK(*available <= *total);
  CHECK_FALSE(meminfo_bytes("Mem")); // a prefix of keys, not a key
  CHECK_FALSE(meminfo_bytes("NoSuchKey"));
}

TEST_CASE("a kernel that misses the bars is an error that says where", "[measure]") {
  MlaKernelConfig c;
  c.heads = 2;
  c.batch = 1;
  c.context = 64;
  std::vector<double> want(2 * 128, 0.5); // the first sequence: 2 heads × d_v 128
  std::vector<float> got(want.begin(), want.end());
  kernels::Agreement a =
      measure::detail::require_agreement("mla_decode.absorbed", c, got, want, "the reference");
  CHECK(a.elements_over_bar == 0);

  for (std::size_t col = 64; col < 128; ++col) { // head 1's second half
    got[128 + col] = -0.5f;
  }
  try {
    (void)measure::detail::require_agreement("mla_decode.absorbed", c, got, want, "the reference");
    FAIL("no error");
  } catch (const Error& e) {
    std::string what = e.what();
    INFO(what);
    CHECK(what.find("mla_decode.absorbed (heads 2, batch 1, context 64, query 1) disagrees with "
                    "the reference") != std::string::npos);
    CHECK(what.find("64 of 256 elements miss the bar (0 not finite): sequences all 1, query rows "
                    "all 1, heads 1 of 2, columns 64–127 of 128") != std::string::npos);
  }
  // Every element within its bar (0.007 < 0.0079) and the cosine difference over it:
  // 0.007² / 0.5 = 9.8e-5.
  for (std::size_t i = 0; i < got.size(); ++i) {
    got[i] = i % 2 == 0 ? 0.507f : 0.493f;
  }
  CHECK_THROWS_WITH(
      measure::detail::require_agreement("mla_decode.absorbed", c, got, want, "the reference"),
      Catch::Contains("cos diff 9.8e-05 (bar 1e-05), max |err| 0.007; every element is within "
                      "the per-element bar"));
  // Between strategies the bars are twice as wide: one element 0.01 off at 0.5 (rms 0.5)
  // passes there (0.0157 × 2 × 0.5) and not against the reference (0.0157 × 0.5 = 0.0079).
  got.assign(want.begin(), want.end());
  got[3] = 0.51f;
  CHECK_THROWS_AS(
      measure::detail::require_agreement("mla_decode.naive", c, got, want, "the reference"), Error);
  CHECK_NOTHROW(measure::detail::require_agreement("mla_decode.naive", c, got, want,
                                                   "mla_decode.absorbed",
                                                   measure::detail::k_between_strategies));
}

namespace {

/// `backend` measured at one configuration.
MeasureResult measure_at(MeasureBackend& backend, u64 heads, u64 batch, u64 context) {
  MeasureOptions options;
  options.heads = {heads};
  options.batches = {batch};
  options.contexts = {context};
  return run_measure(backend, options);
}

/// The fake backend at one configuration: 1 head, batch 8, 4,096 tokens.
MeasureResult fake_measurement() {
  auto backend = make_measure_backend("fake");
  return measure_at(*backend, 1, 8, 4096);
}

} // namespace

TEST_CASE("a kernel's bound is the sum of its steps' bounds", "[measure][levels]") {
  // 16 heads, batch 8, 4,096 tokens on the fake backend: inputs of 42 MB in DRAM at 100 GB/s,
  // every FLOP at its 2 TFLOP/s bf16 GEMM. q_absorb: 16,777,216 FLOP (8.39 µs) but 2,146,304 B
  // (21.46 µs); attention 1,140,850,688 FLOP (570.43 µs), 37,748,736 B (377.49 µs); w_uv
  // 16,777,216 FLOP (8.39 µs), 2,129,920 B (21.30 µs). The projections are memory-bound and
  // run before and after the attention, so the bound is 21.46 + 570.43 + 21.30 = 613.19 µs,
  // not the 587.20 µs of the whole kernel's compute.
  auto fake = make_measure_backend("fake");
  MeasureResult r = measure_at(*fake, 16, 8, 4096);
  REQUIRE(r.kernels.size() == 2);
  const KernelMeasurement& k = r.kernels[0];
  CHECK(k.memory_level == "DRAM");
  CHECK(k.predicted_time_s == Approx(613.187584e-6));
  CHECK(k.compute_time_s == Approx(587.20256e-6));
  CHECK(k.memory_time_s == Approx(420.2496e-6));
  CHECK(k.bound == "compute");
  // The fake plays a machine that runs each step at 1.25x its bound.
  CHECK(k.roofline_fraction == Approx(0.8));
  // One head: every step is memory-bound.
  MeasureResult one = measure_at(*fake, 1, 8, 4096);
  CHECK(one.kernels[0].bound == "memory");
  CHECK(one.kernels[0].predicted_time_s == Approx(one.kernels[0].memory_time_s));
}

TEST_CASE("the roofline bound of a kernel uses the read probe as its memory ceiling", "[measure]") {
  // The fake backend's copy and triad probes beat its read probe, as on a CPU with few cores;
  // the kernels only read, so their bound is the read rate.
  MeasureResult r = fake_measurement();
  REQUIRE(r.probes.copy_bytes_per_s.median > r.probes.read_bytes_per_s.median);
  CHECK(r.probes.bandwidth_bytes_per_s == r.probes.read_bytes_per_s.median);
  REQUIRE(r.kernels.size() == 2);
  const KernelMeasurement& absorbed = r.kernels[0];
  CHECK(absorbed.name == "mla_decode.absorbed");
  // Memory-bound: 38,016,000 B at the read rate, far above 73.4 MFLOP at the GEMM rate.
  CHECK(absorbed.predicted_time_s == Approx(38'016'000.0 / r.probes.read_bytes_per_s.median));
  // The fake backend times the absorbed kernel at 1.25x its bound at the read rate.
  CHECK(absorbed.roofline_fraction == Approx(0.8));
  // The profile `measure --out` writes carries the same ceiling, read back as the roofline does.
  DeviceProfile written =
      parse_device_profile(device_profile_yaml(to_device_profile(r, "fake.yaml")), "fake.yaml");
  CHECK(written.bandwidth_bytes_per_s == Approx(r.probes.read_bytes_per_s.median));
}

TEST_CASE("every measured figure keeps its runs' spread, flagged beyond the bound",
          "[measure][spread]") {
  Spread s = kernels::spread_of({3.0, 1.0, 2.0, 4.0});
  CHECK(s.median == 3.0); // the upper middle of an even count
  CHECK(s.min == 1.0);
  CHECK(s.max == 4.0);
  CHECK(s.runs == 4);
  CHECK(relative_spread(s) == Approx(1.0));
  // A rate's slowest run is its lowest.
  Spread rate = kernels::rate_of(8.0, kernels::spread_of({1.0, 2.0, 4.0}));
  CHECK(rate.median == 4.0);
  CHECK(rate.min == 2.0);
  CHECK(rate.max == 8.0);
  CHECK_FALSE(disagrees({1.0, 0.951, 1.049, 10}));
  CHECK(disagrees({1.0, 0.94, 1.05, 10}));
  CHECK_FALSE(disagrees({1.0, 1.0, 1.0, 1}));

  // The fake backend's copy probe and naive kernel disagree by 30%, the rest by 4%.
  MeasureResult r = fake_measurement();
  CHECK(disagrees(r.probes.copy_bytes_per_s));
  CHECK_FALSE(disagrees(r.probes.read_bytes_per_s));
  CHECK_FALSE(disagrees(r.kernels[0].time_s));
  CHECK(disagrees(r.kernels[1].time_s));
  // The profile records every figure's runs, and the bandwidth ceiling is the read median.
  DeviceProfile p = to_device_profile(r, "fake.yaml");
  CHECK_THAT(p.details_yaml, Catch::Contains("spread_bound: 0.1\n"));
  CHECK_THAT(p.details_yaml,
             Catch::Contains("copy_bytes_per_s: {median: 1.2e+11, min: 1.02e+11, max: 1.38e+11, "
                             "runs: 20, spread: 0.3, disagree: true}"));
  CHECK_THAT(p.details_yaml, Catch::Contains("read_bytes_per_s: {median: 1e+11, min: 9.8e+10, "
                                             "max: 1.02e+11, runs: 20, spread: 0.04, "
                                             "disagree: false}"));
  DeviceProfile back = parse_device_profile(device_profile_yaml(p), "fake.yaml");
  CHECK(back.bandwidth_bytes_per_s == Approx(1e11));
}

TEST_CASE("a kernel is bounded by the read rate of the level its inputs live in",
          "[measure][levels]") {
  ProbeResults p;
  p.levels = {{"L2", 4e6, 2e6, {4e11, 4e11, 4e11, 1}},
              {"L3", 32e6, 11e6, {2e11, 2e11, 2e11, 1}},
              {"DRAM", 0, 256e6, {1e11, 1e11, 1e11, 1}}};
  CHECK(p.level_holding(1).name == "L2");
  CHECK(p.level_holding(4e6).name == "L2"); // a level holds what fills it
  CHECK(p.level_holding(4e6 + 1).name == "L3");
  CHECK(p.level_holding(32e6).name == "L3");
  CHECK(p.level_holding(32e6 + 1).name == "DRAM");
  CHECK(p.level_holding(1e30).name == "DRAM");
  CHECK_THROWS_AS(ProbeResults{}.level_holding(1), Error);
  // A private level (one L2 per core) holds no kernel's inputs: work goes to any free thread.
  p.levels[0].shared = false;
  CHECK(p.level_holding(1).name == "L3");

  // The fake backend's private 4 MiB L2, shared 32 MiB L3 and DRAM at 400, 200 and 100 GB/s;
  // one head, so the absorbed kernel is memory-bound at each. Inputs (mla_inputs_bytes): batch
  // 1 × 1k, 1.44 MB, fits the L2 but it is private; batch 4 × 2k, 9.7 MB; batch 16 × 4k, 75.8 MB.
  auto backend = make_measure_backend("fake");
  auto level_of = [&](u64 batch, u64 context) {
    MeasureResult r = measure_at(*backend, 1, batch, context);
    REQUIRE(r.kernels.size() == 2);
    const KernelMeasurement& k = r.kernels[0];
    CHECK(k.working_set_bytes == mla_inputs_bytes(k.config, 2));
    CHECK(k.memory_time_s == Approx(k.cost.bytes / k.memory_bytes_per_s));
    CHECK(k.predicted_time_s == Approx(std::max(k.memory_time_s, k.compute_time_s)));
    CHECK(k.memory_time_s > k.compute_time_s);
    // The fake times it at 1.25x its bound at that level, so a right choice reads 80%.
    CHECK(k.roofline_fraction == Approx(0.8));
    return std::pair{k.memory_level, k.memory_bytes_per_s};
  };
  CHECK(level_of(1, 1024) == std::pair{std::string("L3"), 2e11});
  CHECK(level_of(4, 2048) == std::pair{std::string("L3"), 2e11});
  CHECK(level_of(16, 4096) == std::pair{std::string("DRAM"), 1e11});

  // The probe table's levels reach the profile with what each holds and read.
  DeviceProfile profile = to_device_profile(measure_at(*backend, 1, 1, 1024), "fake.yaml");
  CHECK_THAT(profile.details_yaml,
             Catch::Contains("memory_levels:\n  - {name: L2, capacity_bytes: 4.1943e+06, "
                             "shared: false, working_set_bytes: 2.09715e+06, read_bytes_per_s: "
                             "4e+11}\n"));
  CHECK_THAT(profile.details_yaml,
             Catch::Contains("  - {name: DRAM, capacity_bytes: null, shared: true, "
                             "working_set_bytes: 2.68435e+08, read_bytes_per_s: 1e+11}\n"));
  CHECK_THAT(profile.details_yaml, Catch::Contains("read_l2_bytes_per_s: {median: 4e+11"));
  CHECK_THAT(profile.details_yaml, Catch::Contains("memory_level: L3, "));
  CHECK(parse_device_profile(device_profile_yaml(profile), "fake.yaml").bandwidth_bytes_per_s ==
        Approx(1e11));
}

namespace {

/// The fake backend on another machine: one whose caches are flushed before every run, as the
/// cuda backend flushes the L2; one that speeds up while the kernels run, its second probe pass
/// reading and computing 1.5x faster than the first; or one whose L3 probe reads at `l3_scale`
/// of the fake's.
class VariedFake final : public MeasureBackend {
public:
  VariedFake(bool flushes, bool drifts, double l3_scale = 1)
      : m_fake(make_measure_backend("fake")), m_flushes(flushes), m_drifts(drifts),
        m_l3_scale(l3_scale) {}
  [[nodiscard]] std::string name() const override { return "fake"; }
  [[nodiscard]] std::string device() const override { return "varied fake"; }
  [[nodiscard]] unsigned threads() const override { return 1; }
  [[nodiscard]] double bytes_per_element() const override { return 2; }
  [[nodiscard]] double memory_available_bytes() const override { return 1e12; }
  [[nodiscard]] double memory_needed_bytes(const MlaKernelConfig& c) const override {
    return m_fake->memory_needed_bytes(c);
  }
  [[nodiscard]] ProbeResults probe(bool quick,
                                   const std::vector<MlaKernelConfig>& configs) override {
    ProbeResults p = m_fake->probe(quick, configs);
    // A page rate for each configuration's rows, as the CPU backend measures them.
    for (const MlaKernelConfig& c : configs) {
      p.absorbed_page_flops_per_s.push_back({c.heads * c.query, {1e12, 0.98e12, 1.02e12, 10}});
    }
    Spread& l3 = p.levels[1].read_bytes_per_s;
    l3 = {l3.median * m_l3_scale, l3.min * m_l3_scale, l3.max * m_l3_scale, l3.runs};
    if (m_drifts && ++m_passes == 2) {
      auto faster = [](Spread& s) { s = {s.median * 1.5, s.min * 1.5, s.max * 1.5, s.runs}; };
      faster(p.read_bytes_per_s);
      faster(*p.gemm.bf16);
      for (RowsRate& page : p.absorbed_page_flops_per_s) {
        faster(page.flops_per_s);
      }
      for (MemoryLevel& level : p.levels) {
        faster(level.read_bytes_per_s);
      }
    }
    return p;
  }
  [[nodiscard]] bool flushes_caches() const override { return m_flushes; }
  [[nodiscard]] KernelRun run_mla(const MlaKernelConfig& c, bool naive, bool quick) override {
    return m_fake->run_mla(c, naive, quick);
  }

private:
  std::unique_ptr<MeasureBackend> m_fake;
  bool m_flushes;
  bool m_drifts;
  double m_l3_scale;
  int m_passes = 0;
};

} // namespace

TEST_CASE("where the caches are flushed before each run, every kernel reads main memory",
          "[measure][levels]") {
  VariedFake backend(true, false);
  MeasureResult r = measure_at(backend, 1, 1, 1024);
  REQUIRE(r.kernels.size() == 2);
  CHECK(r.kernels[0].memory_level == "DRAM");
  CHECK(r.kernels[0].memory_bytes_per_s == 1e11);
  // The fake still ran it from its L3 (at 2x DRAM's rate): against main memory it reads 160%.
  CHECK(r.kernels[0].roofline_fraction == Approx(0.8 * 2));
}

TEST_CASE("a level's bound is never slower than main memory's", "[measure][levels]") {
  // The L3 probe read 50 GB/s, below DRAM's 100 (a noisy run): inputs in the L3 are bounded at
  // DRAM's rate, since DRAM could serve them at that.
  VariedFake backend(false, false, 0.25);
  MeasureResult r = measure_at(backend, 1, 4, 2048);
  REQUIRE(r.kernels.size() == 2);
  CHECK(r.probes.levels[1].read_bytes_per_s.median == Approx(5e10));
  CHECK(r.kernels[0].memory_level == "L3");
  CHECK(r.kernels[0].memory_bytes_per_s == Approx(1e11));
}

TEST_CASE("the CPU's kernels are timed at the ceilings of the instructions they run",
          "[measure][levels]") {
  // docs/formulas.md, "Measured ceilings and kernel bounds": one head, batch 8, 4,096 tokens.
  auto cpu = make_measure_backend("cpu");
  ProbeResults p;
  p.fma_flops_per_s = {250e9, 250e9, 250e9, 1};
  p.fma_bf16_flops_per_s = Spread{150e9, 150e9, 150e9, 1};
  p.gemm.fp32 = Spread{140e9, 140e9, 140e9, 10};
  p.kernel_gemm_fp32 = Spread{160e9, 160e9, 160e9, 10};
  p.absorbed_page_flops_per_s = {{1, Spread{60e9, 60e9, 60e9, 10}},
                                 {16, Spread{100e9, 100e9, 100e9, 10}}};
  MlaKernelConfig one{1, 8, 4096, 1};
  KernelCost absorbed = mla_kernel_cost(one, false, 2);
  CHECK(absorbed.score_flops == 37'748'736.0); // 2·8·4096·576
  CHECK(absorbed.value_flops == 33'554'432.0); // 2·8·4096·512
  // One query row per sequence: the scores and the weighted sum at the page probe's one-row
  // rate, the 2,097,152 projection FLOPs at the FMA loop's: 1.1883 + 0.0084 ms.
  CHECK(cpu->compute_seconds(one, absorbed, false, p) ==
        Approx(71'303'168.0 / 60e9 + 2'097'152.0 / 250e9));
  CHECK(cpu->compute_seconds(one, absorbed, false, p) == Approx(1.1967e-3).epsilon(0.001));
  // Sixteen heads: the sixteen-row rate. Rows are heads × query: 8 heads of 2 query tokens
  // are sixteen rows too.
  MlaKernelConfig sixteen{16, 8, 4096, 1};
  KernelCost wide = mla_kernel_cost(sixteen, false, 2);
  double attention = wide.score_flops + wide.value_flops;
  CHECK(cpu->compute_seconds(sixteen, wide, false, p) ==
        Approx(attention / 100e9 + (wide.flops - attention) / 250e9));
  MlaKernelConfig two_tokens{8, 8, 4096, 2};
  KernelCost speculative = mla_kernel_cost(two_tokens, false, 2);
  CHECK(speculative.score_flops == wide.score_flops);
  CHECK(cpu->compute_seconds(two_tokens, speculative, false, p) ==
        Approx(cpu->compute_seconds(sixteen, wide, false, p)));
  // A row count the page probe did not run: no bound, said so; its projection steps, which do
  // not use the page rate, still have theirs.
  MlaKernelConfig eight{8, 8, 4096, 1};
  KernelCost unprobed = mla_kernel_cost(eight, false, 2);
  CHECK_THROWS_WITH(cpu->compute_seconds(eight, unprobed, false, p),
                    Catch::Contains("absorbed kernel's page at 8 query rows"));
  KernelCost q_absorb = mla_kernel_steps(eight, false, 2)[0].cost;
  CHECK(cpu->compute_seconds(eight, q_absorb, false, p) == Approx(q_absorb.flops / 250e9));
  ProbeResults no_fma = p;
  no_fma.fma_flops_per_s = {};
  CHECK_THROWS_WITH(cpu->compute_seconds(one, absorbed, false, no_fma),
                    Catch::Contains("the FMA loop measured no rate"));
  // The naive kernel's FLOPs are GEMMs, at the faster of the square and the kernel-shaped probe.
  KernelCost naive = mla_kernel_cost(one, true, 2);
  CHECK(naive.score_flops == 0);
  CHECK(cpu->compute_seconds(one, naive, true, p) == Approx(8'610'906'112.0 / 160e9));
  p.gemm.fp32 = Spread{200e9, 200e9, 200e9, 10};
  CHECK(cpu->compute_seconds(one, naive, true, p) == Approx(8'610'906'112.0 / 200e9));
  // Every other backend: all FLOPs at the GEMM rate, bf16 where measured.
  auto fake = make_measure_backend("fake");
  p.gemm.bf16 = Spread{2e12, 2e12, 2e12, 10};
  CHECK(fake->compute_seconds(one, absorbed, false, p) == Approx(73'400'320.0 / 2e12));
}

TEST_CASE("the probes run before and after the kernels, the faster pass the ceiling",
          "[measure][spread]") {
  VariedFake backend(false, true);
  MeasureResult r = measure_at(backend, 1, 8, 4096);
  // The fake's read runs lie within ±2% of 100 GB/s, then of 150 GB/s: the ceiling is the
  // faster pass, the spread (153 − 98) / 150 covers both, and the figure is flagged.
  CHECK(r.probes.read_bytes_per_s.median == Approx(1.5e11));
  CHECK(r.probes.read_bytes_per_s.min == Approx(0.98e11));
  CHECK(r.probes.read_bytes_per_s.max == Approx(1.53e11));
  CHECK(r.probes.read_bytes_per_s.runs == 20);
  CHECK(disagrees(r.probes.read_bytes_per_s));
  CHECK(r.probes.bandwidth_bytes_per_s == Approx(1.5e11));
  CHECK(r.probes.levels.back().read_bytes_per_s.median == Approx(1.5e11));
  CHECK(r.probes.gemm.bf16->median == Approx(3e12));
  // The absorbed kernel's page rate is merged by its row count the same way.
  REQUIRE(r.probes.absorbed_page_flops_per_s.size() == 1);
  CHECK(r.probes.absorbed_page_flops_per_s[0].rows == 1);
  std::optional<Spread> page = r.probes.absorbed_page_at(1);
  REQUIRE(page);
  CHECK(page->median == Approx(1.5e12));
  CHECK(page->min == Approx(0.98e12));
  CHECK(page->max == Approx(1.53e12));
  CHECK(page->runs == 20);
  CHECK_FALSE(r.probes.absorbed_page_at(2));
  bool flagged = false;
  for (const auto& [key, figure] : r.probes.figures()) {
    flagged |= key == "absorbed_page_1_rows_flops_per_s" && disagrees(figure);
  }
  CHECK(flagged);
  // The kernels ran at 1.25x the first pass's bound: against the faster ceiling they reach
  // 0.8 / 1.5 of it.
  REQUIRE(r.kernels.size() == 2);
  CHECK(r.kernels[0].memory_bytes_per_s == Approx(1.5e11));
  CHECK(r.kernels[0].roofline_fraction == Approx(0.8 / 1.5));
}

namespace {

/// A figure the same in every run.
Spread exactly(double v) {
  return {v, v, v, 3};
}

TimedGemm gemm_call(u64 m, u64 nk, double seconds) {
  TimedGemm g;
  g.dtype = "bf16";
  g.m = m;
  g.n = nk;
  g.k = nk;
  g.element_bytes = 2;
  g.time_s = exactly(seconds);
  return g;
}

} // namespace

TEST_CASE("a GEMM sweep gives back the floor, streaming and compute it was timed at",
          "[measure][sweep]") {
  // A device of 1e11 B/s and 2e12 FLOP/s. One row over 1024² weights: bytes (1024² + 1024 +
  // 1024) × 2 = 2,101,248 B; over 2048²: (2048² + 4096) × 2 = 8,396,800 B. At 5 µs plus the bytes
  // at 0.8 × 1e11 = 8e10 B/s: 5 + 26.2656 = 31.2656 µs and 5 + 104.96 = 109.96 µs.
  std::vector<TimedGemm> calls{gemm_call(1, 1024, 5e-6 + 2101248 / 8e10),
                               gemm_call(1, 2048, 5e-6 + 8396800 / 8e10)};
  // 1,024 rows over 4096²: 2 × 1024 × 4096² = 34,359,738,368 FLOP; at 0.5 × 2e12 beyond the
  // floor: 5 µs + 34.36 ms.
  calls.push_back(gemm_call(1024, 4096, 5e-6 + 34359738368.0 / 1e12));
  auto g = fit_gemm(calls, 2e12, 1e11);
  REQUIRE(g.has_value());
  CHECK(g->floor_s == Approx(5e-6).epsilon(1e-9));
  CHECK(g->stream == Approx(0.8).epsilon(1e-9));
  REQUIRE(g->compute.x == std::vector<double>{1024});
  CHECK(g->compute.y.front() == Approx(0.5).epsilon(1e-9));

  // One small call, or small calls of one size, say nothing of the streaming rate.
  CHECK_FALSE(fit_gemm({calls[0], calls[2]}, 2e12, 1e11).has_value());
  CHECK_FALSE(fit_gemm({calls[0], calls[0], calls[2]}, 2e12, 1e11).has_value());
  // Time that falls as the weights grow is no bandwidth at all.
  CHECK_FALSE(fit_gemm({gemm_call(1, 1024, 2e-5), gemm_call(1, 2048, 1e-5), calls[2]}, 2e12, 1e11)
                  .has_value());
  // A floor above a millisecond is clamped to the profile's limit, an efficiency above 1 to 1.
  auto fast = fit_gemm({gemm_call(1, 1024, 1e-6 + 2101248 / 2e11),
                        gemm_call(1, 2048, 1e-6 + 8396800 / 2e11), calls[2]},
                       2e12, 1e11);
  REQUIRE(fast.has_value());
  CHECK(fast->stream == 1.0);
}

TEST_CASE("memory passes give back the elementwise floor and bandwidth", "[measure][sweep]") {
  // 2 µs plus the bytes at 0.9 × 1e11: 64 KiB in 2.728 µs, 1 GiB in 11.93 ms.
  std::vector<TimedPass> passes{{65536, exactly(2e-6 + 65536 / 9e10)},
                                {1073741824.0, exactly(2e-6 + 1073741824.0 / 9e10)}};
  auto e = fit_passes(passes, 1e11);
  REQUIRE(e.has_value());
  CHECK(e->floor_s == Approx(2e-6).epsilon(1e-6));
  CHECK(e->bandwidth == Approx(0.9).epsilon(1e-9));
  CHECK_FALSE(fit_passes({passes[0]}, 1e11).has_value());
}

TEST_CASE("the absorbed kernels measured give MLA decode's floor, bandwidth and compute",
          "[measure][sweep]") {
  // Two configurations: 10 MB in 3 + 10e6 / (0.6 × 1e11) = 169.67 µs, 40 MB in 669.67 µs; the
  // faster FLOP rate 5e11 of a 2e12 peak.
  std::vector<KernelMeasurement> k(3);
  k[0].name = "mla_decode.absorbed";
  k[0].bound = "memory";
  k[0].cost.bytes = 10e6;
  k[0].time_s = exactly(3e-6 + 10e6 / 6e10);
  k[0].achieved_flops_per_s = 2e11;
  k[1] = k[0];
  k[1].cost.bytes = 40e6;
  k[1].time_s = exactly(3e-6 + 40e6 / 6e10);
  k[1].achieved_flops_per_s = 5e11;
  k[2].name = "mla_decode.naive"; // not the absorbed kernel: left out
  k[2].cost.bytes = 1e6;
  k[2].time_s = exactly(1.0);
  auto m = fit_mla_decode(k, 1e11, 2e12);
  REQUIRE(m.has_value());
  // A compute-bound configuration is off the line: with one memory-bound left there is none.
  std::vector<KernelMeasurement> one = k;
  one[1].bound = "compute";
  CHECK_FALSE(fit_mla_decode(one, 1e11, 2e12).has_value());
  CHECK(m->floor_s == Approx(3e-6).epsilon(1e-6));
  CHECK(m->bandwidth == Approx(0.6).epsilon(1e-9));
  CHECK(m->compute == Approx(0.25));
}

TEST_CASE("measure's profile carries the curves it fitted, the rest from the typical profile or "
          "at the bound",
          "[measure][sweep]") {
  auto backend = make_measure_backend("fake");
  MeasureOptions o;
  o.heads = {16};
  o.batches = {4, 16};
  o.contexts = {2048};
  MeasureResult r = run_measure(*backend, o);
  REQUIRE_FALSE(r.sweeps.empty());
  DeviceProfile p = to_device_profile(r, "fake.yaml");
  REQUIRE(p.efficiency.has_value());
  // The fake device's GEMMs: 5 µs, 0.8 of its 1e11 B/s, half its 2e12 bf16 FLOP/s; its passes
  // 2 µs at 0.9 (FakeBackend::sweep).
  CHECK(p.efficiency->gemm_bf16.floor_s == Approx(5e-6).epsilon(1e-9));
  CHECK(p.efficiency->gemm_bf16.stream == Approx(0.8).epsilon(1e-9));
  REQUIRE(p.efficiency->gemm_bf16.compute.y.size() == 3);
  for (double eta : p.efficiency->gemm_bf16.compute.y) {
    CHECK(eta == Approx(0.5).epsilon(1e-9));
  }
  CHECK(p.efficiency->elementwise.floor_s == Approx(2e-6).epsilon(1e-6));
  CHECK(p.efficiency->elementwise.bandwidth == Approx(0.9).epsilon(1e-9));
  // No typical profile covers the fake device: what it did not measure is at the bound.
  CHECK(p.efficiency->prefill_bf16.compute.at(4096) == 1.0);
  CHECK(p.efficiency->decode_bf16.floor_s == 0);
  CHECK_THAT(p.efficiency->source, Catch::Contains("the rest at the bound"));
  // The profile reads back with its curves, and prices an estimate like a typical one.
  DeviceProfile back = parse_device_profile(device_profile_yaml(p), "fake.yaml");
  REQUIRE(back.efficiency.has_value());
  CHECK(back.efficiency->gemm_bf16.stream == p.efficiency->gemm_bf16.stream);
  CHECK(back.efficiency->all_reduce_graph.empty());

  // Measured on a GPU with a typical profile: its classes not measured are the typical ones.
  GpuCatalog catalog;
  const Gpu& h200 = catalog.find("h200");
  const EfficiencyProfile& typical = *typical_profile(h200)->profile->efficiency;
  EfficiencyProfile e = measured_efficiency(r, h200, &typical, "typical NVIDIA H200 profile");
  CHECK(e.decode_bf16.floor_s == typical.decode_bf16.floor_s);
  CHECK(e.all_reduce_graph.size() == typical.all_reduce_graph.size());
  CHECK(e.gemm_bf16.floor_s == Approx(5e-6).epsilon(1e-9));
  CHECK_THAT(e.source, Catch::Contains("the rest from the typical NVIDIA H200 profile"));
}
