#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <string_view>

#include <kvcalc/core/error.hpp>
#include <kvcalc/device/efficiency.hpp>
#include <kvcalc/device/profile.hpp>
#include <kvcalc/model/registry.hpp>
#include <kvcalc/roofline/collective.hpp>
#include <kvcalc/roofline/estimate.hpp>
#include <kvcalc/roofline/roofline.hpp>

using namespace kvcalc;
using namespace kvcalc::roofline;
using namespace kvcalc::device;

namespace {

const Gpu& catalog_gpu(const char* name) {
  static const GpuCatalog catalog;
  return catalog.find(name);
}

/// A made-up device with round ceilings: 1 TB/s, 1 PFLOP/s in bf16, 2 in fp8 (no fp32 peak).
Gpu round_gpu() {
  Gpu g;
  g.name = "round";
  g.memory_bandwidth_bytes_per_s = 1e12;
  g.flops_per_s.bf16 = 1e15;
  g.flops_per_s.fp8 = 2e15;
  return g;
}

/// Made-up efficiencies with round numbers, each curve two points a factor of 4 or 100 apart,
/// so that the geometric midpoint (a factor of 2 or 10 in) sits halfway between their values.
EfficiencyProfile round_profile() {
  EfficiencyProfile e;
  e.source = "made up for the tests";
  e.gemm_bf16 = {2e-6, 0.8, {{100, 10000}, {0.5, 0.9}}};
  e.gemm_fp8 = {10e-6, 0.5, {{100, 10000}, {0.4, 0.6}}};
  e.gemm_fp8_block = {5e-6, 0.625, {{100, 10000}, {0.2, 0.4}}};
  e.grouped = {40e-6, 0.5, {{512, 2048}, {0.4, 0.8}}, {{512, 2048}, {0.2, 0.6}}};
  e.decode_bf16 = {5e-6, {{1e6, 1e8}, {0.5, 0.9}}, 0.5};
  e.decode_fp8 = {3e-6, {{1e6, 1e8}, {0.3, 0.7}}, 0.5};
  e.mla_decode = {6e-6, 0.8, 0.5};
  e.prefill_bf16 = {4e-6, {{1024, 4096}, {0.3, 0.5}}};
  e.prefill_fp8 = {2e-6, {{1024, 4096}, {0.15, 0.35}}};
  e.elementwise = {1e-6, 0.5};
  e.all_reduce_graph = {{2, {{1e3, 1e6}, {2e-6, 20e-6}}}, {8, {{1e3, 1e6}, {4e-6, 80e-6}}}};
  e.all_reduce_eager = {{8, {{1e3, 1e6}, {10e-6, 100e-6}}}};
  e.links = {0.8, 0.5, 0.5, 0.25};
  return e;
}

Estimator round_estimator() {
  return Estimator(round_profile(), round_gpu(), "round");
}

/// `text` with the first `from` replaced by `to`.
std::string replaced(std::string text, std::string_view from, std::string_view to) {
  std::size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

std::string h100_profile_text() {
  for (const EmbeddedFile& f : builtin_profile_files()) {
    if (std::string_view(f.path).ends_with("h100-sxm.yaml")) {
      return std::string(f.text);
    }
  }
  FAIL("no compiled-in h100-sxm.yaml");
  return {};
}

/// A profile's required ceilings, then `efficiency`'s section.
std::string profile_with(const EfficiencyProfile& efficiency) {
  return "kvcalc_device_profile: 1\n"
         "device: test\n"
         "backend: published\n"
         "bandwidth_bytes_per_s: 1e12\n"
         "flops_per_s:\n"
         "  bf16: 1e15\n" +
         efficiency_yaml(efficiency);
}

void check_same_curve(const Curve& a, const Curve& b) {
  CHECK(a.x == b.x);
  CHECK(a.y == b.y);
}

void check_same_tables(const std::vector<AllReduceTable>& a, const std::vector<AllReduceTable>& b) {
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    CHECK(a[i].gpus == b[i].gpus);
    CHECK(a[i].table.bytes == b[i].table.bytes);
    CHECK(a[i].table.time_s == b[i].table.time_s);
  }
}

} // namespace

// ---------------------------------------------------------------------------------------------
// Curves and tables

TEST_CASE("a curve is linear in log x between its points and flat beyond its ends",
          "[estimate][curve]") {
  Curve c{{768, 4096}, {0.71, 0.79}};
  // At its points, their values.
  CHECK(c.at(768) == Approx(0.71).epsilon(1e-12));
  CHECK(c.at(4096) == Approx(0.79).epsilon(1e-12));
  // At the geometric mean √(768 · 4096) = √3,145,728 ≈ 1,773.6, halfway in log x:
  // 0.71 + 0.5 · (0.79 − 0.71) = 0.75 (linear in x there would give 0.71 + 0.08 · 1005.6/3328
  // = 0.734).
  CHECK(c.at(std::sqrt(768.0 * 4096.0)) == Approx(0.75).epsilon(1e-12));
  // A quarter of the way in log x, 768 · (4096/768)^0.25 ≈ 1,165.5: 0.71 + 0.25 · 0.08 = 0.73.
  CHECK(c.at(768 * std::pow(4096.0 / 768.0, 0.25)) == Approx(0.73).epsilon(1e-12));
  // Below the first point and above the last, flat.
  CHECK(c.at(1) == 0.71);
  CHECK(c.at(100) == 0.71);
  CHECK(c.at(1e6) == 0.79);

  // Three points: the segment holding x is the one interpolated. √10 ≈ 3.162 is halfway (in
  // log) between 1 and 10: (0.2 + 0.4)/2 = 0.3; √1000 ≈ 31.62 halfway between 10 and 100:
  // (0.4 + 0.9)/2 = 0.65.
  Curve three{{1, 10, 100}, {0.2, 0.4, 0.9}};
  CHECK(three.at(std::sqrt(10.0)) == Approx(0.3).epsilon(1e-12));
  CHECK(three.at(10) == Approx(0.4).epsilon(1e-12));
  CHECK(three.at(std::sqrt(1000.0)) == Approx(0.65).epsilon(1e-12));

  // One point: its value everywhere.
  Curve one{{512}, {0.4}};
  CHECK(one.at(1) == 0.4);
  CHECK(one.at(512) == 0.4);
  CHECK(one.at(1e9) == 0.4);
}

TEST_CASE("a latency table is log-log between its sizes, flat below, proportional beyond",
          "[estimate][curve]") {
  LatencyTable t{{1024, 1048576}, {2e-6, 32e-6}};
  CHECK(t.at(1024) == Approx(2e-6).epsilon(1e-12));
  CHECK(t.at(1048576) == Approx(32e-6).epsilon(1e-12));
  // 32 KiB = 2^15 is halfway in log between 2^10 and 2^20: 2 µs · (32/2)^0.5 = 8 µs (linear in
  // log bytes would give 17 µs, linear in bytes 2.47 µs).
  CHECK(t.at(32768) == Approx(8e-6).epsilon(1e-12));
  // 2^12 is a fifth of the way: 2 µs · 16^0.2 = 2 µs · 1.7411 = 3.4822 µs.
  CHECK(t.at(4096) == Approx(2e-6 * std::pow(16.0, 0.2)).epsilon(1e-12));
  CHECK(t.at(4096) == Approx(3.4822e-6).epsilon(1e-4));
  // Below the first size, the first time: a message takes no less than the smallest measured.
  CHECK(t.at(100) == 2e-6);
  // Beyond the last, at the last point's rate: 4 MiB takes 4 × 32 µs = 128 µs.
  CHECK(t.at(4.0 * 1048576) == Approx(128e-6).epsilon(1e-12));
}

TEST_CASE("an all-reduce's time comes from its group's table, or log-log between groups",
          "[estimate][curve]") {
  std::vector<AllReduceTable> tables{{8, {{1e3, 1e6}, {4e-6, 80e-6}}},
                                     {2, {{1e3, 1e6}, {2e-6, 20e-6}}}};
  // The group's own table (the order of the tables does not matter).
  CHECK(all_reduce_time(tables, 2, 1e6).value() == Approx(20e-6).epsilon(1e-12));
  CHECK(all_reduce_time(tables, 8, 1e3).value() == Approx(4e-6).epsilon(1e-12));
  // 4 GPUs sit halfway in log between 2 and 8 (ln(4/2)/ln(8/2) = 0.5): at 1 MB, 20 µs ·
  // (80/20)^0.5 = 40 µs; at 1 kB, 2 µs · (4/2)^0.5 = 2.828 µs.
  CHECK(all_reduce_time(tables, 4, 1e6).value() == Approx(40e-6).epsilon(1e-12));
  CHECK(all_reduce_time(tables, 4, 1e3).value() == Approx(2e-6 * std::sqrt(2.0)).epsilon(1e-12));
  // A size between the table's points at a group between groups: at √(1e3 · 1e6) ≈ 31.6 kB each
  // table is halfway in log, 2 µs · 10^0.5 = 6.325 µs at 2 GPUs and 4 µs · 20^0.5 = 17.89 µs
  // at 8; 4 GPUs halfway between them: √(6.325 · 17.89) µs = √(2 · 4 · 10^0.5 · 20^0.5) µs
  // = √(8 · 14.142) µs = 10.64 µs.
  CHECK(all_reduce_time(tables, 4, std::sqrt(1e9)).value() ==
        Approx(std::sqrt(8 * std::sqrt(200.0)) * 1e-6).epsilon(1e-12));
  CHECK(all_reduce_time(tables, 4, std::sqrt(1e9)).value() == Approx(10.636e-6).epsilon(1e-4));
  // A group below the smallest measured takes the smallest's table: with only 8 measured, 4
  // GPUs at 1 MB take 80 µs.
  std::vector<AllReduceTable> eight{{8, {{1e3, 1e6}, {4e-6, 80e-6}}}};
  CHECK(all_reduce_time(eight, 4, 1e6).value() == Approx(80e-6).epsilon(1e-12));
  // Beyond the largest group measured: no figure.
  CHECK_FALSE(all_reduce_time(tables, 16, 1e6).has_value());
  CHECK_FALSE(all_reduce_time({}, 2, 1e6).has_value());
}

// ---------------------------------------------------------------------------------------------
// Ops on the made-up device (1 TB/s, 1e15 bf16 and 2e15 fp8 FLOP/s)

TEST_CASE("a GEMM takes its floor per call plus the slower of compute and streaming",
          "[estimate][op]") {
  Estimator est = round_estimator();
  // Memory-bound: 32 calls of one row each (M = 1, below the curve's first point: 0.5), 1e9
  // FLOP, 8e8 B. Streaming 8e8 / (0.8 · 1e12) = 1 ms beats compute 1e9 / (0.5 · 1e15) = 2 µs;
  // 32 floors of 2 µs and 16 elementwise floors of 1 µs: 64 + 1000 + 16 µs = 1.080 ms.
  Kernels decode{.kind = KernelClass::gemm, .calls = 32, .rows = 1, .elementwise_calls = 16};
  CHECK(est.op_s(decode, DType::bf16, 1e9, 7.9e8, 1e7, 0) == Approx(1.080e-3).epsilon(1e-12));
  // Compute-bound: 4 calls of M = 1000, halfway in log between 100 and 10,000: η = 0.7.
  // 1.4e12 / (0.7 · 1e15) = 2 ms beats 1e8 / (0.8 · 1e12) = 0.125 ms; plus 4 × 2 µs = 2.008 ms.
  Kernels prefill{.kind = KernelClass::gemm, .calls = 4, .rows = 1000};
  CHECK(est.op_s(prefill, DType::bf16, 1.4e12, 1e8, 0, 0) == Approx(2.008e-3).epsilon(1e-12));
  // Block scales do not move 16-bit math off the bf16 curve.
  prefill.block_scales = true;
  CHECK(est.op_s(prefill, DType::bf16, 1.4e12, 1e8, 0, 0) == Approx(2.008e-3).epsilon(1e-12));
}

TEST_CASE("fp8 GEMMs take the curve of their scales: per tensor or block", "[estimate][op]") {
  Estimator est = round_estimator();
  Kernels per_tensor{.kind = KernelClass::gemm, .calls = 1, .rows = 1000};
  Kernels block = per_tensor;
  block.block_scales = true;
  // Compute-bound at M = 1000 (halfway in log), fp8 peak 2e15, 1.2e12 FLOP, 1e8 B:
  // per tensor η = (0.4 + 0.6)/2 = 0.5: 1.2e12 / 1e15 = 1.2 ms (streaming 1e8 / 0.5e12 =
  // 0.2 ms), plus a 10 µs floor: 1.210 ms.
  CHECK(est.op_s(per_tensor, DType::fp8_e4m3, 1.2e12, 1e8, 0, 0) ==
        Approx(1.210e-3).epsilon(1e-12));
  // block η = (0.2 + 0.4)/2 = 0.3: 1.2e12 / 0.6e15 = 2 ms (streaming 1e8 / 0.625e12 = 0.16 ms),
  // plus a 5 µs floor: 2.005 ms.
  CHECK(est.op_s(block, DType::fp8_e4m3, 1.2e12, 1e8, 0, 0) == Approx(2.005e-3).epsilon(1e-12));
  // Memory-bound at M = 1 (1e9 FLOP, 1e9 B), each streams at its own fraction: per tensor
  // 1e9 / (0.5 · 1e12) = 2 ms + 10 µs; block 1e9 / (0.625 · 1e12) = 1.6 ms + 5 µs.
  per_tensor.rows = 1;
  block.rows = 1;
  CHECK(est.op_s(per_tensor, DType::fp8_e4m3, 1e9, 1e9, 0, 0) == Approx(2.010e-3).epsilon(1e-12));
  CHECK(est.op_s(block, DType::fp8_e4m3, 1e9, 1e9, 0, 0) == Approx(1.605e-3).epsilon(1e-12));
}

TEST_CASE("a grouped GEMM takes the bf16 or fp8 curve at one expert's width", "[estimate][op]") {
  Estimator est = round_estimator();
  // Width 1024 = √(512 · 2048), halfway in log: bf16 η = (0.4 + 0.8)/2 = 0.6, fp8 (0.2 +
  // 0.6)/2 = 0.4. Two MoE layers (two floors of 40 µs), 1.2e12 FLOP, 1e8 B (streaming 1e8 /
  // (0.5 · 1e12) = 0.2 ms):
  Kernels moe{.kind = KernelClass::grouped_gemm, .calls = 2, .rows = 1024};
  // bf16: 1.2e12 / (0.6 · 1e15) = 2 ms + 80 µs = 2.08 ms.
  CHECK(est.op_s(moe, DType::bf16, 1.2e12, 1e8, 0, 0) == Approx(2.08e-3).epsilon(1e-12));
  // fp8: 1.2e12 / (0.4 · 2e15) = 1.5 ms + 80 µs = 1.58 ms.
  CHECK(est.op_s(moe, DType::fp8_e4m3, 1.2e12, 1e8, 0, 0) == Approx(1.58e-3).epsilon(1e-12));
  // Memory-bound, one layer: 1e9 B / (0.5 · 1e12) = 2 ms (compute 1e9 / 0.6e15 = 1.7 µs) +
  // 40 µs = 2.04 ms.
  moe.calls = 1;
  CHECK(est.op_s(moe, DType::bf16, 1e9, 1e9, 0, 0) == Approx(2.04e-3).epsilon(1e-12));
}

TEST_CASE("decode attention reads its cache at the bandwidth of its bytes per call",
          "[estimate][op][attention]") {
  Estimator est = round_estimator();
  // 8 sequences decoding one token over 4,096 cached ones: s = 8, s·t = t = 32,768.
  AttentionSums sums{.query = 8, .attended = 32768, .held = 32768};
  Kernels bf16{.kind = KernelClass::attention, .calls = 32, .sums = &sums, .kv = DType::bf16};
  // 32 layers reading 3.2e8 B of cache: 1e7 B per call, halfway in log between 1e6 and 1e8:
  // η = (0.5 + 0.9)/2 = 0.7. Bytes 3.2e8 + 3e7 = 3.5e8: 3.5e8 / (0.7 · 1e12) = 0.5 ms (compute
  // 1e9 / (0.5 · 1e15) = 2 µs); 32 floors of 5 µs: 0.66 ms.
  CHECK(est.op_s(bf16, DType::bf16, 1e9, 0, 3e7, 3.2e8) == Approx(0.66e-3).epsilon(1e-12));
  // An fp8 cache: its own curve, η = (0.3 + 0.7)/2 = 0.5: 3.5e8 / 0.5e12 = 0.7 ms, and its own
  // floor, 32 × 3 µs = 96 µs: 0.796 ms.
  Kernels fp8 = bf16;
  fp8.kv = DType::fp8_e4m3;
  CHECK(est.op_s(fp8, DType::bf16, 1e9, 0, 3e7, 3.2e8) == Approx(0.796e-3).epsilon(1e-12));
  // Compute-bound (many query heads a KV head): 5e11 / (0.5 · 1e15) = 1 ms beats 0.5 ms; with
  // the floors 1.16 ms.
  CHECK(est.op_s(bf16, DType::bf16, 5e11, 0, 3e7, 3.2e8) == Approx(1.16e-3).epsilon(1e-12));
  // Weights the op streams besides its cache (DSA's indexer projections) stream at the bf16
  // GEMM's fraction: 1.6e8 / (0.8 · 1e12) = 0.2 ms more than 0.66 ms: 0.86 ms.
  CHECK(est.op_s(bf16, DType::bf16, 1e9, 1.6e8, 3e7, 3.2e8) == Approx(0.86e-3).epsilon(1e-12));
}

TEST_CASE("prefill attention computes at the efficiency of its length",
          "[estimate][op][attention]") {
  Estimator est = round_estimator();
  // One prompt of 2,048 tokens: s = 2,048, s·t_eff = 2,048 · 1,024 = 2,097,152, t = 2,048;
  // all of it prefill.
  AttentionSums sums{.query = 2048,
                     .attended = 2097152,
                     .held = 2048,
                     .prefill_query = 2048,
                     .prefill_attended = 2097152,
                     .prefill_held = 2048};
  Kernels k{.kind = KernelClass::attention, .calls = 32, .sums = &sums, .kv = DType::bf16};
  // Length 2 · 2,097,152 / 2,048 = 2,048, halfway in log between 1,024 and 4,096: η = (0.3 +
  // 0.5)/2 = 0.4. 4e11 / (0.4 · 1e15) = 1 ms beats (4e7 + 6e7) / (0.5 · 1e12) = 0.2 ms (at the
  // elementwise bandwidth); 32 prefill floors of 4 µs: 1.128 ms. No decode floor is charged
  // (it would add 32 × 5 µs).
  CHECK(est.op_s(k, DType::bf16, 4e11, 0, 6e7, 4e7) == Approx(1.128e-3).epsilon(1e-12));
  // fp8 math: the fp8 curve at the fp8 peak, η = (0.15 + 0.35)/2 = 0.25: 4e11 / (0.25 · 2e15)
  // = 0.8 ms, with 32 floors of 2 µs: 0.864 ms.
  CHECK(est.op_s(k, DType::fp8_e4m3, 4e11, 0, 6e7, 4e7) == Approx(0.864e-3).epsilon(1e-12));
  // Weights stream under the compute: 0.2 ms + 1.6e8 / (0.8 · 1e12) = 0.4 ms is still below
  // the 1 ms of compute, and the time stays 1.128 ms.
  CHECK(est.op_s(k, DType::bf16, 4e11, 1.6e8, 6e7, 4e7) == Approx(1.128e-3).epsilon(1e-12));
}

TEST_CASE("a mixed step prices its decode and prefill attention apart and adds them",
          "[estimate][op][attention]") {
  Estimator est = round_estimator();
  // 8 decodes over 4,096 tokens and one 2,048-token prompt:
  //   s      = 8 + 2,048 = 2,056               (prefill 2,048)
  //   s·t    = 8 · 4,096 + 2,048 · 1,024 = 32,768 + 2,097,152 = 2,129,920   (prefill 2,097,152)
  //   t      = 32,768 + 2,048 = 34,816          (prefill 2,048)
  AttentionSums sums{.query = 2056,
                     .attended = 2129920,
                     .held = 34816,
                     .prefill_query = 2048,
                     .prefill_attended = 2097152,
                     .prefill_held = 2048};
  Kernels k{.kind = KernelClass::attention, .calls = 32, .sums = &sums, .kv = DType::bf16};
  // The op: 2e5 FLOP per query-key pair, 1e4 B of activations per new token, 1e7/1,024 B of
  // cache per cached token: 4.25984e11 FLOP, 2.056e7 B, 3.4e8 B.
  double flops = 2129920 * 2e5;
  double activations = 2056 * 1e4;
  double kv = 34816 * (1e7 / 1024);
  CHECK(kv == 3.4e8);
  // Decode part: 32,768 · 2e5 = 6.5536e9 FLOP, 8e4 B, 3.2e8 B of cache, 1e7 B a call (η 0.7):
  // (3.2e8 + 8e4) / (0.7 · 1e12) = 0.457257 ms (compute 6.5536e9 / 0.5e15 = 13 µs), plus 32 ×
  // 5 µs = 0.617257 ms.
  double decode = 32 * 5e-6 + (3.2e8 + 8e4) / 0.7e12;
  CHECK(decode == Approx(0.617257e-3).epsilon(1e-6));
  // Prefill part: 2,097,152 · 2e5 = 4.194304e11 FLOP at length 2,048 (η 0.4): 1.048576 ms
  // (memory (2e7 + 2.048e7) / 0.5e12 = 81 µs), plus 32 × 4 µs = 1.176576 ms.
  double prefill = 32 * 4e-6 + 4.194304e11 / 0.4e15;
  CHECK(prefill == Approx(1.176576e-3).epsilon(1e-12));
  CHECK(est.op_s(k, DType::bf16, flops, 0, activations, kv) ==
        Approx(decode + prefill).epsilon(1e-12));
  CHECK(est.op_s(k, DType::bf16, flops, 0, activations, kv) == Approx(1.793833e-3).epsilon(1e-6));
}

TEST_CASE("MLA attention and elementwise kernels take one bandwidth fraction", "[estimate][op]") {
  Estimator est = round_estimator();
  Kernels mla{.kind = KernelClass::mla_attention, .calls = 61};
  // Compute-bound: 1e12 / (0.5 · 1e15) = 2 ms beats 1e9 / (0.8 · 1e12) = 1.25 ms; 61 floors
  // of 6 µs = 366 µs: 2.366 ms.
  CHECK(est.op_s(mla, DType::bf16, 1e12, 0, 1e8, 9e8) == Approx(2.366e-3).epsilon(1e-12));
  // Memory-bound: 1e11 FLOP take 0.2 ms, the bytes 1.25 ms: 1.616 ms.
  CHECK(est.op_s(mla, DType::bf16, 1e11, 0, 1e8, 9e8) == Approx(1.616e-3).epsilon(1e-12));

  Kernels norms{.kind = KernelClass::elementwise, .calls = 64};
  // 1e8 B / (0.5 · 1e12) = 0.2 ms (compute 1e9 / 1e15 = 1 µs) + 64 × 1 µs = 0.264 ms.
  CHECK(est.op_s(norms, DType::bf16, 1e9, 0, 1e8, 0) == Approx(0.264e-3).epsilon(1e-12));
  // Elementwise compute runs at the datasheet peak: 1e12 / 1e15 = 1 ms + 64 µs.
  CHECK(est.op_s(norms, DType::bf16, 1e12, 0, 1e8, 0) == Approx(1.064e-3).epsilon(1e-12));
  // fp32 math on a device with no fp32 peak computes at the bf16 one: the same 1.064 ms.
  CHECK(est.op_s(norms, DType::fp32, 1e12, 0, 1e8, 0) == Approx(1.064e-3).epsilon(1e-12));
}

// ---------------------------------------------------------------------------------------------
// Collectives: scale-up 100 GB/s (1 µs a step), NIC 10 GB/s (5 µs), 8 GPUs a domain

TEST_CASE("an all-reduce inside a domain takes its measured table", "[estimate][collective]") {
  Estimator est = round_estimator();
  Topology board{"board", 8, 100e9, 1e-6, 10e9, 5e-6};
  Collective eight = all_reduce(board, 8, 1e6);
  REQUIRE(eight.kind == CollectiveKind::all_reduce);
  REQUIRE(eight.domains == 1);
  REQUIRE(eight.time_s > 0);
  // 8 GPUs, 1 MB: the graph table's 80 µs; launched eagerly, the eager table's 100 µs.
  CHECK(est.collective_s(eight, board, true) == Approx(80e-6).epsilon(1e-12));
  CHECK(est.collective_s(eight, board, false) == Approx(100e-6).epsilon(1e-12));
  // 4 GPUs: halfway in log between the graph tables of 2 and 8, 20 µs · (80/20)^0.5 = 40 µs;
  // eager has 8 GPUs only, which a smaller group takes: 100 µs.
  Collective four = all_reduce(board, 4, 1e6);
  CHECK(est.collective_s(four, board, true) == Approx(40e-6).epsilon(1e-12));
  CHECK(est.collective_s(four, board, false) == Approx(100e-6).epsilon(1e-12));
}

TEST_CASE("collectives beyond the tables take their links at the measured fractions",
          "[estimate][collective]") {
  Estimator est = round_estimator();
  // 16 GPUs of a 72-GPU domain, beyond the largest group measured (8): α-β at 0.8 of the
  // scale-up rate. Two-shot (2 µs + 2 · 15/16 · 1e6 / 1e11 = 20.75 µs beats one-shot's 151 µs)
  // sends 1.875e6 B in 2 µs of latency: 2 µs + 1.875e6 / (0.8 · 1e11) = 2 + 23.4375 = 25.4375 µs.
  Topology rack{"rack", 72, 100e9, 1e-6, 10e9, 5e-6};
  Collective sixteen = all_reduce(rack, 16, 1e6);
  REQUIRE(sixteen.domains == 1);
  REQUIRE(sixteen.up_bytes == Approx(1.875e6));
  REQUIRE(sixteen.latency_s == Approx(2e-6));
  CHECK(est.collective_s(sixteen, rack, true) == Approx(25.4375e-6).epsilon(1e-12));

  Topology board{"board", 8, 100e9, 1e-6, 10e9, 5e-6};
  // Across two domains the links are crossed in turn: 10 µs + 1.75e6 / (0.8 · 1e11) + 1.25e5 /
  // (0.5 · 1e10) = 10 + 21.875 + 25 = 56.875 µs.
  Collective across;
  across.kind = CollectiveKind::all_reduce;
  across.group = 16;
  across.domains = 2;
  across.message_bytes = 1e6;
  across.up_bytes = 1.75e6;
  across.out_bytes = 1.25e5;
  across.latency_s = 10e-6;
  across.time_s = 1; // priced by the bound; any time above 0
  CHECK(est.collective_s(across, board, true) == Approx(56.875e-6).epsilon(1e-12));

  // Dispatch at its own fraction (0.5), both links at once: up 1e6 / (0.5 · 1e11) = 20 µs,
  // out 5e4 / (0.5 · 1e10) = 10 µs, the longer with 3 µs of latency: 23 µs (in turn: 33 µs).
  Collective dispatch;
  dispatch.kind = CollectiveKind::dispatch;
  dispatch.group = 16;
  dispatch.domains = 2;
  dispatch.up_bytes = 1e6;
  dispatch.out_bytes = 5e4;
  dispatch.latency_s = 3e-6;
  dispatch.time_s = 1;
  CHECK(est.collective_s(dispatch, board, false) == Approx(23e-6).epsilon(1e-12));
  // Combine at its own (0.25): up 1e6 / (0.25 · 1e11) = 40 µs beats 10 µs: 43 µs.
  Collective combine = dispatch;
  combine.kind = CollectiveKind::combine;
  CHECK(est.collective_s(combine, board, false) == Approx(43e-6).epsilon(1e-12));

  // A send over the NIC: 5 µs + 1e6 / (0.5 · 1e10) = 205 µs; inside the domain, at the
  // scale-up fraction: 1 µs + 1e6 / (0.8 · 1e11) = 13.5 µs.
  CHECK(est.collective_s(send(board, true, 1e6), board, false) == Approx(205e-6).epsilon(1e-12));
  CHECK(est.collective_s(send(board, false, 1e6), board, false) == Approx(13.5e-6).epsilon(1e-12));
  // A collective the bound found free (nothing to send) is free.
  CHECK(est.collective_s(send(board, true, 0), board, false) == 0);
}

// ---------------------------------------------------------------------------------------------
// Which profile prices a GPU

TEST_CASE("a GPU without a measured profile takes the typical profile of its kind",
          "[estimate][profile]") {
  EstimateChoice h100 = choose_estimator(catalog_gpu("h100-sxm"), nullptr);
  REQUIRE(h100.estimator);
  CHECK_THAT(h100.note, Catch::StartsWith("typical NVIDIA H100 SXM profile, "));
  CHECK_THAT(h100.note, Catch::Contains("h100-sxm.yaml (published measurements of this GPU)"));
  CHECK(h100.estimator->profile().gemm_bf16.floor_s == 4.3e-6); // h100-sxm.yaml's
  CHECK(h100.estimator->source() == h100.note);

  // The H800 is the same die: the H100's efficiencies against the H800's own datasheet. A
  // buffer of 0.897 × its bandwidth streams elementwise (η 0.897) in one second.
  const Gpu& h800_gpu = catalog_gpu("h800");
  EstimateChoice h800 = choose_estimator(h800_gpu, nullptr);
  REQUIRE(h800.estimator);
  CHECK_THAT(h800.note, Catch::StartsWith("typical NVIDIA H100 SXM profile, "));
  CHECK_THAT(h800.note,
             Catch::Contains("the H100 SXM's measurements against the H800's own datasheet"));
  Kernels stream{.kind = KernelClass::elementwise, .calls = 0};
  CHECK(h800.estimator->op_s(stream, DType::bf16, 0, 0,
                             0.897 * h800_gpu.memory_bandwidth_bytes_per_s,
                             0) == Approx(1.0).epsilon(1e-12));

  EstimateChoice b300 = choose_estimator(catalog_gpu("b300"), nullptr);
  REQUIRE(b300.estimator);
  CHECK_THAT(b300.note, Catch::StartsWith("typical NVIDIA B200 profile, "));
  CHECK_THAT(b300.note,
             Catch::Contains("the B200's measurements against the B300's own datasheet"));
  CHECK(b300.estimator->profile().source ==
        typical_profile(catalog_gpu("b200"))->profile->efficiency->source);

  // No published measurement covers the A100: no estimate, and the note names the GPUs that
  // have one.
  EstimateChoice a100 = choose_estimator(catalog_gpu("a100-sxm-80gb"), nullptr);
  CHECK_FALSE(a100.estimator);
  CHECK_THAT(a100.note, Catch::StartsWith("no estimate for a100-sxm-80gb"));
  for (const char* covered : {"h100-sxm", "h800", "h200", "b200", "gb200", "b300", "gb300"}) {
    CHECK_THAT(a100.note, Catch::Contains(covered));
  }
  CHECK_THAT(a100.note, Catch::Contains("--device-profile"));
}

TEST_CASE("a measured profile with an efficiency section wins over the typical one",
          "[estimate][profile]") {
  DeviceProfile measured;
  measured.file = "mine.yaml";
  measured.device = "NVIDIA H100 80GB HBM3";
  measured.backend = "cuda";
  measured.efficiency = round_profile();
  EstimateChoice mine = choose_estimator(catalog_gpu("h100-sxm"), &measured);
  REQUIRE(mine.estimator);
  CHECK(mine.note == "device profile mine.yaml (cuda, NVIDIA H100 80GB HBM3)");
  CHECK(mine.estimator->profile().gemm_bf16.floor_s == 2e-6); // round_profile's, not 4.3 µs
  // Without an efficiency section the measured profile has no say in the estimate.
  measured.efficiency.reset();
  EstimateChoice typical = choose_estimator(catalog_gpu("h100-sxm"), &measured);
  REQUIRE(typical.estimator);
  CHECK_THAT(typical.note, Catch::StartsWith("typical NVIDIA H100 SXM profile"));
}

TEST_CASE("the compiled-in profiles parse and their efficiencies round-trip",
          "[estimate][profile]") {
  REQUIRE(typical_profiles().size() == 3);
  for (const DeviceProfile& p : typical_profiles()) {
    INFO(p.file);
    REQUIRE(p.efficiency);
    CHECK_FALSE(p.applies_to.empty());
    const EfficiencyProfile& x = *p.efficiency;
    EfficiencyProfile y =
        parse_device_profile(profile_with(x), "round-trip.yaml").efficiency.value();
    CHECK(y.source == x.source);
    for (auto [a, b] : {std::pair{&x.gemm_bf16, &y.gemm_bf16}, std::pair{&x.gemm_fp8, &y.gemm_fp8},
                        std::pair{&x.gemm_fp8_block, &y.gemm_fp8_block}}) {
      CHECK(a->floor_s == b->floor_s);
      CHECK(a->stream == b->stream);
      check_same_curve(a->compute, b->compute);
    }
    CHECK(x.grouped.floor_s == y.grouped.floor_s);
    CHECK(x.grouped.stream == y.grouped.stream);
    check_same_curve(x.grouped.compute_bf16, y.grouped.compute_bf16);
    check_same_curve(x.grouped.compute_fp8, y.grouped.compute_fp8);
    for (auto [a, b] :
         {std::pair{&x.decode_bf16, &y.decode_bf16}, std::pair{&x.decode_fp8, &y.decode_fp8}}) {
      CHECK(a->floor_s == b->floor_s);
      check_same_curve(a->bandwidth, b->bandwidth);
      CHECK(a->compute == b->compute);
    }
    CHECK(x.mla_decode.floor_s == y.mla_decode.floor_s);
    CHECK(x.mla_decode.bandwidth == y.mla_decode.bandwidth);
    CHECK(x.mla_decode.compute == y.mla_decode.compute);
    for (auto [a, b] :
         {std::pair{&x.prefill_bf16, &y.prefill_bf16}, std::pair{&x.prefill_fp8, &y.prefill_fp8}}) {
      CHECK(a->floor_s == b->floor_s);
      check_same_curve(a->compute, b->compute);
    }
    CHECK(x.elementwise.floor_s == y.elementwise.floor_s);
    CHECK(x.elementwise.bandwidth == y.elementwise.bandwidth);
    check_same_tables(x.all_reduce_graph, y.all_reduce_graph);
    check_same_tables(x.all_reduce_eager, y.all_reduce_eager);
    CHECK(x.links.scale_up == y.links.scale_up);
    CHECK(x.links.scale_out == y.links.scale_out);
    CHECK(x.links.dispatch == y.links.dispatch);
    CHECK(x.links.combine == y.links.combine);
    CHECK(x.step_overhead_s == y.step_overhead_s);
  }
  // The H100's file as written: its bf16 GEMM floor is 4.3 µs and its 2-GPU graph all-reduce
  // of 256 MiB takes 888 µs.
  const DeviceProfile& h100 = *typical_profile(catalog_gpu("h100-sxm"))->profile;
  CHECK(h100.efficiency->gemm_bf16.floor_s == 4.3e-6);
  CHECK(h100.efficiency->all_reduce_graph.front().gpus == 2);
  CHECK(h100.efficiency->all_reduce_graph.front().table.bytes.back() == 268435456);
  CHECK(h100.efficiency->all_reduce_graph.front().table.time_s.back() == 888e-6);
}

TEST_CASE("a bad efficiency section is an error naming its key", "[estimate][profile]") {
  const std::string good = h100_profile_text();
  REQUIRE_NOTHROW(parse_device_profile(good, "h100-sxm.yaml"));
  auto parse = [](const std::string& text) { return parse_device_profile(text, "bad.yaml"); };
  // An efficiency above 1 of the datasheet.
  REQUIRE_THROWS_AS(parse(replaced(good, "stream: 0.854", "stream: 1.2")), InputError);
  REQUIRE_THROWS_WITH(parse(replaced(good, "stream: 0.854", "stream: 1.2")),
                      Catch::Contains("'efficiency.gemm.bf16.stream' = 1.2 is not an efficiency"));
  REQUIRE_THROWS_WITH(parse(replaced(good, "efficiency: [0.71, 0.79]", "efficiency: [0.71, 1.2]")),
                      Catch::Contains("'efficiency.gemm.bf16.compute.efficiency' holds 1.2"));
  // A floor in µs where seconds are meant: 4.3 s is over the 1 ms a floor may be.
  REQUIRE_THROWS_AS(parse(replaced(good, "floor_s: 4.3e-6", "floor_s: 4.3")), InputError);
  REQUIRE_THROWS_WITH(parse(replaced(good, "floor_s: 4.3e-6", "floor_s: 4.3")),
                      Catch::Contains("'efficiency.gemm.bf16.floor_s' = 4.3 s is over 0.001 s"));
  // Fewer efficiencies than points.
  REQUIRE_THROWS_AS(parse(replaced(good, "efficiency: [0.71, 0.79]", "efficiency: [0.71]")),
                    InputError);
  REQUIRE_THROWS_WITH(parse(replaced(good, "efficiency: [0.71, 0.79]", "efficiency: [0.71]")),
                      Catch::Contains("'efficiency.gemm.bf16.compute.efficiency' has 1 values for "
                                      "2 points of 'efficiency.gemm.bf16.compute.rows'"));
  // Points out of order.
  REQUIRE_THROWS_AS(parse(replaced(good, "rows: [768, 4096], efficiency: [0.71",
                                   "rows: [4096, 768], efficiency: [0.71")),
                    InputError);
  REQUIRE_THROWS_WITH(parse(replaced(good, "rows: [768, 4096], efficiency: [0.71",
                                     "rows: [4096, 768], efficiency: [0.71")),
                      Catch::Contains("'efficiency.gemm.bf16.compute.rows' must ascend: 768 "
                                      "follows 4096"));
  // An all-reduce "group" of one GPU, and two tables for one group.
  REQUIRE_THROWS_AS(parse(replaced(good, "{gpus: 2,", "{gpus: 1,")), InputError);
  REQUIRE_THROWS_WITH(
      parse(replaced(good, "{gpus: 2,", "{gpus: 1,")),
      Catch::Contains("'efficiency.all_reduce.graph[0].gpus' = 1: an all-reduce group has at "
                      "least 2 GPUs"));
  REQUIRE_THROWS_WITH(parse(replaced(good, "{gpus: 4,", "{gpus: 2,")),
                      Catch::Contains("'efficiency.all_reduce.graph[1].gpus': two tables for 2 "
                                      "GPUs in 'efficiency.all_reduce.graph'"));
}

// ---------------------------------------------------------------------------------------------
// The estimate in a roofline

TEST_CASE("a roofline step carries the estimate beside the bound", "[estimate][roofline]") {
  RooflineRequest req;
  req.model = *model::find_builtin_model("llama-3.1-8b");
  req.gpu = catalog_gpu("h100-sxm");
  req.rates = device_rates(req.gpu);
  req.batch = 1;
  req.context = 4096;
  EstimateChoice choice = choose_estimator(req.gpu, nullptr);
  req.rates.estimate = choice.estimator;
  req.rates.estimate_note = choice.note;

  RooflineResult r = compute_roofline(req);
  REQUIRE(r.estimate);
  CHECK(r.estimate_note == choice.note);
  CHECK(r.estimate->time_s >= r.time_s);
  double sum = 0;
  for (const Op& o : r.ops) {
    CHECK(o.estimate_s >= o.time_s);
    sum += o.estimate_s;
  }
  CHECK(sum == Approx(r.estimate->compute_s + r.estimate->communication_s).epsilon(1e-12));
  CHECK(r.estimate->communication_s == 0); // one GPU
  // The H100 profile has no step overhead: the step is its one stage.
  CHECK(r.estimate->time_s == Approx(r.estimate->stage_s).epsilon(1e-12));

  // The attention core by hand: 32 layers, 8 KV heads × (128 + 128) × 2 B = 4,096 B a token
  // a layer, 4,096 tokens: 536,870,912 B of cache, 16,777,216 B a call. The H100's bf16
  // decode curve between 8e6 (0.416) and 32e6 (0.524): η = 0.416 + 0.108 · ln(2.097152) /
  // ln 4 = 0.416 + 0.108 · 0.740580 / 1.386294 = 0.416 + 0.108 · 0.534216 = 0.473695. Its
  // bytes add the query and output, 1 token × 32 heads × 256 × 2 B × 32 layers = 524,288 B:
  // 537,395,200 / (0.473695 × 3.35e12) = 338.65 µs (compute 2 × 32 × 4,096 × 256 × 32 FLOP /
  // (0.67 × 989.4e12) = 3.2 µs); 32 floors of 8.3 µs = 265.6 µs: 604.25 µs.
  const Op* core = nullptr;
  for (const Op& o : r.ops) {
    core = o.name == "attention.core" ? &o : core;
  }
  REQUIRE(core);
  REQUIRE(core->kv_bytes == 536870912);
  REQUIRE(core->activation_bytes == 524288);
  double eta = 0.416 + 0.108 * std::log(16777216 / 8e6) / std::log(4.0);
  CHECK(eta == Approx(0.473695).epsilon(1e-6));
  CHECK(core->estimate_s == Approx(32 * 8.3e-6 + 537395200 / (eta * 3.35e12)).epsilon(1e-12));
  CHECK(core->estimate_s == Approx(604.25e-6).epsilon(1e-4));

  // StepCost prices the same step the same way.
  StepCost cost(req);
  StepLoad load;
  cost.add(load, Phase::decode, 1, 4095, 1, 1);
  CHECK(cost.time_s(load, Pricing::estimate) == Approx(r.estimate->stage_s).epsilon(1e-12));
  CHECK(cost.time_s(load, Pricing::bound) == Approx(r.stage_s).epsilon(1e-12));

  // Without an estimator, no estimate (and the bound unchanged).
  req.rates.estimate = nullptr;
  RooflineResult bound_only = compute_roofline(req);
  CHECK_FALSE(bound_only.estimate);
  CHECK(bound_only.time_s == Approx(r.time_s).epsilon(1e-12));
  for (const Op& o : bound_only.ops) {
    CHECK(o.estimate_s == 0);
  }
}

// DSA's indexer is priced on the attention kernels with weights of its own (its query, key and
// head-weight projections), which its estimate streams as the bound does.
TEST_CASE("the DSA indexer's estimate streams its projections' weights", "[estimate][roofline]") {
  RooflineRequest req;
  req.model = *model::find_builtin_model("deepseek-v3.2");
  req.gpu = catalog_gpu("h100-sxm");
  req.rates = device_rates(req.gpu);
  req.parallel.tp = 8;
  req.batch = 1;
  req.context = 4096;
  req.rates.estimate = choose_estimator(req.gpu, nullptr).estimator;
  RooflineResult r = compute_roofline(req);
  const Op* indexer = nullptr;
  for (const Op& o : r.ops) {
    CHECK(o.estimate_s >= o.time_s);
    indexer = o.name == "attention.indexer" ? &o : indexer;
  }
  REQUIRE(indexer);
  // Per layer, 64 heads × 128 × 1,536 (the query's low rank) + (128 + 64) × 7,168 (keys and
  // head weights from the hidden state) = 12,582,912 + 1,376,256 = 13,959,168 bf16 values,
  // 27,918,336 B; 61 layers: 1,703,018,496 B. The keys: 4,096 tokens × (128 fp8 + a 4 B scale)
  // × 61 = 32,980,992 B. Activations: 1 token × (7,168 + 64 × 128) × 2 B × 61 = 1,873,920 B.
  REQUIRE(indexer->weight_bytes == 1703018496);
  REQUIRE(indexer->kv_bytes == 32980992);
  REQUIRE(indexer->activation_bytes == 1873920);
  // The bound: 1,737,873,408 B / 3.35e12 = 518.77 µs.
  CHECK(indexer->time_s == Approx(518.77e-6).epsilon(1e-5));
  // The estimate, on the H100's fp8 decode kernel: 61 floors of 5.5 µs = 335.5 µs; 540,672 B
  // of keys a call, below the curve's first point (8e6 B): η 0.338, (32,980,992 + 1,873,920) /
  // (0.338 × 3.35e12) = 30.78 µs; the weights at the bf16 GEMM's 0.854: 1,703,018,496 /
  // (0.854 × 3.35e12) = 595.27 µs (compute, 5.8e9 FLOP / (0.67 × 1978.9e12) = 4.4 µs, is
  // under it): 961.55 µs. Without the weights it would be 366.3 µs, under the bound.
  CHECK(indexer->estimate_s ==
        Approx(61 * 5.5e-6 + 34854912 / (0.338 * 3.35e12) + 1703018496 / (0.854 * 3.35e12))
            .epsilon(1e-12));
  CHECK(indexer->estimate_s == Approx(961.55e-6).epsilon(1e-5));
}

TEST_CASE("a GPU whose link differs from its profile's prices all-reduces at the link fractions",
          "[estimate][collective]") {
  // The H800 borrows the H100's efficiencies, but the H100's all-reduce tables are times over
  // 450 GB/s each way; the H800's NVLink is 200 GB/s each way.
  EstimateChoice h800 = choose_estimator(catalog_gpu("h800"), nullptr);
  REQUIRE(h800.estimator);
  CHECK(h800.estimator->profile().all_reduce_graph.empty());
  CHECK(h800.estimator->profile().all_reduce_eager.empty());
  CHECK_THAT(h800.note, Catch::Contains("priced at the link's measured fraction"));
  // The H100, B300 (same NVLink as the B200) keep theirs.
  CHECK_FALSE(choose_estimator(catalog_gpu("h100-sxm"), nullptr)
                  .estimator->profile()
                  .all_reduce_graph.empty());
  CHECK_FALSE(
      choose_estimator(catalog_gpu("b300"), nullptr).estimator->profile().all_reduce_graph.empty());

  // A prefill all-reduce of a 128 MiB buffer over 8 H800s: the bound is two-shot, 2α + 1.75 ×
  // 134,217,728 / 200e9 = 1,174.4 µs + 2α; the estimate at the scale-up fraction 0.824 takes
  // 1.75 × 134,217,728 / (0.824 × 200e9) = 1,425.2 µs + 2α: slower than the bound, as it must be.
  const Gpu& gpu = catalog_gpu("h800");
  RooflineRequest req;
  req.model = *model::find_builtin_model("llama-3.1-70b");
  req.gpu = gpu;
  req.rates = device_rates(gpu);
  req.rates.links.domain = 8;
  req.rates.estimate = h800.estimator;
  req.parallel.tp = 8;
  req.phase = Phase::prefill;
  req.context = 8192;
  RooflineResult r = compute_roofline(req);
  REQUIRE(r.estimate);
  for (const Op& o : r.ops) {
    if (o.name == "tp.all_reduce") {
      CHECK(o.estimate_s >= o.time_s);
      double one = o.estimate_s / o.collectives;
      CHECK(one - o.collective->latency_s ==
            Approx(1.75 * 134217728.0 / (0.824 * 200e9)).epsilon(1e-9));
    }
  }
}

TEST_CASE("a state layer launches one GEMM for each of its matmuls", "[estimate][roofline]") {
  // Mamba-1 (mamba-2.8b): in_proj, x_proj, dt_proj and out_proj, four a layer, 64 layers: at
  // batch 1 the floors alone are 4 × 64 × 4.3 µs = 1,100.8 µs of state.proj's estimate.
  RooflineRequest req;
  req.model = *model::find_builtin_model("mamba-2.8b");
  req.gpu = catalog_gpu("h100-sxm");
  req.rates = device_rates(req.gpu);
  req.rates.estimate = choose_estimator(req.gpu, nullptr).estimator;
  req.batch = 1;
  req.context = 1024;
  RooflineResult r = compute_roofline(req);
  bool seen = false;
  for (const Op& o : r.ops) {
    if (o.name == "state.proj") {
      seen = true;
      // Weights streamed beyond the floors: the op's bytes at 0.854 × 3.35e12.
      CHECK(o.estimate_s == Approx(4 * 64 * 4.3e-6 + o.bytes / (0.854 * 3.35e12)).epsilon(1e-9));
    }
  }
  CHECK(seen);
}
