#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>
#include <variant>

#include <kvcalc/model/registry.hpp>
#include <kvcalc/sim/simulator.hpp>
#include <kvcalc/sim/slo.hpp>
#include <kvcalc/sim/trace.hpp>

#include "../../src/sim/kv_pools.hpp"

using namespace kvcalc;
using namespace kvcalc::sim;
using namespace kvcalc::roofline;
using namespace kvcalc::kv;
using namespace kvcalc::device;
using namespace kvcalc::model;

namespace {

const Gpu& catalog_gpu(const char* name) {
  static const GpuCatalog catalog;
  return catalog.find(name);
}

CapacityRequest capacity_request(const char* model, const char* gpu, u64 tp) {
  CapacityRequest q;
  q.model = *find_builtin_model(model);
  q.gpu = catalog_gpu(gpu);
  q.parallel.tp = tp;
  q.engine.engine = Engine::vllm;
  return q;
}

SimConfig config(const char* model, const char* gpu, u64 tp) {
  kv::CapacityRequest q = capacity_request(model, gpu, tp);
  return instance_config(q, kv::compute_capacity(q), roofline::device_rates(q.gpu),
                         MlaMode::automatic);
}

std::vector<Request> burst(u64 n, u64 prompt, u64 output) {
  std::vector<Request> out;
  for (u64 i = 0; i < n; ++i) {
    out.push_back({0.0, prompt, output, 0, 0});
  }
  return out;
}

/// Requests of random lengths arriving over a few seconds (the same for a given seed).
std::vector<Request> mixed(u64 n, u64 seed, u64 max_prompt, u64 max_output) {
  Rng rng(seed);
  std::vector<Request> out;
  double t = 0;
  for (u64 i = 0; i < n; ++i) {
    t += rng.exponential(50);
    auto prompt = 1 + static_cast<u64>(rng.uniform() * static_cast<double>(max_prompt));
    auto output = 1 + static_cast<u64>(rng.uniform() * static_cast<double>(max_output));
    out.push_back({t, prompt, output, 0, 0});
  }
  return out;
}

/// `c` with one pool of `blocks` blocks of its block size, every layer holding every token.
void one_pool(SimConfig& c, u64 blocks) {
  c.pools.clear();
  c.pool_limits.clear();
  c.pool_blocks = blocks;
  c.sequence_blocks_limit = blocks;
}

SimResult run(const SimConfig& c, std::vector<Request> requests,
              const std::function<void(const StepRecord&)>& on_step = {}) {
  ListSource source(std::move(requests));
  return simulate(c, source, on_step);
}

u64 sum_stored(const std::vector<Request>& rs) {
  u64 total = 0;
  for (const auto& r : rs) {
    total += r.prompt_tokens + r.output_tokens - 1;
  }
  return total;
}

} // namespace

// One request alone: its prompt in one step (2,000 ≤ the 8,192-token budget), then one decode
// step per further token, each at its own context. TTFT is the prefill step; E2E adds the
// decode steps at contexts 2,001 … 2,000 + 9; TPOT is their mean.
TEST_CASE("one request: TTFT and E2E are the roofline's step times", "[sim]") {
  SimConfig c = config("llama-3.1-8b", "h100-sxm", 1);
  roofline::StepCost cost(c.step);
  roofline::StepLoad prefill;
  cost.add(prefill, Phase::prefill, 2000, 0, 1, 1);
  double ttft = cost.time_s(prefill);
  double decode = 0;
  for (u64 k = 0; k < 9; ++k) {
    roofline::StepLoad step;
    cost.add(step, Phase::decode, 1, 2000 + k, 1, 1);
    decode += cost.time_s(step);
  }
  SimResult r = run(c, {{0.5, 2000, 10, 0, 0}});
  CHECK(r.requests_completed == 1);
  CHECK(r.steps == 10);
  CHECK(r.ttft.mean == Approx(ttft).epsilon(1e-12));
  CHECK(r.ttft.p50 == Approx(ttft).epsilon(1e-12));
  CHECK(r.ttft.p99 == Approx(ttft).epsilon(1e-12));
  CHECK(r.e2e.mean == Approx(ttft + decode).epsilon(1e-12));
  CHECK(r.tpot.mean == Approx(decode / 9).epsilon(1e-12));
  CHECK(r.queue.mean == 0);
  CHECK(r.first_arrival_s == 0.5);
  CHECK(r.makespan_s == Approx(ttft + decode).epsilon(1e-12));
  CHECK(r.input_tokens == 2000);
  CHECK(r.output_tokens == 10);
  CHECK(r.output_tokens_per_s == Approx(10 / (ttft + decode)).epsilon(1e-12));
}

TEST_CASE("a uniform decode step costs what compute_roofline gives", "[sim]") {
  // 64 prompts of 1,000 tokens prefilled in one step (the budget holds all 64,000), then every
  // step decodes all 64 at one context: the second step attends 1,000 cached tokens + itself.
  SimConfig c = config("deepseek-v3", "h200", 8);
  c.max_batched_tokens = 64000;
  std::vector<StepRecord> steps;
  SimResult r = run(c, burst(64, 1000, 3), [&](const StepRecord& s) { steps.push_back(s); });
  REQUIRE(r.requests_completed == 64);
  REQUIRE(steps.size() == 3);
  CHECK(steps[0].prefill_tokens == 64000);
  REQUIRE(steps[1].decode_tokens == 64);
  REQUIRE(steps[1].prefill_tokens == 0);
  roofline::RooflineRequest q = c.step;
  q.phase = Phase::decode;
  q.batch = 64;
  q.context = 1001;
  CHECK(steps[1].duration_s == Approx(roofline::compute_roofline(q).time_s).epsilon(1e-9));
  q.context = 1002;
  CHECK(steps[2].duration_s == Approx(compute_roofline(q).time_s).epsilon(1e-9));
}

TEST_CASE("every request that fits finishes; tokens are conserved", "[sim][invariants]") {
  SimConfig c = config("llama-3.1-8b", "h100-sxm", 1);
  one_pool(c, 200); // 3,200 tokens: far fewer than the requests want at once
  auto requests = mixed(300, 7, 1500, 600);
  u64 pool_max = 0;
  double occupancy_max = 0;
  SimResult r = run(c, requests, [&](const StepRecord& s) {
    pool_max = std::max(pool_max, s.blocks_used);
    occupancy_max = std::max(occupancy_max, s.kv_occupancy);
  });
  CHECK(occupancy_max <= 1.0);
  CHECK(r.requests_arrived == 300);
  CHECK(r.requests_rejected == 0);
  CHECK(r.requests_completed == 300);
  CHECK(r.preemptions > 0);
  CHECK(r.recomputed_tokens > 0);
  CHECK(pool_max <= c.pool_blocks);
  CHECK(r.kv_peak <= 1.0);
  u64 outputs = 0;
  u64 inputs = 0;
  for (const auto& q : requests) {
    outputs += q.output_tokens;
    inputs += q.prompt_tokens;
  }
  CHECK(r.output_tokens == outputs);
  CHECK(r.input_tokens == inputs);
  // Each token stored once, plus what preemption threw away and computed again.
  CHECK(r.computed_tokens == sum_stored(requests) + r.recomputed_tokens);
  CHECK(r.fragmentation >= 0);
  CHECK(r.fragmentation < 1);
}

TEST_CASE("swap preemption keeps the computed tokens", "[sim][invariants]") {
  SimConfig c = config("llama-3.1-8b", "h100-sxm", 1);
  one_pool(c, 200);
  c.preemption = Preemption::swap;
  auto requests = mixed(200, 11, 1500, 600);
  SimResult r = run(c, requests);
  CHECK(r.requests_completed == 200);
  CHECK(r.preemptions > 0);
  CHECK(r.recomputed_tokens == 0);
  CHECK(r.computed_tokens == sum_stored(requests));
  CHECK(r.swap_s > 0);
}

TEST_CASE("a request larger than the pool is rejected with its reason", "[sim][invariants]") {
  SimConfig c = config("llama-3.1-8b", "h100-sxm", 1);
  one_pool(c, 100); // 1,600 tokens
  // 1,500 + 101 − 1 = 1,600 tokens stored: fits exactly; one more does not.
  SimResult r = run(c, {{0, 1500, 101, 0, 0}, {0, 1500, 102, 0, 0}, {0, 200000, 10, 0, 0}});
  CHECK(r.requests_completed == 1);
  CHECK(r.requests_rejected == 2);
  CHECK(r.rejected_pool == 1);
  CHECK(r.rejected_context == 1); // past Llama-3.1's 131,072-token max_context
}

TEST_CASE("the same seed gives the same run", "[sim][invariants]") {
  SimConfig c = config("deepseek-v3", "h200", 8);
  Workload w;
  w.seed = 3;
  w.rate = 20;
  w.requests = 400;
  w.prompt = parse_length_distribution("lognormal:1500,0.8", "prompt");
  w.output = parse_length_distribution("uniform:50,400", "output");
  w.prefix = {0.5, 3, 256};
  auto once = [&](u64 seed) {
    Workload x = w;
    x.seed = seed;
    SyntheticSource s(x);
    return simulate(c, s);
  };
  SimResult a = once(3);
  SimResult b = once(3);
  SimResult other = once(4);
  CHECK(a.steps == b.steps);
  CHECK(a.end_s == b.end_s);
  CHECK(a.ttft.p99 == b.ttft.p99);
  CHECK(a.computed_tokens == b.computed_tokens);
  CHECK(a.prefix_hit_tokens == b.prefix_hit_tokens);
  CHECK(a.end_s != other.end_s);
}

TEST_CASE("output throughput never exceeds the roofline's decode bound", "[sim][invariants]") {
  // Decode tokens/s rises with the batch and falls with the context, so a uniform decode batch
  // of the peak concurrency at the shortest context bounds every step of the run.
  SimConfig c = config("llama-3.1-70b", "h200", 4);
  SimResult r = run(c, burst(300, 512, 256));
  REQUIRE(r.requests_completed == 300);
  roofline::RooflineRequest q = c.step;
  q.phase = Phase::decode;
  q.batch = r.peak_running;
  q.context = 512;
  double bound = roofline::compute_roofline(q).tokens_per_s;
  CHECK(r.output_tokens_per_s > 0.3 * bound); // and it is not far below it
  CHECK(r.output_tokens_per_s <= bound);
}

TEST_CASE("requests sharing a prefix skip its prefill after the first", "[sim][prefix]") {
  SimConfig c = config("llama-3.1-8b", "h100-sxm", 1);
  std::vector<Request> requests;
  for (int i = 0; i < 10; ++i) {
    // 1,000 prefix tokens of 1,200: 62 whole blocks of 16 = 992 shared tokens.
    requests.push_back({0.1 * i, 1200, 50, 1, 1000});
  }
  SimResult shared = run(c, requests);
  CHECK(shared.requests_completed == 10);
  CHECK(shared.prefix_hit_tokens == 9 * 992);
  CHECK(shared.computed_tokens == sum_stored(requests) - 9 * 992);
  c.prefix_sharing = false;
  SimResult alone = run(c, requests);
  CHECK(alone.prefix_hit_tokens == 0);
  CHECK(alone.computed_tokens == sum_stored(requests));
  CHECK(shared.ttft.mean < alone.ttft.mean);
}

TEST_CASE("instance_config: the engine's pool, and clear refusals", "[sim]") {
  kv::CapacityRequest q = capacity_request("deepseek-v3", "h200", 8);
  kv::CapacityResult cap = compute_capacity(q);
  SimConfig c = instance_config(q, cap, roofline::device_rates(q.gpu), MlaMode::automatic);
  CHECK(c.block_size == 64);                  // vLLM's FlashMLA block on Hopper
  CHECK(c.pool_blocks == cap.num_blocks - 1); // the null block is never handed out
  CHECK(c.max_batched_tokens == 8192);
  CHECK(c.max_seqs == 1024);

  q.parallel.dp_attention = true;
  kv::CapacityResult dp = compute_capacity(q);
  SimConfig cd = instance_config(q, dp, roofline::device_rates(q.gpu), MlaMode::automatic);
  CHECK(cd.pool_blocks == 8 * cd.sequence_blocks_limit);

  kv::CapacityRequest one = capacity_request("deepseek-v3", "h200", 1);
  CHECK_THROWS_WITH(instance_config(one, kv::compute_capacity(one), roofline::device_rates(one.gpu),
                                    MlaMode::automatic),
                    Catch::Contains("does not fit on 1 × h200"));
  q.parallel = {16, 8, 1, 0, 1, false};
  CHECK_THROWS_WITH(instance_config(q, kv::compute_capacity(q), roofline::device_rates(q.gpu),
                                    MlaMode::automatic),
                    Catch::Contains("one serving instance"));
}

// vLLM with --num-gpu-blocks-override 4096 on each of the 8 attention-DP ranks of DeepSeek-V3 on
// 8 × H200: a rank hands out 4,096 − 1 = 4,095 blocks (the null block never is), and the
// instance joins the 8 ranks' pools into 8 × 4,095 = 32,760 blocks, one sequence holding at
// most one rank's 4,095. MLA on Hopper pages in FlashMLA's 64-token blocks. A token's cache on
// one GPU is the whole latent of every layer, 61 × (512 + 64) × 2 B = 70,272 B (each rank keeps
// its own sequences whole); the longest request is the model's 163,840-token context.
TEST_CASE("size_instance: vLLM's pool per attention-DP rank, joined over the ranks", "[sim]") {
  kv::CapacityRequest q = capacity_request("deepseek-v3", "h200", 8);
  q.parallel.dp_attention = true;
  q.engine.num_gpu_blocks = 4096;
  auto sized = size_instance(q.model.name, compute_capacity(q));
  REQUIRE(std::holds_alternative<InstanceSize>(sized));
  const InstanceSize& s = std::get<InstanceSize>(sized);
  REQUIRE(s.pools.size() == 1);
  CHECK(s.pools[0].capacity == 32760);
  CHECK(s.pool_limits == std::vector<u64>{4095});
  CHECK(s.pool_blocks == 32760);
  CHECK(s.sequence_blocks_limit == 4095);
  CHECK(s.pool_unit == "blocks");
  CHECK(s.block_size == 64);
  CHECK(s.kv_bytes_per_token == 70272);
  CHECK(s.max_context == 163840);
}

// SGLang's pools for a hybrid model as its rules give them for one of 2 attention-DP ranks: a
// full pool of 120,000 tokens in pages of 64 (a page takes 64 token slots), a sliding pool of
// 30,000 tokens over a 4,096-token window, and 100 state slots, three a request. The instance
// holds 2 × each, 240,000 and 60,000 tokens and 200 slots; one sequence at most one rank's
// 120,000, 30,000 and 100. The first pool counts tokens in pages of 64, so its block is 64
// tokens; budget, sequence limit, max length and bytes per token pass through as the engine
// set them.
TEST_CASE("size_instance: every pool of the engine, times the ranks", "[sim]") {
  kv::CapacityResult cap;
  cap.fits = true;
  cap.kv_pools = 2;
  cap.max_batched_tokens = 16384;
  cap.max_seqs = 33;
  cap.max_model_len = 131072;
  cap.kv_bytes_per_token_per_gpu = 49152;
  cap.sequence_pools = {{"full", "tokens", 120000, {{CacheKind::full, 0, 64, 64}}},
                        {"sliding", "tokens", 30000, {{CacheKind::sliding, 4096, 64, 64}}},
                        {"state", "slots", 100, {{CacheKind::state, 0, 1, 3}}}};
  auto sized = size_instance("hybrid", cap);
  REQUIRE(std::holds_alternative<InstanceSize>(sized));
  const InstanceSize& s = std::get<InstanceSize>(sized);
  REQUIRE(s.pools.size() == 3);
  CHECK(s.pools[0].capacity == 240000);
  CHECK(s.pools[1].capacity == 60000);
  CHECK(s.pools[2].capacity == 200);
  CHECK(s.pools[1].terms.front().window == 4096);
  CHECK(s.pools[2].unit == "slots");
  CHECK(s.pool_limits == std::vector<u64>{120000, 30000, 100});
  CHECK(s.pool_blocks == 240000);
  CHECK(s.sequence_blocks_limit == 120000);
  CHECK(s.pool_unit == "tokens");
  CHECK(s.block_size == 64);
  CHECK(s.max_batched_tokens == 16384);
  CHECK(s.max_seqs == 33);
  CHECK(s.max_context == 131072);
  CHECK(s.kv_bytes_per_token == 49152);
}

// Without full layers there is no block to share prefixes in: a pool of state blocks alone (a
// Mamba model under vLLM, its block 2,048 tokens) takes its first term's block. The plain
// engine's pool counts bytes; a state there is one unit of its bytes, and the block is the
// engine's page (16 tokens here, 1 when it pages none).
TEST_CASE("size_instance: the block of a pool without full layers", "[sim]") {
  kv::CapacityResult cap;
  cap.fits = true;
  cap.sequence_pools = {{"blocks", "blocks", 500, {{CacheKind::state, 0, 2048, 1}}}};
  auto state = size_instance("mamba", cap);
  REQUIRE(std::holds_alternative<InstanceSize>(state));
  CHECK(std::get<InstanceSize>(state).block_size == 2048);

  cap.sequence_pools = {{"bytes", "bytes", 1000000, {{CacheKind::state, 0, 1, 4096}}}};
  cap.block_size = 16;
  auto bytes = size_instance("mamba", cap);
  REQUIRE(std::holds_alternative<InstanceSize>(bytes));
  CHECK(std::get<InstanceSize>(bytes).block_size == 16);
  CHECK(std::get<InstanceSize>(bytes).pool_unit == "bytes");
  cap.block_size = 0;
  CHECK(std::get<InstanceSize>(size_instance("mamba", cap)).block_size == 1);
}

TEST_CASE("size_instance: why there is no instance", "[sim]") {
  using Reason = InstanceRefusal::Reason;
  auto refusal = [](const kv::CapacityResult& cap) {
    auto sized = size_instance("m", cap);
    REQUIRE(std::holds_alternative<InstanceRefusal>(sized));
    return std::get<InstanceRefusal>(sized);
  };
  kv::CapacityResult cap;
  cap.gpu = "h200";
  cap.parallel.gpus = 1;
  cap.fits = false;
  cap.reason = "the weights alone exceed the GPU";
  InstanceRefusal unfit = refusal(cap);
  CHECK(unfit.reason == Reason::does_not_fit);
  CHECK(unfit.message == "m does not fit on 1 × h200 (tp 1): the weights alone exceed the GPU");

  // 16 GPUs at tp 8, pp 1: two copies of the model.
  cap.fits = true;
  cap.parallel.gpus = 16;
  cap.parallel.tp = 8;
  cap.replicas = 2;
  InstanceRefusal copies = refusal(cap);
  CHECK(copies.reason == Reason::model_copies);
  CHECK(copies.message == "simulate runs one serving instance: --gpus 16 holds 2 copies of tp × "
                          "pp = 8; give --gpus equal to tp × pp (and divide the rate among the "
                          "copies)");

  cap.replicas = 1;
  cap.sequence_pools = {{"blocks", "blocks", 100, {{CacheKind::full, 0, 16, 1}}},
                        {"state", "slots", 0, {{CacheKind::state, 0, 1, 1}}}};
  InstanceRefusal empty = refusal(cap);
  CHECK(empty.reason == Reason::empty_pool);
  CHECK(empty.message ==
        "m on h200: the engine's state pool holds nothing (kvcalc capacity --explain shows its "
        "budget)");
  cap.notes = {"the states take the whole budget"};
  CHECK(refusal(cap).message ==
        "m on h200: the engine's state pool holds nothing; the states take the whole budget");

  cap.sequence_pools.clear();
  InstanceRefusal nothing = refusal(cap);
  CHECK(nothing.reason == Reason::no_cache);
  CHECK(nothing.message == "m: no layer keeps a cache; there is nothing to simulate");
}

// One pool of 10 blocks of 16 tokens, each block one unit. 100 tokens take ⌈100 / 16⌉ = 7
// blocks and keep them up to 7 × 16 = 112 tokens; 48 tokens take 3: the pool is full, and a
// third sequence, or the first at 113 tokens (8 blocks), finds no room until the first gives
// its 7 back.
TEST_CASE("KvPools: full-attention blocks taken to the limit and given back", "[sim]") {
  detail::KvPools pools({{"blocks", "blocks", 10, {{CacheKind::full, 0, 16, 1}}}}, {10});
  detail::KvHold a;
  detail::KvHold b;
  detail::KvHold c;
  auto need = pools.shortfall(a, 100, 0);
  CHECK(need[0] == 7);
  REQUIRE(pools.room_for(need));
  pools.allocate(a, need, 100);
  CHECK(pools.free_units(0) == 3);
  CHECK(a.held[0] == 7);
  CHECK(a.holds(112));
  CHECK_FALSE(a.holds(113));

  pools.allocate(b, pools.shortfall(b, 48, 0), 48);
  CHECK(pools.free_units(0) == 0);
  CHECK(pools.used(0) == 10);
  CHECK(pools.occupancy() == 1.0);
  CHECK_FALSE(pools.room_for(pools.shortfall(c, 1, 0)));
  CHECK(pools.shortfall(a, 113, 0)[0] == 1);
  CHECK_FALSE(pools.room_for(pools.shortfall(a, 113, 0)));

  pools.release(a);
  CHECK(a.held[0] == 0);
  CHECK_FALSE(a.holds(1));
  CHECK(pools.free_units(0) == 7);
  CHECK(pools.occupancy() == Approx(0.3));
  CHECK(pools.room_for(pools.shortfall(c, 1, 0)));
}

// A sliding window of 32 tokens over blocks of 16: at 40 tokens the window (8, 40] overlaps
// blocks 0–2, 3 blocks, and keeps them up to 47 tokens (at 48 it leaves block 0); at 64 tokens
// the window (32, 64] overlaps blocks 2–3, so growing from 40 to 64 gives one block back. Its
// need peaks at 3 blocks (a full window past a block edge, 47 tokens) whatever the length: a
// request of 65 tokens (64 stored, 2 blocks at its end) still needs a limit of 3.
TEST_CASE("KvPools: a window gives back the blocks behind it", "[sim]") {
  kv::SequencePool window{"blocks", "blocks", 8, {{CacheKind::sliding, 32, 16, 1}}};
  detail::KvPools pools({window}, {3});
  detail::KvHold a;
  pools.allocate(a, pools.shortfall(a, 40, 0), 40);
  CHECK(a.held[0] == 3);
  CHECK(pools.free_units(0) == 5);
  CHECK(a.holds(47));
  CHECK_FALSE(a.holds(48));
  auto slide = pools.shortfall(a, 64, 0);
  CHECK(slide[0] == -1);
  pools.allocate(a, slide, 64);
  CHECK(a.held[0] == 2);
  CHECK(pools.free_units(0) == 6);

  CHECK(pools.sequence_fits(65));
  CHECK(pools.sequence_fits(1000));
  detail::KvPools tight({window}, {2});
  CHECK_FALSE(tight.sequence_fits(65));
  CHECK(tight.sequence_fits(33)); // 32 stored: (0, 32], blocks 0–1
}

// SGLang's token pool beside its state pool of 7 slots, three a request: two requests take 6
// slots, so a third finds no room though the token pool has 500 free; the fullest pool (6 / 7)
// is the occupancy. A state holds the same slots at any length.
TEST_CASE("KvPools: state slots beside a token pool", "[sim]") {
  detail::KvPools pools({{"full", "tokens", 1000, {{CacheKind::full, 0, 1, 1}}},
                         {"state", "slots", 7, {{CacheKind::state, 0, 1, 3}}}},
                        {1000, 7});
  detail::KvHold a;
  detail::KvHold b;
  detail::KvHold c;
  auto need = pools.shortfall(a, 300, 0);
  CHECK(need[0] == 300);
  CHECK(need[1] == 3);
  pools.allocate(a, need, 300);
  pools.allocate(b, pools.shortfall(b, 200, 0), 200);
  CHECK(pools.free_units(0) == 500);
  CHECK(pools.free_units(1) == 1);
  CHECK_FALSE(pools.room_for(pools.shortfall(c, 10, 0)));
  CHECK(pools.occupancy() == Approx(6.0 / 7));
  auto grow = pools.shortfall(a, 301, 0);
  CHECK(grow[0] == 1);
  CHECK(grow[1] == 0);

  pools.release(b);
  CHECK(pools.free_units(0) == 700);
  CHECK(pools.free_units(1) == 4);
  CHECK(pools.room_for(pools.shortfall(c, 10, 0)));
}

// Full blocks of 16 tokens, each two units (two KV-cache groups of one kind). A prefix of 64
// tokens is 4 blocks, 8 units: when it passes to a shared entry its holder no longer holds them
// alone, and at 80 tokens (5 blocks, 10 units) needs 10 − 8 = 2; the 8 come back to the pool
// only when the entry's last holder leaves.
TEST_CASE("KvPools: a shared prefix's units pass to its entry, and back to the pool", "[sim]") {
  detail::KvPools pools({{"blocks", "blocks", 20, {{CacheKind::full, 0, 16, 2}}}}, {20});
  CHECK(pools.prefix_block() == 16);
  detail::KvHold owner;
  pools.allocate(owner, pools.shortfall(owner, 64, 0), 64);
  CHECK(owner.held[0] == 8);
  CHECK(pools.free_units(0) == 12);
  pools.share_prefix(owner, 4);
  CHECK(owner.held[0] == 0);
  CHECK_FALSE(owner.holds(64));
  CHECK(pools.free_units(0) == 12);
  CHECK(pools.wanted(0, 80, 4) == 2);
  CHECK(pools.shortfall(owner, 80, 4)[0] == 2);
  pools.release(owner);
  CHECK(pools.free_units(0) == 12);
  pools.free_prefix(4);
  CHECK(pools.free_units(0) == 20);
}

TEST_CASE("KvPools: pools that hold nothing are refused", "[sim]") {
  CHECK_THROWS_WITH(detail::KvPools({{"blocks", "blocks", 0, {{CacheKind::full, 0, 16, 1}}}}, {1}),
                    Catch::Contains("KV pools of at least one block"));
  CHECK_THROWS_WITH(detail::KvPools({{"blocks", "blocks", 10, {{CacheKind::full, 0, 0, 1}}}}, {10}),
                    Catch::Contains("KV pools of at least one block"));
  kv::SequencePool one{"blocks", "blocks", 10, {{CacheKind::full, 0, 16, 1}}};
  CHECK_THROWS_WITH(detail::KvPools({one, one, one, one, one}, {10, 10, 10, 10, 10}),
                    Catch::Contains("at most 4 pools"));
}

TEST_CASE("random numbers and distributions are fixed by the seed", "[sim][workload]") {
  Rng a(42);
  Rng b(42);
  for (int i = 0; i < 100; ++i) {
    CHECK(a.uniform() == b.uniform());
  }
  // std::mt19937_64's 10,000th output from the default seed is fixed by the standard.
  std::mt19937_64 e;
  e.discard(9999);
  CHECK(e() == 9981545732273789042ULL);

  Rng rng(1);
  auto fixed = parse_length_distribution("512", "--prompt");
  CHECK(fixed.sample(rng) == 512);
  auto uniform = parse_length_distribution("uniform:10,20", "--prompt");
  auto logn = parse_length_distribution("lognormal:2000,0.8", "--prompt");
  auto normal = parse_length_distribution("normal:300,50", "--prompt");
  auto cdf = parse_length_distribution("cdf:100=0.5,300=1", "--prompt");
  double sum_u = 0;
  double sum_l = 0;
  double sum_n = 0;
  double sum_c = 0;
  const int n = 100000;
  int out_of_range = 0;
  for (int i = 0; i < n; ++i) {
    u64 u = uniform.sample(rng);
    out_of_range += u < 10 || u > 20;
    sum_u += static_cast<double>(u);
    sum_l += static_cast<double>(logn.sample(rng));
    sum_n += static_cast<double>(normal.sample(rng));
    u64 c = cdf.sample(rng);
    out_of_range += c < 100 || c > 300;
    sum_c += static_cast<double>(c);
  }
  CHECK(out_of_range == 0);
  CHECK(sum_u / n == Approx(15).epsilon(0.01));
  CHECK(sum_l / n == Approx(2000).epsilon(0.02));
  CHECK(sum_n / n == Approx(300).epsilon(0.01));
  // Half at 100, half spread evenly over 100–300: 0.5·100 + 0.5·200 = 150.
  CHECK(sum_c / n == Approx(150).epsilon(0.01));
  CHECK(cdf.mean() == Approx(150));
  // Lengths past 2^32 tokens are beyond any context: refused, so no token sum nears 2^64.
  CHECK_THROWS_WITH(
      parse_length_distribution("cdf:9223372036854775808=0.5,18446744073709551615=1", "-"),
      Catch::Contains("more than 2^32 tokens"));
  CHECK(parse_length_distribution("cdf:100=0.5,4294967296=1", "-").mean() ==
        Approx(0.5 * 100 + 0.5 * (100 + 4294967296.0) / 2));
  CHECK(describe(logn) == "lognormal:2000,0.8");
}

TEST_CASE("bad length distributions are refused with the fix", "[sim][workload]") {
  CHECK_THROWS_WITH(parse_length_distribution("lognormel:2000,0.8", "--prompt"),
                    Catch::Contains("did you mean 'lognormal'"));
  CHECK_THROWS_WITH(parse_length_distribution("uniform:800,100", "--output"),
                    Catch::Contains("LOW ≤ HIGH"));
  CHECK_THROWS_WITH(parse_length_distribution("uniform:100", "--output"),
                    Catch::Contains("two numbers"));
  CHECK_THROWS_WITH(parse_length_distribution("cdf:100=0.5,300=0.9", "--output"),
                    Catch::Contains("last point's probability must be 1"));
  CHECK_THROWS_WITH(parse_length_distribution("-5", "--output"),
                    Catch::Contains("cannot be negative"));
}

TEST_CASE("synthetic arrivals: poisson, constant and burst", "[sim][workload]") {
  Workload w;
  w.prompt = parse_length_distribution("100", "p");
  w.output = parse_length_distribution("10", "o");
  w.arrival = ArrivalProcess::constant;
  w.rate = 4;
  w.duration_s = 2.0;
  SyntheticSource constant(w);
  std::vector<double> times;
  while (auto r = constant.next()) {
    times.push_back(r->arrival_s);
  }
  CHECK(times == std::vector<double>{0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75});

  w.arrival = ArrivalProcess::poisson;
  w.rate = 100;
  w.duration_s = 100.0;
  SyntheticSource poisson(w);
  u64 count = 0;
  double last = 0;
  bool ordered = true;
  while (auto r = poisson.next()) {
    ordered = ordered && r->arrival_s >= last;
    last = r->arrival_s;
    ++count;
  }
  CHECK(ordered);
  CHECK(static_cast<double>(count) == Approx(10000).epsilon(0.03));

  w.arrival = ArrivalProcess::burst;
  w.duration_s.reset();
  CHECK_THROWS_WITH(SyntheticSource(w), Catch::Contains("a burst needs a request count"));
  w.requests = 3;
  SyntheticSource b(w);
  CHECK(b.next()->arrival_s == 0);
}

TEST_CASE("the workload YAML: every field, and located errors", "[sim][workload]") {
  Workload w = parse_workload(R"(name: chat
seed: 9
arrival: constant
rate: 2.5
requests: 10
prompt: lognormal:1000,0.5
output:
  distribution: cdf
  points: [[50, 0.5], [400, 1]]
prefix: {fraction: 0.25, count: 2, tokens: 128}
)",
                              "chat.yaml");
  CHECK(w.name == "chat");
  CHECK(w.seed == 9);
  CHECK(w.arrival == ArrivalProcess::constant);
  CHECK(w.rate == 2.5);
  CHECK(w.requests == 10u);
  CHECK(w.prompt.kind == LengthKind::lognormal);
  CHECK(w.output.cdf.size() == 2);
  CHECK(w.prefix.tokens == 128);

  CHECK_THROWS_WITH(parse_workload("rate: 5\nduraton: 60\nprompt: 10\noutput: 5\n", "w.yaml"),
                    Catch::Equals("w.yaml:2:1: unknown key 'duraton'; did you mean 'duration'?"));
  CHECK_THROWS_WITH(
      parse_workload("rate: 5\nduration: 60\nprompt: lognormal:1000\noutput: 5\n", "w.yaml"),
      Catch::StartsWith("w.yaml:3:9: invalid prompt"));
  CHECK_THROWS_WITH(parse_workload("rate: 5\nduration: 60\nprompt:\n  distribution: normal\n"
                                   "  mean: 100\noutput: 5\n",
                                   "w.yaml"),
                    Catch::Contains("w.yaml:4:3: missing required key 'std'"));
  CHECK_THROWS_WITH(parse_workload("rate: 5\nprompt: 10\noutput: 5\n", "w.yaml"),
                    Catch::Contains("give a duration"));
  CHECK_THROWS_WITH(parse_workload("rate: 5\nduration: 1\noutput: 5\n", "w.yaml"),
                    Catch::Contains("missing required key 'prompt'"));
  CHECK_THROWS_WITH(
      parse_workload("arrival: poison\nrate: 5\nduration: 1\nprompt: 1\noutput: 5\n", "w.yaml"),
      Catch::Contains("w.yaml:1:10: unknown arrival process 'poison'; did you "
                      "mean 'poisson'?"));
}

TEST_CASE("traces: CSV and JSONL, streamed", "[sim][trace]") {
  std::istringstream csv("# a comment\narrival_s,prompt_tokens,output_tokens,prefix_id,"
                         "prefix_tokens\n0,100,10,,\n0.5,200,20,sys,64\n\n1.5,300,30,sys,64\n");
  TraceReader reader(csv, "t.csv");
  CHECK(reader.format() == TraceFormat::csv);
  auto a = reader.next();
  auto b = reader.next();
  auto c = reader.next();
  CHECK_FALSE(reader.next());
  CHECK(a->prompt_tokens == 100);
  CHECK(a->prefix_id == 0);
  CHECK(b->arrival_s == 0.5);
  CHECK(b->prefix_id == 1);
  CHECK(c->prefix_id == 1);
  CHECK(c->prefix_tokens == 64);

  std::istringstream jsonl("{\"arrival_s\": 0.25, \"prompt_tokens\": 7, \"output_tokens\": 3}\n"
                           "{\"arrival_s\": 1, \"prompt_tokens\": 9, \"output_tokens\": 4, "
                           "\"prefix_id\": \"doc\", \"prefix_tokens\": 5}\n");
  TraceReader j(jsonl, "t.jsonl");
  CHECK(j.format() == TraceFormat::jsonl);
  CHECK(j.next()->arrival_s == 0); // times run from the first arrival
  auto second = j.next();
  CHECK(second->arrival_s == 0.75);
  CHECK(second->prefix_tokens == 5);
  CHECK_FALSE(j.next());

  // Unix timestamps: from the first, so the clock keeps its resolution.
  std::istringstream stamps("arrival_s,prompt_tokens,output_tokens\n"
                            "1764480000.5,10,1\n1764480001.25,10,1\n");
  TraceReader u(stamps, "u.csv");
  CHECK(u.next()->arrival_s == 0);
  CHECK(u.next()->arrival_s == 0.75);
}

TEST_CASE("bad traces get line-numbered errors", "[sim][trace]") {
  auto error_of = [](const std::string& text) {
    std::istringstream in(text);
    try {
      TraceReader r(in, "t.csv");
      while (r.next()) {
      }
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  CHECK(error_of("arrival_s,prompt_tokens\n0,5\n") ==
        "t.csv:1: missing column 'output_tokens' in the header (columns: arrival_s, "
        "prompt_tokens, output_tokens, and optionally prefix_id, prefix_tokens)");
  CHECK(error_of("arrival_s,prompt_tokens,output_tokns\n") ==
        "t.csv:1:25: unknown column 'output_tokns'; did you mean 'output_tokens'? (columns: "
        "arrival_s, prompt_tokens, output_tokens, and optionally prefix_id, prefix_tokens)");
  CHECK(error_of("arrival_s,prompt_tokens,output_tokens\n0,5,5\n1,-3,5\n") ==
        "t.csv:3:3: prompt_tokens must not be negative, got -3");
  CHECK(error_of("arrival_s,prompt_tokens,output_tokens\n2,5,5\n1,3,5\n") ==
        "t.csv:3: arrival_s 1 is before the previous request's 2; sort the trace by arrival "
        "time");
  CHECK(error_of("arrival_s,prompt_tokens,output_tokens\n0,5\n") ==
        "t.csv:2: expected 3 fields as in the header, got 2");
  CHECK(error_of("arrival_s,prompt_tokens,output_tokens\n0,5,0\n") ==
        "t.csv:2: output_tokens must be at least 1");
  CHECK(error_of("{\"arrival_s\": 0, \"prompt_tokens\": 5}\n") ==
        "t.csv:1: missing key 'output_tokens'");
  CHECK(error_of("{\"arrival_s\": 0, \"promt_tokens\": 5}\n") ==
        "t.csv:1:18: unknown key 'promt_tokens'; did you mean 'prompt_tokens'? (keys: arrival_s, "
        "prompt_tokens, output_tokens, and optionally prefix_id, prefix_tokens)");
  CHECK(error_of("{\"arrival_s\": 0, \"prompt_tokens\": 5, \"output_tokens\": 2.5}\n") ==
        "t.csv:1:55: output_tokens must be a whole number of tokens, got '2.5'");
  CHECK(error_of("") == "t.csv: empty trace: expected a CSV header "
                        "(arrival_s,prompt_tokens,output_tokens) or JSONL objects");
}

TEST_CASE("latency percentiles within 0.1%; the timeline keeps its totals", "[sim][metrics]") {
  LatencyHistogram h;
  for (int i = 1; i <= 1000; ++i) {
    h.add(0.001 * i); // 1 ms … 1 s
  }
  LatencySummary s = h.summary();
  CHECK(s.count == 1000);
  CHECK(s.mean == Approx(0.5005));
  CHECK(s.p50 == Approx(0.5).epsilon(0.001));
  CHECK(s.p90 == Approx(0.9).epsilon(0.001));
  CHECK(s.p99 == Approx(0.99).epsilon(0.001));
  CHECK(s.max == 1.0);

  TimeSeries series(10, 0.1);
  double out = 0;
  for (int i = 0; i < 1000; ++i) {
    series.add(0.01 * i, 0.01, 0.5, 4, 10, 1);
    out += 1;
  }
  auto points = series.points(10.0);
  CHECK(points.size() <= 10);
  double total = 0;
  for (const auto& p : points) {
    total += p.output_tokens_per_s * (p.end_s - p.start_s);
  }
  CHECK(points.front().kv_occupancy == Approx(0.5));
  CHECK(points.back().kv_occupancy == Approx(0.5));
  CHECK(total == Approx(out));
}

// One request through a prefill pool and a decode pool: its first token leaves the prefill pool
// after the prefill step, its cache (2,000 tokens × 131,072 B on one GPU) crosses the NIC at
// 50 GB/s after 2.7 µs, and the decode pool generates the other 9 tokens.
TEST_CASE("disaggregated prefill and decode: TTFT through the transfer, decode in its pool",
          "[sim][disaggregated]") {
  SimConfig pool = config("llama-3.1-8b", "h100-sxm", 1);
  KvTransfer transfer{131072, 0, 131072, 0, 50e9, 2.7e-6, 1, 1};
  roofline::StepCost cost(pool.step);
  roofline::StepLoad prefill;
  cost.add(prefill, Phase::prefill, 2000, 0, 1, 1);
  double prefill_s = cost.time_s(prefill);
  double moved = 2.7e-6 + 2000.0 * 131072 / 50e9;
  double decode = 0;
  for (u64 k = 1; k < 10; ++k) {
    roofline::StepLoad step;
    cost.add(step, Phase::decode, 1, 2000 + k - 1, 1, 1);
    decode += cost.time_s(step);
  }
  ListSource source({{0.5, 2000, 10, 0, 0}});
  DisaggregatedResult r = simulate_disaggregated(pool, pool, transfer, source);
  CHECK(r.prefill.requests_completed == 1);
  CHECK(r.prefill.output_tokens == 1);
  CHECK(r.transfer.mean == Approx(moved));
  CHECK(r.decode.steps == 9);
  CHECK(r.requests.requests_completed == 1);
  CHECK(r.requests.output_tokens == 10);
  CHECK(r.requests.ttft.mean == Approx(prefill_s + moved).epsilon(1e-12));
  CHECK(r.requests.e2e.mean == Approx(prefill_s + moved + decode).epsilon(1e-12));
  CHECK(r.requests.tpot.mean == Approx(decode / 9).epsilon(1e-12));
  CHECK(r.requests.makespan_s == Approx(prefill_s + moved + decode).epsilon(1e-12));

  // A decode pool with room for one sequence: the second request waits for its slot, and
  // that wait is in its TTFT.
  SimConfig one = pool;
  one.max_seqs = 1;
  ListSource two({{0.0, 2000, 10, 0, 0}, {0.0, 2000, 10, 0, 0}});
  DisaggregatedResult w = simulate_disaggregated(pool, one, transfer, two);
  CHECK(w.requests.requests_completed == 2);
  CHECK(w.requests.ttft.max > decode); // the first request's whole decode
  CHECK(w.decode.queue.max > 0);

  // A request of one output token is done when its cache (and its token) arrive.
  ListSource single({{0.0, 100, 1, 0, 0}});
  DisaggregatedResult s = simulate_disaggregated(pool, pool, transfer, single);
  CHECK(s.requests.requests_completed == 1);
  CHECK(s.decode.steps == 0);
  CHECK(s.requests.ttft.mean == Approx(s.requests.e2e.mean));

  // The receiving side counts: a decode GPU that holds 8 × the sender's share takes 8 × as long.
  KvTransfer fan_in{16384, 0, 131072, 0, 50e9, 2.7e-6, 1, 1};
  CHECK(fan_in.time_s(2000) == Approx(moved));
  // Caches that leave together queue on the one lane: the fourth arrives after four transfers.
  ListSource four(
      {{0.0, 2000, 2, 0, 0}, {0.0, 2000, 2, 0, 0}, {0.0, 2000, 2, 0, 0}, {0.0, 2000, 2, 0, 0}});
  SimConfig wide = pool;
  wide.max_batched_tokens = 8192;
  DisaggregatedResult q = simulate_disaggregated(wide, pool, transfer, four);
  CHECK(q.prefill.steps == 1);
  CHECK(q.transfer.max == Approx(4 * moved).epsilon(0.001));
  KvTransfer two_lanes = transfer;
  two_lanes.send_lanes = 2;
  two_lanes.receive_lanes = 2;
  ListSource again4(
      {{0.0, 2000, 2, 0, 0}, {0.0, 2000, 2, 0, 0}, {0.0, 2000, 2, 0, 0}, {0.0, 2000, 2, 0, 0}});
  CHECK(simulate_disaggregated(wide, pool, two_lanes, again4).transfer.max ==
        Approx(2 * moved).epsilon(0.001));

  // From one tp-8 instance (each GPU an eighth) into eight attention-DP groups (each whole):
  // the senders take 0.66 ms a cache in turn, the receivers 5.25 ms each at once, so four
  // caches all arrive 5.25 ms after their first tokens.
  KvTransfer spread{16384, 0, 131072, 0, 50e9, 2.7e-6, 1, 8};
  ListSource four_more(
      {{0.0, 2000, 2, 0, 0}, {0.0, 2000, 2, 0, 0}, {0.0, 2000, 2, 0, 0}, {0.0, 2000, 2, 0, 0}});
  CHECK(simulate_disaggregated(wide, pool, spread, four_more).transfer.max ==
        Approx(moved).epsilon(0.001));

  KvTransfer none{131072, 0, 131072, 0, 0, 0, 1, 1};
  ListSource again({{0.0, 100, 2, 0, 0}});
  CHECK_THROWS_WITH(simulate_disaggregated(pool, pool, none, again), Catch::Contains("scale_out"));
}

// Pipeline parallel: a step advances pp micro-batches of half the running set through both
// stages; the engine's token budget and sequence limit hold per micro-batch.
TEST_CASE("pipeline parallel: micro-batches in flight, each with the engine's limits",
          "[sim][pipeline]") {
  kv::CapacityRequest q = capacity_request("llama-3.1-70b", "h100-sxm", 2);
  q.parallel.pp = 2;
  SimConfig c = instance_config(q, kv::compute_capacity(q), roofline::device_rates(q.gpu),
                                MlaMode::automatic);
  c.max_seqs = 8;
  std::vector<StepRecord> steps;
  SimResult r = run(c, burst(16, 100, 4), [&](const StepRecord& s) { steps.push_back(s); });
  CHECK(r.requests_completed == 16);
  CHECK(r.peak_running == 16); // 2 micro-batches of 8
  roofline::StepCost cost(c.step);
  roofline::StepLoad load;
  cost.add(load, Phase::decode, 1, 101, 16, 16);
  roofline::StepLoad micro = load.scaled(0.5);
  CHECK(cost.pipeline_time_s(load, 16) ==
        Approx(2 * cost.time_s(micro) + cost.stage_transfer(micro).time_s));
  CHECK(steps[2].duration_s == Approx(cost.pipeline_time_s(load, 16)).epsilon(1e-9));
  // A lone prompt is not split: it crosses both stages whole, so its TTFT is the roofline's
  // two stages of the prompt plus one hand-over.
  roofline::StepLoad prompt;
  cost.add(prompt, Phase::prefill, 8000, 0, 1, 1);
  double ttft = 2 * cost.time_s(prompt) + cost.stage_transfer(prompt).time_s;
  CHECK(cost.pipeline_time_s(prompt, 1) == Approx(ttft));
  SimConfig big = c;
  big.max_batched_tokens = 8192;
  SimResult lone = run(big, {{0.0, 8000, 1, 0, 0}});
  CHECK(lone.ttft.mean == Approx(ttft).epsilon(1e-9));
  roofline::RooflineRequest q1 = c.step;
  q1.phase = Phase::prefill;
  q1.context = 8000;
  q1.batch = 1;
  CHECK(lone.ttft.mean == Approx(roofline::compute_roofline(q1).time_per_token_s).epsilon(1e-9));
}

// Attention data parallel over 8 groups: a single sequence sits in one group, which prices its
// attention whole (the roofline's ⌈B / dp⌉), not spread 1/8 over all.
TEST_CASE("dp-attention: the busiest group takes whole sequences", "[sim][deployment]") {
  kv::CapacityRequest q = capacity_request("deepseek-v3", "h200", 8);
  q.parallel.dp_attention = true;
  SimConfig c = instance_config(q, kv::compute_capacity(q), roofline::device_rates(q.gpu),
                                MlaMode::automatic);
  std::vector<StepRecord> steps;
  SimResult r = run(c, {{0.0, 20000, 3, 0, 0}}, [&](const StepRecord& s) { steps.push_back(s); });
  REQUIRE(r.requests_completed == 1);
  REQUIRE(steps.size() == 5); // 3 prompt chunks of up to 8,192, then 2 decodes
  roofline::RooflineRequest d = c.step;
  d.phase = Phase::decode;
  d.batch = 1;
  d.context = 20001;
  CHECK(steps[3].decode_tokens == 1);
  CHECK(steps[3].duration_s == Approx(roofline::compute_roofline(d).time_s).epsilon(1e-9));
}

// Under pp and attention DP together: two prompts make two micro-batches of one, each in one
// group, so the step is the roofline's micro-batch of one prompt through both stages.
TEST_CASE("pp with dp-attention: each micro-batch's busiest group", "[sim][deployment]") {
  kv::CapacityRequest q = capacity_request("deepseek-v3", "h200", 8);
  q.parallel.gpus = 16;
  q.parallel.pp = 2;
  q.parallel.dp_attention = true;
  SimConfig c = instance_config(q, kv::compute_capacity(q), roofline::device_rates(q.gpu),
                                MlaMode::automatic);
  c.max_batched_tokens = 65536;
  std::vector<StepRecord> steps;
  SimResult r = run(c, burst(2, 4096, 2), [&](const StepRecord& s) { steps.push_back(s); });
  REQUIRE(r.requests_completed == 2);
  roofline::RooflineRequest p = c.step;
  p.phase = Phase::prefill;
  p.context = 4096;
  p.batch = 1;
  CHECK(steps[0].prefill_tokens == 8192);
  CHECK(steps[0].duration_s == Approx(roofline::compute_roofline(p).time_s).epsilon(1e-9));
}

TEST_CASE("arrivals that outrun the instance: the queue grows at offered / served − 1",
          "[sim][overload]") {
  // One sequence at a time and identical requests: each takes the same T, so request k starts at
  // k·T; arriving every T/2 it waits k·T/2, a queue growing 1 s per second of arrivals (offered
  // twice what is served). Arriving every 2T, none waits.
  SimConfig c = config("llama-3.1-8b", "h100", 1);
  c.max_seqs = 1;
  SimResult alone = run(c, burst(1, 100, 10));
  double t = alone.e2e.max;
  REQUIRE(t > 0);
  auto every = [&](double gap) {
    std::vector<Request> rs;
    for (u64 k = 0; k < 40; ++k) {
      rs.push_back({static_cast<double>(k) * gap, 100, 10, 0, 0});
    }
    return run(c, rs);
  };
  SimResult fast = every(t / 2);
  REQUIRE(fast.queue_growth);
  CHECK(*fast.queue_growth == Approx(1.0).epsilon(1e-6));
  CHECK(offered_rate(fast) == Approx(2 / t).epsilon(1e-9));
  CHECK(*fast.queue_growth >= k_overload_queue_growth);
  SimResult slow = every(2 * t);
  REQUIRE(slow.queue_growth);
  CHECK(*slow.queue_growth == Approx(0.0).margin(1e-9));
  // All at once: no figure.
  CHECK_FALSE(run(c, burst(40, 100, 10)).queue_growth);
}

TEST_CASE("SLO targets: parsed, checked, and the highest rate found by doubling and bisection",
          "[sim][slo]") {
  std::vector<SloTarget> targets = parse_slo("ttft_p99=2s,tpot_p50=50ms");
  REQUIRE(targets.size() == 2);
  CHECK(targets[0].metric == "ttft");
  CHECK(targets[0].statistic == "p99");
  CHECK(targets[0].seconds == 2);
  CHECK(targets[1].seconds == Approx(0.05));
  CHECK(describe(targets[1]) == "TPOT p50 ≤ 50.000 ms");
  CHECK_THROWS_WITH(parse_slo("ttft_p99=2"), Catch::Contains("with a unit"));
  CHECK_THROWS_WITH(parse_slo("ttfb_p99=2s"), Catch::Contains("unknown target 'ttfb_p99'"));
  CHECK_THROWS_WITH(parse_slo("ttft_p99=2s,ttft_p99=1s"), Catch::Contains("given twice"));
  CHECK_THROWS_AS(parse_slo("ttft_p99=-1s"), InputError);

  // A run whose TTFT p99 is rate / 10 s: the targets hold up to 20 requests/s exactly.
  std::vector<SloTarget> ttft = parse_slo("ttft_p99=2s");
  auto run = [](double rate) {
    SimResult r;
    r.requests_completed = 100;
    r.ttft.p99 = rate / 10;
    return r;
  };
  SloSearch up = search_max_rate(run, ttft, 1);
  CHECK(up.best <= 20);
  CHECK(up.failed > 20);
  CHECK(up.failed / up.best <= 1.02);
  CHECK(up.runs.front().value == 1);
  CHECK(up.runs[5].value == 32); // doubled: 1, 2, 4, 8, 16, 32 (the first to fail)
  SloSearch down = search_max_rate(run, ttft, 100);
  CHECK(down.best <= 20);
  CHECK(down.failed / down.best <= 1.02);
  // A burst whose TTFT p99 is n × 30 ms: the largest batch within 2 s is exactly 66.
  auto burst_of = [](u64 n) {
    SimResult r;
    r.requests_completed = n;
    r.ttft.p99 = 0.03 * static_cast<double>(n);
    return r;
  };
  SloSearch batch = search_max_batch(burst_of, ttft);
  CHECK(batch.best == 66);
  CHECK(batch.failed == 67);
  CHECK(batch.runs[7].value == 128); // doubled from 1 to 128, the first to fail
  CHECK(batch.runs.size() <= 8 + 7); // then bisected between 64 and 128
  // The limit met: no failure to name; a single request that fails: no batch.
  CHECK(search_max_batch(burst_of, ttft, 50).best == 50);
  CHECK(search_max_batch(burst_of, ttft, 50).failed == 0);
  CHECK(search_max_batch(burst_of, parse_slo("ttft_p99=10ms")).best == 0);
  CHECK(search_max_batch(burst_of, parse_slo("ttft_p99=10ms")).runs.size() == 1);
  // A growing queue or a rejected request fails whatever the percentiles.
  SimResult r = run(1);
  CHECK(meets(r, ttft));
  r.queue_growth = 0.2;
  CHECK_FALSE(meets(r, ttft));
  r.queue_growth.reset();
  r.requests_rejected = 1;
  CHECK_FALSE(meets(r, ttft));
}

// ---------------------------------------------------------------------------------------------
// The closed loop (simulate --concurrency)

namespace {

Workload fixed_lengths(std::optional<u64> requests, std::optional<double> duration) {
  Workload w;
  w.prompt = parse_length_distribution("100", "prompt");
  w.output = parse_length_distribution("10", "output");
  w.requests = requests;
  w.duration_s = duration;
  return w;
}

} // namespace

TEST_CASE("a closed loop sends each client's next request when its last one leaves",
          "[sim][closed]") {
  ClosedLoopSource loop(fixed_lengths(5, std::nullopt), 2);
  // Two clients, both at 0; then nothing until one is free.
  auto a = loop.next();
  auto b = loop.next();
  REQUIRE(a.has_value());
  REQUIRE(b.has_value());
  CHECK(a->arrival_s == 0);
  CHECK(b->arrival_s == 0);
  CHECK(a->prompt_tokens == 100);
  CHECK_FALSE(loop.next().has_value());
  // The earlier of two free clients sends first, each at the moment it was freed.
  loop.left(1.5, true);
  loop.left(0.7, true);
  CHECK(loop.next()->arrival_s == 0.7);
  CHECK(loop.next()->arrival_s == 1.5);
  CHECK_FALSE(loop.next().has_value());
  // The fifth request is the last.
  loop.left(2.0, true);
  CHECK(loop.next()->arrival_s == 2.0);
  loop.left(3.0, true);
  CHECK_FALSE(loop.next().has_value());

  // A duration alone: nothing is sent once a client is free at or after it.
  ClosedLoopSource timed(fixed_lengths(std::nullopt, 10.0), 1);
  CHECK(timed.next()->arrival_s == 0);
  timed.left(9.5, true);
  CHECK(timed.next()->arrival_s == 9.5);
  timed.left(10.0, true);
  CHECK_FALSE(timed.next().has_value());

  // Rejections with nothing served between them: the loop stops after the limit instead of
  // sending the same impossible request at the same instant for ever.
  ClosedLoopSource stuck(fixed_lengths(std::nullopt, 10.0), 1);
  u64 sent = 0;
  while (stuck.next()) {
    ++sent;
    stuck.left(0.0, false);
  }
  CHECK(sent == ClosedLoopSource::k_max_rejected_in_a_row);

  CHECK_THROWS_WITH(ClosedLoopSource(fixed_lengths(std::nullopt, std::nullopt), 4),
                    Catch::Contains("--requests or --duration"));
  CHECK_THROWS_WITH(ClosedLoopSource(fixed_lengths(5, std::nullopt), 0),
                    Catch::Contains("at least 1 client"));
}

TEST_CASE("a closed loop of N clients keeps at most N requests in the instance", "[sim][closed]") {
  SimConfig c = config("llama-3.1-8b", "h100-sxm", 1);
  ClosedLoopSource loop(fixed_lengths(40, std::nullopt), 4);
  u64 completed = 0;
  double last_end = 0;
  SimResult r = simulate(c, loop, {}, [&](const Request& req, double /*first*/, double end) {
    ++completed;
    CHECK(req.arrival_s <= end);
    last_end = std::max(last_end, end);
  });
  CHECK(r.requests_completed == 40);
  CHECK(completed == 40);
  CHECK(r.peak_running == 4);
  // Each of the 4 clients waits for its own request: 10 requests each, one after another.
  CHECK(r.end_s == Approx(last_end));

  // The engine runs fewer at once than there are clients: the rest queue, and the loop still
  // finishes every request.
  c.max_seqs = 2;
  ClosedLoopSource capped(fixed_lengths(40, std::nullopt), 4);
  SimResult q = simulate(c, capped);
  CHECK(q.requests_completed == 40);
  CHECK(q.peak_running == 2);
  CHECK(q.queue.max > 0);

  // Every request rejected (longer than the engine's limit): the loop gives up, the run ends.
  c.max_context = 50;
  ClosedLoopSource rejected(fixed_lengths(std::nullopt, 10.0), 2);
  SimResult none = simulate(c, rejected);
  CHECK(none.requests_completed == 0);
  // (The instance asks for its next request before the last one is turned away, so one or two
  // more than the limit are sent.)
  CHECK(none.requests_rejected >= ClosedLoopSource::k_max_rejected_in_a_row);
  CHECK(none.requests_rejected <= ClosedLoopSource::k_max_rejected_in_a_row + 2);
}
