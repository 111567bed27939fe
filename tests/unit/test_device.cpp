#include <catch2/catch.hpp>

#include <set>

#include <kvcalc/device/gpu.hpp>

using namespace kvcalc;
using namespace kvcalc::device;

TEST_CASE("the catalog has every required GPU with every field", "[device]") {
  GpuCatalog catalog;
  for (const char* name : {"a100-sxm-40gb",
                           "a100-sxm-80gb",
                           "a100-pcie-40gb",
                           "a100-pcie-80gb",
                           "h100-sxm",
                           "h100-pcie",
                           "h100-nvl",
                           "h800",
                           "h20",
                           "h200",
                           "b200",
                           "gb200",
                           "l40s",
                           "l4",
                           "rtx-3090",
                           "rtx-4090",
                           "rtx-5090",
                           "mi300x",
                           "mi325x",
                           "a10g",
                           "h20-3e",
                           "h200-nvl",
                           "b300",
                           "gb300",
                           "l20",
                           "rtx-pro-6000-blackwell-server",
                           "rtx-pro-6000-blackwell-workstation",
                           "mi355x"}) {
    INFO(name);
    const Gpu& g = catalog.find(name);
    CHECK(g.name == name);
    CHECK(!g.source.empty());
    CHECK(!g.display_name.empty());
    // Usable memory is what the driver reports: a little under the nominal capacity.
    CHECK(g.memory_bytes <= g.memory_nominal_bytes);
    CHECK(g.memory_bytes * 100 >= g.memory_nominal_bytes * 90);
    CHECK(g.memory_bandwidth_bytes_per_s > 1e11);
    CHECK(g.flops_per_s.bf16.has_value());
    CHECK(g.flops_per_s.fp32.has_value());
    CHECK(g.sm_count > 0);
    CHECK(g.l2_bytes > 0);
    CHECK(g.interconnect_bytes_per_s > 0);
    CHECK(g.not_given.empty());
    CHECK(!g.architecture.empty());
    // Dense figures: fp8 is twice bf16 where it exists, never four times (a sparse figure).
    if (g.flops_per_s.fp8) {
      CHECK(*g.flops_per_s.fp8 == Approx(2 * *g.flops_per_s.bf16).epsilon(0.03));
    }
  }
}

TEST_CASE("ridge points match the reference figures", "[device]") {
  GpuCatalog catalog;
  auto ridge = [&](const char* name) {
    const Gpu& g = catalog.find(name);
    return *g.flops_per_s.bf16 / g.memory_bandwidth_bytes_per_s;
  };
  // Datasheet quotients, dense bf16 over bandwidth: 989 T / 3.35 TB/s ≈ 295 (H100, H800),
  // 989 T / 4.8 TB/s ≈ 206 (H200), 312 T / 2.04 TB/s ≈ 153 (A100), 148 T / 4.0 TB/s ≈ 37 (H20).
  CHECK(ridge("h100-sxm") == Approx(295).epsilon(0.01));
  CHECK(ridge("h800") == Approx(295).epsilon(0.01));
  CHECK(ridge("h200") == Approx(206).epsilon(0.01));
  CHECK(ridge("a100") == Approx(153).epsilon(0.01));
  CHECK(ridge("h20") == Approx(37).epsilon(0.01));
}

TEST_CASE("names and aliases resolve in any case and suggest near misses", "[device]") {
  GpuCatalog catalog;
  CHECK(catalog.find("H100-SXM5-80GB").name == "h100-sxm");
  CHECK(catalog.find("h100").name == "h100-sxm");
  CHECK(catalog.find("3090").name == "rtx-3090");
  CHECK_THROWS_WITH(catalog.find("h2000"), Catch::Contains("unknown GPU 'h2000'; did you mean"));
  std::set<std::string> seen;
  for (const Gpu& g : catalog.gpus()) {
    CHECK(seen.insert(g.name).second);
  }
  CHECK(catalog.gpus().size() >= 16);
}

TEST_CASE("a user catalog is validated and its entries win", "[device]") {
  const char* good = R"(gpus:
  - name: h100-sxm
    vendor: nvidia
    architecture: hopper
    memory_bytes: 80000000000
    memory_nominal_bytes: 85899345920
    memory_bandwidth_bytes_per_s: 3.0e12
    flops_per_s: {bf16: 700e12}
    sm_count: 132
    l2_bytes: 52428800
    interconnect: {kind: nvlink4, bytes_per_s: 900e9}
    source: measured on our cluster
)";
  auto gpus = parse_gpu_catalog(good, "mine.yaml");
  REQUIRE(gpus.size() == 1);
  CHECK(gpus[0].memory_bandwidth_bytes_per_s == 3.0e12);
  std::string bad = good;
  bad.replace(bad.find("3.0e12"), 6, "fast");
  CHECK_THROWS_WITH(parse_gpu_catalog(bad, "mine.yaml"),
                    Catch::StartsWith("mine.yaml:7:35: 'gpus[0].memory_bandwidth_bytes_per_s' "
                                      "must be a number"));
  // Bundled entries state every figure; a user's may leave out what its commands do not use,
  // and the command that needs one names it.
  std::string partial = good;
  partial.erase(partial.find("    sm_count"),
                partial.find("    source") - partial.find("    sm_count"));
  CHECK_THROWS_WITH(parse_gpu_catalog(partial, "mine.yaml"),
                    Catch::Contains("missing required key 'sm_count'"));
  auto user = parse_gpu_catalog(partial, "mine.yaml", CatalogKind::user);
  REQUIRE(user.size() == 1);
  CHECK(user[0].not_given == std::vector<std::string>{"sm_count", "l2_bytes", "interconnect"});
  CHECK_NOTHROW(require_figures(user[0], {"memory_bandwidth_bytes_per_s"}, "the roofline"));
  CHECK_THROWS_WITH(require_figures(user[0], {"sm_count", "interconnect"}, "this"),
                    Catch::Contains("does not give sm_count and interconnect, which this needs"));
  std::string typo = good;
  typo.replace(typo.find("sm_count"), 8, "sm_cont");
  CHECK_THROWS_WITH(parse_gpu_catalog(typo, "mine.yaml"),
                    Catch::Contains("unknown key 'sm_cont'; did you mean 'sm_count'?"));
}
