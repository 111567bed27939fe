#include <catch2/catch.hpp>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <vector>

#include <kvcalc/kernels/cpu/mla_decode.hpp>
#include <kvcalc/kernels/cpu/probes.hpp>

// Private to the kernels, tested here directly.
#include "../../kernels/cpu/attention_tiles.hpp"
#include "../../kernels/cpu/thread_pool.hpp"
#include "../../kernels/cuda/mla_values.hpp"

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
      // FlashMLA's test bar, as measure applies it: on a machine with bf16 pair dot
      // products the absorbed query is rounded to bf16, as on the GPU.
      CHECK(a.elements_over_bar == 0);
      INFO("cos diff " << a.cos_diff << ", max |err| " << a.max_abs_error);
    }
    std::vector<double> absorbed_as_double(absorbed.begin(), absorbed.end());
    CHECK(compare(naive, absorbed_as_double).cos_diff <= 1e-5);
  }
}

TEST_CASE("the absorbed kernel's tiles cover every shape remainder and split", "[kernels][mla]") {
  // Rows of a sequence (heads × query) below, at and above one vector (the dot and the broadcast
  // tiles), tiles cut short in rows, tokens and columns, a latent width that is not a whole
  // number of vectors, short pages, and more threads than sequences (split-KV). One and two
  // rows take the wider weighted-sum tiles, here cut short in columns too. 2100 tokens in pages
  // of 48 give the naive kernel three chunks, the first two ending inside a page.
  struct Case {
    std::uint64_t batch, heads, query, context, d_c, d_r, block;
    unsigned threads;
  };
  for (const Case& c : {Case{2, 16, 1, 200, 512, 64, 64, 2}, Case{1, 20, 1, 130, 512, 64, 64, 4},
                        Case{3, 5, 3, 37, 40, 8, 16, 2}, Case{1, 1, 1, 300, 512, 64, 64, 3},
                        Case{2, 33, 2, 70, 72, 8, 32, 5}, Case{5, 7, 1, 1, 24, 4, 8, 2},
                        Case{2, 2, 1, 90, 208, 8, 32, 2}, Case{3, 1, 2, 75, 48, 16, 16, 2},
                        Case{2, 3, 2, 2100, 40, 8, 48, 2}}) {
    INFO("batch " << c.batch << " heads " << c.heads << " query " << c.query << " context "
                  << c.context << " d_c " << c.d_c << " d_r " << c.d_r << " block " << c.block
                  << " threads " << c.threads);
    MlaShape shape;
    shape.batch = c.batch;
    shape.heads = c.heads;
    shape.query = c.query;
    shape.context = c.context;
    shape.d_c = c.d_c;
    shape.d_r = c.d_r;
    shape.d_nope = 16;
    shape.d_v = 24;
    shape.block = c.block;
    MlaInputs in = make_mla_inputs(shape, 11);
    CHECK(reinterpret_cast<std::uintptr_t>(in.cache.data()) % 64 == 0); // pages start on lines
    std::vector<double> ref = mla_decode_reference(in);
    MlaOutput absorbed;
    mla_decode_absorbed(in, absorbed, c.threads);
    REQUIRE(absorbed.size() == ref.size());
    Agreement a = compare(absorbed, ref);
    CHECK(a.finite);
    CHECK(a.cos_diff <= 1e-5);
    CHECK(a.elements_over_bar == 0);
    MlaOutput naive;
    mla_decode_naive(in, naive, c.threads);
    CHECK(compare(naive, ref).elements_over_bar == 0);
  }
}

TEST_CASE("bf16 bits: nearest with ties to even, NaN kept, widened exactly", "[kernels]") {
  CHECK(bf16_bits(1.0f) == 0x3F80);
  CHECK(bf16_bits(-2.0f) == 0xC000);
  CHECK(bf16_bits(1.0f + 1.0f / 256) == 0x3F80); // halfway: to even
  CHECK(bf16_bits(1.0f + 3.0f / 256) == 0x3F82); // halfway: up to even
  CHECK(std::isnan(bf16_value(bf16_bits(NAN))));
  CHECK(bf16_value(0x4049) == 3.140625f);
  // The vector widening in the kernels agrees with the scalar one on every bit pattern.
  std::vector<std::uint16_t> all(65536);
  for (std::size_t i = 0; i < all.size(); ++i) {
    all[i] = static_cast<std::uint16_t>(i);
  }
  std::vector<float> wide(all.size() + 3);
  kvcalc::kernels::tiles::widen_all(all.data() + 3, all.size() - 3, wide.data()); // unaligned
  for (std::size_t i = 3; i < all.size(); ++i) {
    float want = bf16_value(all[i]);
    if (std::isnan(want)) {
      REQUIRE(std::isnan(wide[i - 3]));
    } else {
      REQUIRE(std::memcmp(&wide[i - 3], &want, sizeof want) == 0);
    }
  }
}

TEST_CASE("the kernels' lane sum adds every lane", "[kernels]") {
  namespace simd = kvcalc::kernels::simd;
  simd::Vec v;
  float total = 0;
  for (int i = 0; i < simd::k_lanes; ++i) {
    v[i] = static_cast<float>(1 << i); // each lane a different bit: a missed lane shows
    total += v[i];
  }
  CHECK(simd::sum(v) == total);
}

TEST_CASE("the kernels' vector exp is within a few ulp of std::exp", "[kernels]") {
  namespace simd = kvcalc::kernels::simd;
  double worst = 0;
  for (float x = -87.0f; x <= 88.0f; x += 0.0137f) {
    float got = simd::exp(simd::splat(x))[0];
    double want = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::fabs(got - want) / want);
  }
  CHECK(worst < 4 * 1.2e-7); // a few ulp of fp32
  CHECK(simd::exp(simd::splat(0.0f))[0] == 1.0f);
  float tiny = simd::exp(simd::splat(-INFINITY))[0]; // the online softmax's first rescale
  CHECK(tiny >= 0.0f);
  CHECK(tiny < 1e-37f);
  CHECK(std::isnan(simd::exp(simd::splat(NAN))[0]));
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

TEST_CASE("a disagreement is described by where it lies", "[kernels]") {
  // Output [2 sequences][2 query rows][8 heads][4 columns], every value 1 (rms 1, so the bar is
  // 0.0157 everywhere).
  MlaShape s;
  s.batch = 2;
  s.query = 2;
  s.heads = 8;
  s.d_v = 4;
  std::vector<double> want(2 * 2 * 8 * 4, 1.0);
  std::vector<float> got(want.begin(), want.end());
  CHECK(describe_misses(got, want, s).empty());

  // Heads 4–7 of query row 1 in sequence 1, columns 2–3, off by 0.5; one of them NaN.
  auto at = [&](std::size_t b, std::size_t q, std::size_t h, std::size_t c) -> float& {
    return got[((b * 2 + q) * 8 + h) * 4 + c];
  };
  for (std::size_t h = 4; h < 8; ++h) {
    at(1, 1, h, 2) = 1.5f;
    at(1, 1, h, 3) = 1.5f;
  }
  at(1, 1, 6, 3) = NAN;
  at(0, 0, 0, 0) = 1.01f; // within the bar: not counted
  CHECK(describe_misses(got, want, s) ==
        "8 of 128 elements miss the bar (1 not finite): sequences 1 of 2, query rows 1 of 2, "
        "heads 4–7 of 8, columns 2–3 of 4; the worst, sequence 1 query 1 head 6 column 3: nan "
        "against 1");
  CHECK(compare(got, want).elements_over_bar == 128); // compare: a NaN fails every element

  // Ranges: every other head, more than six runs of them, and a column everywhere.
  got.assign(want.begin(), want.end());
  for (std::size_t h = 0; h < 8; h += 2) {
    for (std::size_t b = 0; b < 2; ++b) {
      for (std::size_t q = 0; q < 2; ++q) {
        at(b, q, h, 0) = 0.0f;
      }
    }
  }
  CHECK(describe_misses(got, want, s) ==
        "16 of 128 elements miss the bar (0 not finite): sequences all 2, query rows all 2, "
        "heads 0, 2, 4, 6 of 8, columns 0 of 4; the worst, sequence 0 query 0 head 0 column 0: 0 "
        "against 1");
  s.heads = 16;
  s.d_v = 2; // the same values read as 16 heads of 2 columns: misses at heads 0, 4, 8, 12
  std::string text = describe_misses(got, want, s);
  CHECK(text.find("heads 0, 4, 8, 12 of 16, columns 0 of 2") != std::string::npos);
  // Every other element missing, read as [4 sequences][1 query row][32 heads][1 column]:
  // sixteen runs of heads, six listed.
  for (std::size_t i = 0; i < got.size(); ++i) {
    got[i] = i % 2 == 0 ? 0.0f : 1.0f;
  }
  s.query = 1;
  s.heads = 32;
  s.d_v = 1;
  CHECK(describe_misses(got, want, s) ==
        "64 of 128 elements miss the bar (0 not finite): sequences all 4, query rows all 1, "
        "heads 0, 2, 4, 6, 8, 10, … of 32, columns all 1; the worst, sequence 0 query 0 head 0 "
        "column 0: 0 against 1");
  s.d_v = 0;
  CHECK_THROWS_AS(describe_misses(got, want, s), std::invalid_argument);
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
  CHECK(bw.triad_bytes_per_s.median > 1e8);  // well below any real machine
  CHECK(bw.triad_bytes_per_s.median < 1e13); // well above any real CPU socket
  CHECK(std::isfinite(bw.checksum));
  double fma = measure_fma_flops(1, 0.02);
  // The ASan build runs this at -O0, on a shared machine: 1e8 was seen missed by 5% there.
  CHECK(fma > 1e7);
  CHECK(fma < 1e13);
  double bf16 = measure_fma_bf16_flops(1, 0.02);
  if (KVCALC_SIMD_BF16_PAIRS != 0) {
    CHECK(bf16 > 1e7);
    CHECK(bf16 < 1e13);
  } else {
    CHECK(bf16 == 0);
  }
  Spread gemm = measure_gemm_flops({128, 64, 32}, 1, 3);
  CHECK(gemm.runs == 3);
  CHECK(gemm.min <= gemm.median);
  CHECK(gemm.median <= gemm.max);
  CHECK(gemm.median > 1e7);
  CHECK(gemm.median < 1e13);
  // A cache-sized array read over and over: faster than nothing, within what a core can load.
  Spread cached = measure_read_bandwidth(256ULL << 10, 1, 3);
  CHECK(cached.runs == 3);
  CHECK(cached.min <= cached.median);
  CHECK(cached.median > 1e8);
  CHECK(cached.median < 1e13);
}

TEST_CASE("the absorbed page probe times the kernel's page at a shape's rows",
          "[kernels][probes]") {
  MlaShape shape;
  shape.heads = 16;
  shape.query = 1;
  // 2 · 16 rows · 64 tokens · (2 · 512 + 64).
  CHECK(absorbed_page_flops(shape) == 2'228'224.0);
  shape.heads = 8;
  shape.query = 2;
  CHECK(absorbed_page_flops(shape) == 2'228'224.0);
  Spread page = measure_absorbed_page_flops(shape, 2, 3);
  CHECK(page.runs == 3);
  CHECK(page.min <= page.median);
  CHECK(page.median <= page.max);
  CHECK(page.median > 1e7);
  CHECK(page.median < 1e13);
  // One row: the few-row tiles, on the bf16 page.
  shape.heads = 1;
  shape.query = 1;
  CHECK(absorbed_page_flops(shape) == 139'264.0);
  Spread one = measure_absorbed_page_flops(shape, 1, 2);
  CHECK(one.runs == 2);
  CHECK(one.median > 1e7);
  CHECK(one.median < 1e13);
  shape.heads = 0;
  CHECK_THROWS_AS(measure_absorbed_page_flops(shape, 1, 1), std::invalid_argument);
}

TEST_CASE("cache levels are the L2 and beyond, innermost first, counted for the threads",
          "[kernels][probes]") {
  std::vector<CacheLevel> one = cache_levels(1);
  std::vector<CacheLevel> many = cache_levels(4096);
  REQUIRE(one.size() == many.size());
  for (std::size_t i = 0; i < one.size(); ++i) {
    CHECK(one[i].level >= 2);
    CHECK(one[i].bytes_each > 0);
    CHECK(one[i].instances == 1);
    CHECK(many[i].bytes_each == one[i].bytes_each);
    CHECK(many[i].instances >= 1);
    if (i > 0) {
      CHECK(one[i].level > one[i - 1].level);
    }
  }
}

TEST_CASE("the read probe sums every element of its array", "[kernels][probes]") {
  // Split over three threads into ranges of whole vector groups (of 32, 64 or 128 floats) and
  // a remainder: 2,097,252 floats; 384,002, whose third is a whole number of groups and
  // leaves two over; fewer floats than threads.
  for (std::uint64_t n : {2'097'252ULL, 384'002ULL, 2ULL}) {
    BandwidthResult bw = measure_bandwidth(n * sizeof(float), 3, 1);
    // One read pass of ones, then the checksum's looks at b (copied from a: 1) and a (the
    // triad after it: 1 + 0.5 · 0.5).
    CHECK(bw.checksum == static_cast<double>(n) + 1.0 + 1.25);
  }
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

TEST_CASE("the kernel thread pool runs every index once, on numbered threads", "[kernels][pool]") {
  // Many short jobs with changing thread counts: a worker that missed or repeated a job would
  // leave an index unrun, run one twice, or hang the next call.
  for (int round = 0; round < 300; ++round) {
    for (unsigned threads : {1u, 2u, 3u, 5u}) {
      for (std::uint64_t count : {0ULL, 1ULL, 2ULL, 7ULL, 64ULL}) {
        std::vector<std::atomic<int>> runs(count);
        std::atomic<bool> worker_in_range{true};
        kvcalc::kernels::parallel_for(count, threads, [&](std::uint64_t i, unsigned worker) {
          runs[i].fetch_add(1);
          if (worker >= threads) {
            worker_in_range = false;
          }
        });
        for (std::uint64_t i = 0; i < count; ++i) {
          REQUIRE(runs[i].load() == 1);
        }
        REQUIRE(worker_in_range.load());
      }
    }
  }
}

TEST_CASE("an exception in a pool task reaches the caller, and the pool goes on",
          "[kernels][pool]") {
  std::atomic<int> done{0};
  auto failing = [&](std::uint64_t i, unsigned /*worker*/) {
    if (i == 3) {
      throw std::runtime_error("task 3 failed");
    }
    done.fetch_add(1);
  };
  CHECK_THROWS_WITH(kvcalc::kernels::parallel_for(10, 2, failing), "task 3 failed");
  CHECK(done.load() == 9); // the other tasks still ran
  std::atomic<int> after{0};
  kvcalc::kernels::parallel_for(10, 2, [&](std::uint64_t, unsigned) { after.fetch_add(1); });
  CHECK(after.load() == 10);
}
