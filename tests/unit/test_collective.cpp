#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include <kvcalc/roofline/collective.hpp>

using namespace kvcalc;
using namespace kvcalc::roofline;

namespace {

/// An H800 board: 8 GPUs on NVLink at 200 GB/s a direction, a 400 Gb/s NIC each.
Topology h800() {
  return {"h800", 8, 200e9, 0.6e-6, 50e9, 2.7e-6};
}

} // namespace

TEST_CASE("an all-reduce inside a domain takes the faster of one-shot and two-shot",
          "[roofline][collective]") {
  // 1 MiB: one-shot 0.6 µs + 7 × 1,048,576 B / 200 GB/s = 37.30 µs; two-shot 1.2 µs +
  // 2 × 7/8 × 1,048,576 B / 200 GB/s = 10.375 µs.
  Collective big = all_reduce(h800(), 8, 1048576);
  CHECK(big.algorithm == "two-shot");
  CHECK(big.time_s == Approx(10.375e-6));
  CHECK(big.up_bytes == Approx(1835008));
  CHECK(big.out_bytes == 0);
  CHECK(big.link() == "scale-up");
  // 1 KiB: one-shot 0.6 µs + 7,168 B / 200 GB/s = 0.63584 µs beats two-shot's 1.20896 µs.
  Collective small = all_reduce(h800(), 8, 1024);
  CHECK(small.algorithm == "one-shot");
  CHECK(small.time_s == Approx(0.63584e-6));
  CHECK(all_reduce(h800(), 1, 1048576).time_s == 0);
}

TEST_CASE("an all-reduce across domains is reduce-scatter, all-reduce over the NICs, all-gather",
          "[roofline][collective]") {
  // 16 GPUs = 2 boards of 8. Inside: 0.6 µs + 7/8 × 1 MiB / 200 GB/s = 5.1875 µs, twice. Across
  // 2 domains, 1/8 of the buffer (131,072 B): one-shot 2.7 µs + 131,072 / 50 GB/s = 5.32144 µs
  // (two-shot 8.02144 µs). Total 15.69644 µs.
  Collective c = all_reduce(h800(), 16, 1048576);
  CHECK(c.domains == 2);
  CHECK(c.time_s == Approx(15.69644e-6));
  CHECK(c.out_bytes == Approx(131072));
  CHECK(c.up_bytes == Approx(2 * 7.0 / 8 * 1048576));
  CHECK(c.latency_s == Approx(2 * 0.6e-6 + 2.7e-6));
  CHECK(c.link() == "scale-up+out");
}

TEST_CASE("expert dispatch crosses to each domain once per token", "[roofline][collective]") {
  // EP32 over 4 boards, 1,000 tokens of 7,392 B to 8 experts each: a token reaches each of the
  // 3 other boards with probability 1 − 0.75^8, so 3 × 0.8999 = 2.6997 NIC copies; NVLink
  // carries 8 × 7/32 = 1.75 direct copies and forwards 8 × 24/32 × 7/8 = 5.25.
  Collective c = expert_exchange(h800(), 32, 1000, 8, 7392);
  double remote = 3 * (1 - std::pow(0.75, 8));
  CHECK(c.domains == 4);
  CHECK(c.out_bytes == Approx(1000 * remote * 7392));
  CHECK(c.up_bytes == Approx(1000 * 7.0 * 7392));
  CHECK(c.time_s ==
        Approx(2.7e-6 + std::max(1000 * 7.0 * 7392 / 200e9, 1000 * remote * 7392 / 50e9)));
  // DeepEP's low-latency benchmark at EP128 (16 boards, 128 tokens, top-8): 192 µs to dispatch,
  // 369 µs to combine, measured; the bound for that traffic is below both.
  double copies = 15 * (1 - std::pow(15.0 / 16, 8));
  Collective dispatch = expert_exchange(h800(), 128, 128, 8, 7392);
  Collective combine = expert_exchange(h800(), 128, 128, 8, 14336);
  CHECK(dispatch.time_s == Approx(2.7e-6 + 128 * copies * 7392 / 50e9));
  CHECK(dispatch.time_s == Approx(117.2e-6).epsilon(0.005));
  CHECK(combine.time_s == Approx(224.7e-6).epsilon(0.005));
  CHECK(dispatch.time_s < 192e-6);
  CHECK(combine.time_s < 369e-6);
  // Inside one board there is nothing to deduplicate: 8 × 7/8 copies over NVLink.
  Collective board = expert_exchange(h800(), 8, 1000, 8, 7392);
  CHECK(board.out_bytes == 0);
  CHECK(board.up_bytes == Approx(1000 * 7.0 * 7392));
}

TEST_CASE("groups are packed into domains, and leaving one needs a NIC", "[roofline][collective]") {
  CHECK(group_in_domain(h800(), 4) == 4);
  CHECK(group_in_domain(h800(), 12) == 4); // 12 GPUs on 8-GPU boards: 3 groups of 4
  CHECK(group_in_domain(h800(), 144) == 8);
  Topology pcie{"rtx-4090", 8, 32e9, 2.7e-6, 0, 0};
  CHECK_NOTHROW(all_reduce(pcie, 8, 1e6));
  CHECK_THROWS_WITH(all_reduce(pcie, 16, 1e6), Catch::Contains("no scale_out link"));
  CHECK_THROWS_WITH(expert_exchange(pcie, 16, 100, 8, 1e4), Catch::Contains("--gpu-file"));
  // A point-to-point send: 1 MB over the NIC, 2.7 µs + 20 µs.
  CHECK(send(h800(), true, 1e6).time_s == Approx(22.7e-6));
  CHECK(send(h800(), false, 1e6).time_s == Approx(5.6e-6));
}
