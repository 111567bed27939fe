#include <catch2/catch.hpp>

#include <cmath>

#include <cpu/mla_decode.hpp>
#include <cpu/probes.hpp>
#include <cuda/mla_values.hpp>

using namespace kvcalc::kernels;

namespace {

MlaShape small(std::uint64_t query) {
  MlaShape s;
  s.batch = 3;
  s.heads = 4;
  s.query = query;
  s.context = 130; // three pages of 64, the last one mostly NaN
  return s;
}

} // namespace

TEST_CASE("bf16 rounding is round-to-nearest-even", "[kernels]") {
  CHECK(round_bf16(1.0f) == 1.0f);
  CHECK(round_bf16(1.0f + 1.0f / 256) == 1.0f);             // exactly halfway: to even
  CHECK(round_bf16(1.0f + 3.0f / 256) == 1.0f + 1.0f / 64); // halfway up: to even
  CHECK(std::isnan(round_bf16(NAN)));
}

TEST_CASE("both MLA decode kernels match the double reference", "[kernels][mla]") {
  for (std::uint64_t query : {1ULL, 2ULL}) {
    INFO("query " << query);
    MlaInputs in = make_mla_inputs(small(query), 42);
    std::vector<double> ref = mla_decode_reference(in);
    MlaOutput absorbed;
    MlaOutput naive;
    mla_decode_absorbed(in, absorbed, 2);
    mla_decode_naive(in, naive, 2);
    for (const MlaOutput* out : {&absorbed, &naive}) {
      Agreement a = compare(*out, ref);
      CHECK(a.finite);
      CHECK(a.cos_diff <= 1e-5);
      CHECK(a.max_abs_error <= 8e-4);
    }
    std::vector<double> absorbed_as_double(absorbed.begin(), absorbed.end());
    CHECK(compare(naive, absorbed_as_double).cos_diff <= 1e-5);
  }
}

TEST_CASE("reading a NaN-filled page tail never passes", "[kernels][mla]") {
  MlaInputs in = make_mla_inputs(small(1), 7);
  std::vector<double> ref = mla_decode_reference(in);
  in.shape.context += 1; // the kernels now read one row of the NaN tail
  MlaOutput out;
  mla_decode_absorbed(in, out, 1);
  Agreement a = compare(out, ref);
  CHECK_FALSE(a.finite);
  CHECK(std::isnan(a.cos_diff));
}

TEST_CASE("the per-element bar: absolute, or relative floored at the output's RMS", "[kernels]") {
  // want = {1, 0, −1, 0}: rms = √(2/4) = 0.7071; relative bar 2.01/128 = 0.0157.
  std::vector<double> want{1.0, 0.0, -1.0, 0.0};
  // 1e-3 off at |y| = 1 (0.1%): inside. 5e-3 off at y = 0: over 8e-4 but under
  // 0.0157 × 0.7071 = 0.0111, so inside.
  Agreement ok = compare({1.001f, 0.005f, -1.0f, 0.0f}, want);
  CHECK(ok.elements_over_bar == 0);
  CHECK(ok.max_abs_error == Approx(0.005).epsilon(1e-4));
  // 0.02 off at y = 0 is over both bars; 0.0005 off anywhere is under the absolute one.
  Agreement bad = compare({1.0f, 0.02f, -1.0005f, 0.0f}, want);
  CHECK(bad.elements_over_bar == 1);
  // cos diff of {1, 0, −1, 0} against itself with one element 0.02 off: 0.02² / 4.0004.
  CHECK(bad.cos_diff == Approx(0.0004 / 4.0004 + 0.0005 * 0.0005 / 4.0004).epsilon(0.05));
}

TEST_CASE("bad kernel inputs are refused before any work", "[kernels]") {
  MlaInputs in = make_mla_inputs(small(1), 1);
  in.block_table[0] = 1000000;
  MlaOutput out;
  CHECK_THROWS_AS(mla_decode_naive(in, out, 1), std::invalid_argument);
  in = make_mla_inputs(small(1), 1);
  in.w_uk.pop_back();
  CHECK_THROWS_AS(mla_decode_absorbed(in, out, 1), std::invalid_argument);
}

TEST_CASE("CPU probes return sane figures (smoke)", "[kernels][probes]") {
  BandwidthResult bw = measure_bandwidth(8ULL << 20, 1, 1);
  CHECK(bw.triad_bytes_per_s > 1e8);  // well below any real machine
  CHECK(bw.triad_bytes_per_s < 1e13); // well above any real CPU socket
  CHECK(std::isfinite(bw.checksum));
  double fma = measure_fma_flops(1, 0.02);
  // The ASan build runs this at -O0, on a shared machine: 1e8 was seen missed by 5% there.
  CHECK(fma > 1e7);
  CHECK(fma < 1e13);
  double gemm = measure_gemm_flops(128, 1, 1);
  CHECK(gemm > 1e7);
  CHECK(gemm < 1e13);
  CHECK(last_level_cache_bytes() >= (1ULL << 20));
}

TEST_CASE("the CUDA test data generator is reproducible bf16 with the asked variance",
          "[kernels][cuda]") {
  using namespace kvcalc::kernels::cuda;
  // Host and device evaluate the same integer hash and one float rounding; on the host it must
  // give bf16 values (low 16 bits zero once widened) with mean ≈ 0 and variance ≈ scale².
  const float half = static_cast<float>(std::sqrt(3.0) * 0.25); // unit variance × 0.25
  double sum = 0;
  double squares = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    std::uint16_t bits = mla_value_bits(99, MlaTensor::cache, static_cast<std::uint64_t>(i), half);
    float v = bf16_bits_to_float(bits);
    REQUIRE(round_bf16(v) == v);
    REQUIRE(std::fabs(v) <= half * 1.004f); // the bound, plus one bf16 rounding step
    sum += v;
    squares += static_cast<double>(v) * v;
  }
  double mean = sum / n;
  CHECK(std::fabs(mean) < 0.002);
  CHECK(squares / n - mean * mean == Approx(0.0625).epsilon(0.01));
  // Deterministic, and independent across tensors and seeds.
  CHECK(mla_value_bits(1, MlaTensor::query, 5, 1.0f) ==
        mla_value_bits(1, MlaTensor::query, 5, 1.0f));
  CHECK(mla_value_bits(1, MlaTensor::query, 5, 1.0f) !=
        mla_value_bits(1, MlaTensor::w_uk, 5, 1.0f));
  CHECK(mla_value_bits(1, MlaTensor::query, 5, 1.0f) !=
        mla_value_bits(2, MlaTensor::query, 5, 1.0f));
}
