#include <catch2/catch.hpp>

#include <cmath>

#include <cpu/mla_decode.hpp>
#include <cpu/probes.hpp>

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
  CHECK(fma > 1e8);
  CHECK(fma < 1e13);
  double gemm = measure_gemm_flops(128, 1, 1);
  CHECK(gemm > 1e7);
  CHECK(gemm < 1e13);
  CHECK(last_level_cache_bytes() >= (1ULL << 20));
}
