#include <catch2/catch.hpp>

#include <cmath>

#include <kvcalc/model/loader.hpp>
#include <kvcalc/model/registry.hpp>
#include <kvcalc/roofline/roofline.hpp>

using namespace kvcalc;
using namespace kvcalc::roofline;
using namespace kvcalc::device;
using namespace kvcalc::model;

namespace {

const Gpu& catalog_gpu(const char* name) {
  static const GpuCatalog catalog;
  return catalog.find(name);
}

RooflineRequest request(const char* model, const char* gpu, u64 batch, u64 context) {
  RooflineRequest r;
  r.model = *find_builtin_model(model);
  r.gpu = catalog_gpu(gpu);
  r.rates = device_rates(r.gpu);
  r.batch = batch;
  r.context = context;
  return r;
}

const Op& find_op(const RooflineResult& r, const std::string& name) {
  for (const Op& o : r.ops) {
    if (o.name == name) {
      return o;
    }
  }
  FAIL("no op " << name);
  return r.ops.front();
}

double attention_flops(const RooflineResult& r) {
  double total = 0;
  for (const Op& o : r.ops) {
    total += o.variant.empty() ? 0 : o.flops;
  }
  return total;
}

} // namespace

// docs/formulas.md, MLA absorbed: core FLOPs 2·B·H·s·t·1088, bytes B·(t·1152 + s·H·1088·2).
// At H = 128: 278,528 FLOP per 1,152 B of latent = 241.8 FLOP/B; with the Q/O traffic at
// B = 128, t = 4,096: 1,140,850,688 / 4,997,120 = 228.3.
TEST_CASE("MLA absorbed decode intensity: 242 at 128 heads, 30 at 16", "[roofline][mla]") {
  auto req = request("deepseek-v3", "h200", 128, 4096);
  req.mla = MlaMode::absorbed;
  RooflineResult r = compute_roofline(req);
  const Op& core = find_op(r, "attention.core");
  CHECK(core.flops / core.kv_bytes == Approx(241.78).epsilon(0.001));
  CHECK(core.intensity == Approx(228.30).epsilon(0.001));
  CHECK(core.compute_bound); // past the H200 ridge of 206
  req.parallel.tp = 8;       // 16 heads per GPU
  RooflineResult at_tp8 = compute_roofline(req);
  const Op& tp8 = find_op(at_tp8, "attention.core");
  CHECK(tp8.intensity == Approx(30.0).epsilon(0.01));
  CHECK_FALSE(tp8.compute_bound);
}

TEST_CASE("naive MLA decode needs about 117x the FLOPs of absorbed", "[roofline][mla]") {
  auto req = request("deepseek-v3", "h200", 128, 4096);
  req.mla = MlaMode::absorbed;
  double absorbed = attention_flops(compute_roofline(req));
  req.mla = MlaMode::naive;
  double naive = attention_flops(compute_roofline(req));
  // (262,144 + 640) t / (2,176 t + 262,144) at t = 4,096 = 117.3; 120.8 without the
  // absorption matmuls.
  CHECK(naive / absorbed == Approx(117.3).epsilon(0.001));
}

TEST_CASE("prefill without a prefix: absorbed core FLOPs are 3.4x naive", "[roofline][mla]") {
  auto req = request("deepseek-v3", "h200", 1, 8192);
  req.phase = Phase::prefill;
  req.mla = MlaMode::absorbed;
  double absorbed = find_op(compute_roofline(req), "attention.core").flops;
  req.mla = MlaMode::naive;
  double naive = find_op(compute_roofline(req), "attention.core").flops;
  CHECK(absorbed / naive == Approx(1088.0 / 320.0)); // 3.4
  req.mla = MlaMode::automatic;
  CHECK(compute_roofline(req).mla == MlaMode::naive);
  req.phase = Phase::decode;
  CHECK(compute_roofline(req).mla == MlaMode::absorbed);
}

TEST_CASE("GQA decode intensity is H / H_kv: about 8 for GQA-8, 1 for MHA", "[roofline]") {
  RooflineResult llama70 = compute_roofline(request("llama-3.1-70b", "h100", 1, 4096));
  const Op& gqa = find_op(llama70, "attention.core");
  CHECK(gqa.flops / gqa.kv_bytes == Approx(8.0));
  CHECK(gqa.intensity == Approx(8.0).epsilon(0.01));
  RooflineResult llama7 = compute_roofline(request("llama-2-7b", "h100", 1, 4096));
  const Op& mha = find_op(llama7, "attention.core");
  CHECK(mha.flops / mha.kv_bytes == Approx(1.0));
}

TEST_CASE("the MLA crossover: 170.7 in FLOPs, earlier in time", "[roofline][mla]") {
  auto req = request("deepseek-v3", "h200", 1, 4096);
  MlaCrossover c = mla_crossover(req);
  // d_c (d_nope + d_v) / (2 d_c - d_nope - d_v) = 512 · 256 / 768.
  REQUIRE(c.flop_ratio);
  REQUIRE(c.flop_query);
  CHECK(*c.flop_ratio == Approx(512.0 * 256 / 768));
  double s = *c.flop_query;
  CHECK(s * (4096 + s / 2) / 4096 == Approx(*c.flop_ratio));
  CHECK(c.time_query > 0);
  CHECK(c.time_query < 400);
  CHECK_THROWS_WITH(mla_crossover(request("llama-3.1-8b", "h200", 1, 4096)),
                    Catch::Contains("needs an MLA model"));
}

TEST_CASE("a batch touches E·(1 − (1 − k/E)^n) experts", "[roofline][moe]") {
  CHECK(expected_experts(256, 8, 1) == Approx(8));
  CHECK(expected_experts(256, 8, 1e6) == Approx(256));
  CHECK(expected_experts(256, 8, 32) == Approx(256 * (1 - std::pow(1 - 8.0 / 256, 32))));
  // DeepSeek-V3 decode at batch 1 reads 8 experts per MoE layer.
  auto req = request("deepseek-v3", "h200", 1, 4096);
  RooflineResult v3 = compute_roofline(req);
  const Op& experts = find_op(v3, "moe.experts");
  double per_expert = 3.0 * 7168 * 2048 + 3.0 * 56 * 16 * 4; // fp8 + one fp32 scale per block
  CHECK(experts.weight_bytes == Approx(8 * per_expert * 58));
}

// kipply, "Transformer inference arithmetic": a 13B model (40 layers, d 5,120) decoding one
// token on an A100 at 1.5 TB/s reads 2 × 40 × 12 × 5,120² bytes of block weights:
// 25,165,824,000 B / 1.5e12 = 16.8 ms. 12·d² approximates the block; Llama-2-13B's exact block
// is 4·d² + 3·d·13,824 (0.8% more). kvcalc also reads the LM head, the KV cache of 512 tokens
// and the activations (docs/formulas.md, "Published step times").
TEST_CASE("kipply's 13B decode step", "[roofline][published]") {
  auto req = request("llama-2-13b", "a100-sxm-40gb", 1, 512);
  req.rates.bandwidth_bytes_per_s = 1.5e12;
  RooflineResult r = compute_roofline(req);
  double block_weights = 0;
  for (const Op& o : r.ops) {
    block_weights += o.name == "lm_head" ? 0 : o.weight_bytes;
  }
  CHECK(block_weights == Approx(2.0 * 40 * (4.0 * 5120 * 5120 + 3.0 * 5120 * 13824)));
  CHECK(block_weights / (2.0 * 40 * 12 * 5120 * 5120) == Approx(1.0083).epsilon(1e-4));
  CHECK(r.time_s == Approx(17.42e-3).epsilon(0.005));
}

// "How to scale your model": LLaMA-2-13B on 8 TPU v5e (8.2e11 B/s, 1.97e14 FLOP/s each) at
// 8,192 tokens: (26e9 + B · 6.7e9) / (8 · 8.2e11) = 4.98 ms at batch 1, 249.09 ms at 240.
TEST_CASE("the scaling book's LLaMA-2-13B step times", "[roofline][published]") {
  auto req = request("llama-2-13b", "h100", 1, 8192);
  req.rates.bandwidth_bytes_per_s = 8.2e11;
  req.rates.flops_per_s = PeakFlops{};
  req.rates.flops_per_s.bf16 = 1.97e14;
  req.parallel.tp = 8;
  req.communication = false;
  CHECK(compute_roofline(req).time_s == Approx(4.98e-3).epsilon(0.03));
  req.batch = 240;
  CHECK(compute_roofline(req).time_s == Approx(249.09e-3).epsilon(0.03));
}

TEST_CASE("bad roofline input is refused", "[roofline]") {
  auto req = request("llama-3.1-8b", "h200", 0, 4096);
  CHECK_THROWS_AS(compute_roofline(req), InputError);
  CHECK_THROWS_AS(parse_phase("decoding"), InputError);
  CHECK_THROWS_WITH(parse_mla_mode("absorb"), Catch::Contains("did you mean 'absorbed'?"));
}

// A step priced from its sums: B sequences added one by one cost what compute_roofline gives
// for the uniform batch, and a mixed step holds the ops of both MLA paths.
TEST_CASE("StepCost over a uniform batch is compute_roofline's step", "[roofline][step]") {
  auto req = request("deepseek-v3", "h200", 64, 8192);
  req.parallel.tp = 8;
  StepCost cost(req);
  StepLoad load;
  for (int i = 0; i < 64; ++i) {
    cost.add(load, Phase::decode, 1, 8191, 1, 1);
  }
  CHECK(cost.time_s(load) == Approx(compute_roofline(req).time_s).epsilon(1e-12));

  auto gqa = request("llama-3.1-70b", "h100-sxm", 16, 2048);
  gqa.phase = Phase::extend;
  gqa.query = 512;
  StepCost gqa_cost(gqa);
  StepLoad chunks;
  for (int i = 0; i < 16; ++i) {
    gqa_cost.add(chunks, Phase::extend, 512, 2048, 1, 1);
  }
  CHECK(gqa_cost.time_s(chunks) == Approx(compute_roofline(gqa).time_s).epsilon(1e-12));
}

TEST_CASE("a mixed step carries absorbed decodes and a naive prefill", "[roofline][step]") {
  auto req = request("deepseek-v3", "h200", 1, 1);
  req.parallel.tp = 8;
  StepCost cost(req);
  StepLoad load;
  cost.add(load, Phase::decode, 1, 4095, 32, 32);
  cost.add(load, Phase::prefill, 2048, 0, 1, 1);
  // 32 decodes (one token each) and one 2,048-token prompt: 2,080 tokens, 33 logits rows.
  CHECK(load.tokens == 2080);
  CHECK(load.logits == 33);
  CHECK(load.absorbed.kinds[0].held == 32 * 4096);
  CHECK(load.naive.kinds[0].attended == 2048.0 * 1024); // s · t_eff = 2,048 · 2,048/2
  std::vector<Op> ops = cost.ops(load);
  int absorbed = 0;
  int naive = 0;
  double total = 0;
  for (const Op& o : ops) {
    absorbed += o.variant == "absorbed";
    naive += o.variant == "naive";
    total += o.time_s;
  }
  CHECK(absorbed == 3); // absorb_uk, core, absorb_uv
  CHECK(naive == 2);    // decompress, core
  CHECK(cost.time_s(load) == Approx(total).epsilon(1e-12));
}

TEST_CASE("dp-attention: one GPU attends 1/tp of the sequences", "[roofline][step]") {
  auto req = request("deepseek-v3", "h200", 64, 4096);
  req.parallel.tp = 8;
  req.parallel.dp_attention = true;
  StepCost cost(req);
  CHECK(cost.attention_share() == Approx(0.125));
  StepLoad load;
  cost.add(load, Phase::decode, 1, 4095, 64, 64 * cost.attention_share());
  CHECK(cost.time_s(load) == Approx(compute_roofline(req).time_s).epsilon(1e-12));
}

// Windows and chunks cap what a layer reads and attends: gpt-oss-120b, 18 sliding layers of
// window 128 and 18 full ones, 8 KV heads x (64 + 64) x 2 B = 2,048 B per token per layer. One
// sequence decoding at 32,768 tokens reads 18 x 2,048 x 128 from its sliding layers and 18 x
// 2,048 x 32,768 from its full ones.
TEST_CASE("sliding and chunked layers read their window only", "[roofline][hybrid]") {
  auto r = compute_roofline(request("gpt-oss-120b", "h200", 1, 32768));
  CHECK(find_op(r, "attention.core.sliding").kv_bytes == Approx(18.0 * 2048 * 128));
  CHECK(find_op(r, "attention.core").kv_bytes == Approx(18.0 * 2048 * 32768));
  // Llama-4-Scout: 36 chunked layers (8,192) and 12 global, 4,096 B per token per layer.
  auto scout = compute_roofline(request("llama-4-scout", "h200", 1, 32768));
  CHECK(find_op(scout, "attention.core.chunked").kv_bytes == Approx(36.0 * 4096 * 8192));
  CHECK(find_op(scout, "attention.core").kv_bytes == Approx(12.0 * 4096 * 32768));
}

// A recurrent layer reads and writes each sequence's state once per decode step, whatever the
// context: Mamba-Codestral-7B, 64 layers of 2,158,592 B; batch 8: 2 x 8 x 64 x 2,158,592 B.
// Its projections are the model's weights (7,285,403,648 parameters less the embedding and
// head, 2 x 32,768 x 4,096, and the norms).
TEST_CASE("state layers read and write their state each step", "[roofline][state]") {
  auto r = compute_roofline(request("mamba-codestral-7b", "h200", 8, 4096));
  const Op& scan = find_op(r, "state.scan");
  CHECK(scan.kv_bytes == Approx(2.0 * 8 * 64 * 2158592));
  CHECK(compute_roofline(request("mamba-codestral-7b", "h200", 8, 262144)).ops.size() ==
        r.ops.size());
  CHECK(find_op(compute_roofline(request("mamba-codestral-7b", "h200", 8, 262144)), "state.scan")
            .kv_bytes == Approx(scan.kv_bytes));
  const Op& proj = find_op(r, "state.proj");
  double mixers = 7285403648.0 - 2.0 * 32768 * 4096 - 65 * 4096;
  CHECK(proj.weight_bytes == Approx(2 * mixers).epsilon(1e-9));
}

// DeepSeek sparse attention: the indexer scores every cached token (its 132 B key of each of
// 61 layers), attention reads the top 2,048 only. One sequence at 131,072 tokens, tp 8.
TEST_CASE("DSA decode: an indexer over the context, attention over the top-k", "[roofline][dsa]") {
  auto req = request("deepseek-v3.2", "h200", 1, 131072);
  req.parallel.tp = 8;
  auto r = compute_roofline(req);
  CHECK(find_op(r, "attention.indexer").kv_bytes == Approx(61.0 * 132 * 131072));
  CHECK(find_op(r, "attention.core").kv_bytes == Approx(61.0 * 1152 * 2048));
  // s·t of the indexer: 64 heads x 128 wide scores per cached token.
  CHECK(find_op(r, "attention.indexer").flops >= 2.0 * 131072 * 64 * 128 * 61);
  // Without the indexer (DeepSeek-V3) the same step reads every token's latent.
  auto v3 = request("deepseek-v3", "h200", 1, 131072);
  v3.parallel.tp = 8;
  CHECK(find_op(compute_roofline(v3), "attention.core").kv_bytes == Approx(61.0 * 1152 * 131072));
}

TEST_CASE("the roofline refuses the deployments capacity refuses", "[roofline][deployment]") {
  RooflineRequest r = request("llama-3.1-8b", "h100-sxm", 1, 4096);
  r.parallel.pp = 33; // 32 layers: a stage would hold none
  CHECK_THROWS_WITH(compute_roofline(r), Catch::Contains("more pipeline stages than"));
  r.parallel.pp = 1;
  r.parallel.ep = 64; // one GPU
  CHECK_THROWS_WITH(compute_roofline(r), Catch::Contains("--ep 64 shards the experts"));
  r.parallel.ep = 0;
  r.parallel.tp = 3; // 8 KV heads
  CHECK_THROWS_WITH(compute_roofline(r), Catch::Contains("cannot be split"));
  RooflineRequest v3 = request("deepseek-v3", "h200", 1, 4096);
  v3.parallel.tp = 8;
  v3.parallel.dcp = 2;
  CHECK_THROWS_WITH(compute_roofline(v3), Catch::Contains("does not model decode context"));
}

// DeepSeek-V3 on two H800 boards, attention data parallel over 16 GPUs, experts EP16: each GPU
// runs its own 16 sequences, and receives 16 × 16 × 8 / 16 = 128 token-expert pairs per MoE
// layer. Dispatch sends each of its 16 tokens in fp8 with a scale per 128 (7,168 + 4 × 56 =
// 7,392 B): to the other board once when one of its 8 experts is there (1 − 0.5^8 of tokens),
// over NVLink to 8 × 7/16 board peers and forwarding 8 × 8/16 × 7/8 copies that came in.
TEST_CASE("dp-attention with wide EP: each GPU its own tokens and its experts' pairs",
          "[roofline][deployment]") {
  auto req = request("deepseek-v3", "h800", 256, 4096);
  req.parallel.tp = 16;
  req.parallel.dp_attention = true;
  req.parallel.ep = 16;
  auto r = compute_roofline(req);
  CHECK(r.batch_per_gpu == 16);
  CHECK(find_op(r, "norms").flops == Approx(4.0 * 16 * 7168 * 2 * 61));
  CHECK(find_op(r, "moe.experts").flops == Approx(2.0 * 128 * 7168 * 2048 * 3 * 58));
  // Shared experts replicated, on the GPU's 16 tokens at full width.
  CHECK(find_op(r, "moe.shared_experts").flops == Approx(2.0 * 16 * 7168 * 2048 * 3 * 58));
  const Op& dispatch = find_op(r, "moe.dispatch");
  REQUIRE(dispatch.collective);
  double remote = 1 - std::pow(0.5, 8);
  CHECK(dispatch.collective->out_bytes == Approx(16 * remote * 7392));
  CHECK(dispatch.collective->up_bytes == Approx(16 * 7.0 * 7392));
  CHECK(dispatch.collective->time_s == Approx(2.7e-6 + 16 * 7.0 * 7392 / 200e9));
  CHECK(dispatch.collectives == 58);
  const Op& combine = find_op(r, "moe.combine");
  CHECK(combine.collective->out_bytes == Approx(16 * remote * 7168 * 2));
  // No attention TP: no all-reduce.
  for (const Op& o : r.ops) {
    CHECK(o.name != "tp.all_reduce");
  }
  CHECK(r.tokens_per_s_per_gpu == Approx(r.tokens_per_s / 16));

  // A busiest GPU with twice the mean's pairs computes and receives twice as much.
  auto skewed = req;
  skewed.expert_imbalance = 2;
  auto s = compute_roofline(skewed);
  CHECK(find_op(s, "moe.experts").flops == Approx(2 * find_op(r, "moe.experts").flops));
  CHECK(find_op(s, "moe.dispatch").collective->out_bytes == Approx(2 * 16 * remote * 7392));
}

// Without dp-attention the tp group holds every token: experts split over tp need no dispatch;
// one all-reduce follows each of the 61 mixers, 3 dense MLPs and 58 MoE layers.
TEST_CASE("tensor parallel experts: all-reduces, no all-to-all", "[roofline][deployment]") {
  auto req = request("deepseek-v3", "h200", 64, 4096);
  req.parallel.tp = 8;
  auto r = compute_roofline(req);
  const Op& reduce = find_op(r, "tp.all_reduce");
  CHECK(reduce.collectives == 122);
  // 64 tokens × 7,168 × 2 B = 917,504 B each: two-shot, 1.2 µs + 1.75 × 917,504 / 450 GB/s.
  CHECK(reduce.collective->algorithm == "two-shot");
  CHECK(reduce.collective->time_s == Approx(1.2e-6 + 1.75 * 917504 / 450e9));
  for (const Op& o : r.ops) {
    CHECK(o.name != "moe.dispatch");
  }
  // Experts over 16 ranks spanning two copies: each copy's tp group sends its tokens out, and
  // each rank's 16 experts see both copies' tokens.
  auto wide = req;
  wide.parallel.gpus = 16;
  wide.parallel.ep = 16;
  auto w = compute_roofline(wide);
  CHECK(find_op(w, "moe.experts").flops == Approx(2.0 * (2 * 64) * 8 / 16 * 7168 * 2048 * 3 * 58));
  CHECK(find_op(w, "moe.dispatch").collectives == 58);
  CHECK(find_op(w, "tp.all_reduce").collectives == 64);
}

TEST_CASE("redundant experts sit on every rank and count in its weights",
          "[roofline][deployment]") {
  const Model& v3 = *find_builtin_model("deepseek-v3");
  kv::Parallelism p;
  p.gpus = 144;
  p.tp = 144;
  p.dp_attention = true;
  p.ep = 144;
  p.redundant_experts = 32;
  kv::Deployment d = kv::resolve_deployment(v3, p, std::nullopt);
  CHECK(d.experts_per_rank == 2); // (256 + 32) / 144, DeepSeek's decode layout
  p.gpus = 32;
  p.tp = 32;
  p.ep = 32;
  CHECK(kv::resolve_deployment(v3, p, std::nullopt).experts_per_rank == 9); // its prefill layout
  p.ep = 16; // below tp under dp-attention
  CHECK_THROWS_WITH(kv::resolve_deployment(v3, p, std::nullopt), Catch::Contains("at least --tp"));
  p.dp_attention = false;
  p.ep = 5;
  CHECK_THROWS_WITH(kv::resolve_deployment(v3, p, std::nullopt), Catch::Contains("must divide"));
  p.ep = 1;
  CHECK_THROWS_WITH(kv::resolve_deployment(v3, p, std::nullopt),
                    Catch::Contains("--redundant-experts copies experts"));
}

TEST_CASE("two-batch overlap exposes the longer of compute and communication",
          "[roofline][overlap]") {
  // DeepSeek's decode layout: 144 GPUs, 128 sequences each, 2 experts a rank.
  auto req = request("deepseek-v3", "h800", 144 * 128, 4096);
  req.parallel.tp = 144;
  req.parallel.dp_attention = true;
  req.parallel.ep = 144;
  auto plain = compute_roofline(req);
  CHECK(plain.stage_s == Approx(plain.compute_s + plain.communication_s));
  req.overlap = Overlap::two_batch;
  auto tbo = compute_roofline(req);
  CHECK(tbo.stage_s == Approx(std::max(tbo.compute_s, tbo.communication_s)));
  CHECK(tbo.stage_s < plain.stage_s);
  // Each half reads the weights again: compute costs more than in one batch.
  CHECK(tbo.compute_s > plain.compute_s);
  CHECK(find_op(tbo, "moe.experts").weight_bytes > find_op(plain, "moe.experts").weight_bytes);
  // The simulator's path agrees.
  StepCost cost(req);
  StepLoad load;
  cost.add(load, Phase::decode, 1, 4095, 144 * 128, 128);
  CHECK(cost.time_s(load) == Approx(tbo.stage_s).epsilon(1e-12));
  // On 16 GPUs at 64 sequences each, reading each rank's 16 experts twice costs more than the
  // overlap hides.
  req.parallel.tp = 16;
  req.parallel.ep = 16;
  req.batch = 16 * 64;
  auto small = compute_roofline(req);
  req.overlap = Overlap::none;
  CHECK(small.stage_s > compute_roofline(req).stage_s);
}

// Llama-3.1-70B at tp 2, pp 2 on one H100 board: micro-batches of 64 cross 2 stages of 40
// layers; each GPU hands on 64 × 8,192 × 2 B / 2 = 524,288 B over NVLink. A decode step of one
// micro-batch is 2 stages + 1 transfer; 2 micro-batches are in flight.
TEST_CASE("pipeline parallel: stages in series for latency, micro-batches in flight",
          "[roofline][pipeline]") {
  auto req = request("llama-3.1-70b", "h100-sxm", 64, 4096);
  req.parallel.tp = 2;
  req.parallel.pp = 2;
  auto r = compute_roofline(req);
  CHECK(r.layers == 40);
  REQUIRE(r.stage_transfer);
  double transfer = 0.6e-6 + 524288.0 / 450e9;
  CHECK(r.stage_transfer->time_s == Approx(transfer));
  CHECK(r.time_s == Approx(2 * r.stage_s + transfer));
  CHECK(r.tokens_per_s == Approx(2 * 64 / r.time_s));
  CHECK(r.time_per_token_s == Approx(r.time_s));
  CHECK(r.gpus == 4);
  // Prefill streams prompts through the stages: one micro-batch per stage time.
  req.phase = Phase::prefill;
  auto p = compute_roofline(req);
  CHECK(p.tokens_per_s == Approx(64.0 * 4096 / p.stage_s));
  CHECK(p.time_per_token_s == Approx(2 * p.stage_s + p.stage_transfer->time_s));
}

// MTP: one drafted token kept with chance 0.8 gives 1.8 tokens per step; two at 0.5 give
// 1 + 0.5 + 0.25. The step verifies 1 + drafts tokens and pays each draft's pass of the module.
TEST_CASE("MTP decoding: tokens per step, the verify query and the draft's cost",
          "[roofline][mtp]") {
  auto req = request("deepseek-v3", "h200", 32, 4096);
  req.parallel.tp = 8;
  req.draft_tokens = 1;
  req.acceptance = 0.8;
  auto r = compute_roofline(req);
  CHECK(r.query == 2);
  CHECK(r.tokens_per_step == Approx(1.8));
  CHECK(r.time_per_token_s == Approx(r.time_s / 1.8));
  CHECK(r.tokens_per_s == Approx(32 * 1.8 / r.time_s));
  CHECK(find_op(r, "mtp.eh_proj").flops == Approx(2.0 * 32 * 2 * 7168 * 7168));
  CHECK(find_op(r, "mtp.attention.core").kv_bytes > 0);
  req.draft_tokens = 2;
  req.acceptance = 0.5;
  auto two = compute_roofline(req);
  CHECK(two.tokens_per_step == Approx(1.75));
  CHECK(find_op(two, "mtp.eh_proj").flops == Approx(2 * find_op(r, "mtp.eh_proj").flops));
  auto llama = request("llama-3.1-8b", "h100-sxm", 1, 4096);
  llama.draft_tokens = 1;
  CHECK_THROWS_WITH(compute_roofline(llama), Catch::Contains("has none"));
  req.acceptance = 1.5;
  CHECK_THROWS_WITH(compute_roofline(req), Catch::Contains("--accept"));
}

// Attention data parallel 2 × attention TP 8 on 16 GPUs: each group of 8 runs 32 of the 64
// sequences (norms over 32 tokens, heads split 8 ways, an all-reduce of 8 after each mixer and
// dense MLP), and each GPU dispatches 64 / 16 = 4 tokens to 8 experts each (to the other board
// once per token that has an expert there).
TEST_CASE("attention groups: dp groups of tp / dp GPUs", "[roofline][deployment]") {
  auto req = request("deepseek-v3", "h200", 64, 4096);
  req.parallel.gpus = 16;
  req.parallel.tp = 16;
  req.parallel.dp = 2;
  req.parallel.ep = 16;
  auto r = compute_roofline(req);
  CHECK(r.batch_per_gpu == 32);
  CHECK(r.heads == 16);
  CHECK(find_op(r, "norms").flops == Approx(4.0 * 32 * 7168 * 2 * 61));
  const Op& reduce = find_op(r, "tp.all_reduce");
  CHECK(reduce.collective->group == 8);
  CHECK(reduce.collectives == 64);
  const Op& dispatch = find_op(r, "moe.dispatch");
  CHECK(dispatch.collective->group == 16);
  CHECK(dispatch.collective->up_bytes == Approx(4.0 * 7 * 7392));
  CHECK(dispatch.collective->out_bytes == Approx(4.0 * (1 - std::pow(0.5, 8)) * 7392));
  kv::Deployment d = kv::resolve_deployment(req.model, req.parallel, std::nullopt);
  CHECK(d.parallel.dp_attention);
  CHECK(d.attention_tp == 8);
  CHECK(d.kv_pools == 2);
  req.parallel.dp = 3;
  CHECK_THROWS_WITH(compute_roofline(req), Catch::Contains("--dp 3 must divide --tp 16"));
}

// A node of fewer GPUs than a board-scale domain makes the domain the node; an NVL72 rack's
// domain spans its trays of 4.
TEST_CASE("nodes shape the scale-up domain where it is one node's", "[roofline][deployment]") {
  CHECK(scale_up_domain(catalog_gpu("h100-sxm"), 8) == 8);
  CHECK(scale_up_domain(catalog_gpu("h100-sxm"), 4) == 4);
  CHECK(scale_up_domain(catalog_gpu("h100-sxm"), 16) == 8);
  CHECK(scale_up_domain(catalog_gpu("gb200"), 4) == 72);
  CHECK(scale_up_domain(catalog_gpu("h100-nvl"), 8) == 2);
  CHECK(scale_up_domain(catalog_gpu("h100-sxm"), 0) == 8); // no node given: the catalog's
  Gpu unstated = catalog_gpu("h100-sxm");
  unstated.scale_up_domain = 0;
  CHECK(scale_up_domain(unstated, 0) == 0);
  CHECK(scale_up_domain(unstated, 4) == 4);
  // Llama-3.1-70B at tp 8 over two nodes of 4: the all-reduce leaves each node.
  auto req = request("llama-3.1-70b", "h100-sxm", 64, 4096);
  req.parallel.tp = 8;
  req.rates.links.domain = scale_up_domain(req.gpu, 4);
  auto split = compute_roofline(req);
  const Op& reduce = find_op(split, "tp.all_reduce");
  CHECK(reduce.collective->domains == 2);
  CHECK(reduce.collective->out_bytes > 0);
}

// Copies placed whole on 8-GPU boards, tp 4 × pp 2 each: a stage's expert group of ep 8 takes 4
// GPUs from each of two copies, one copy per board, so half its peers are on the other board.
TEST_CASE("under pp an expert group spans the boards of its copies", "[roofline][deployment]") {
  auto req = request("deepseek-v3", "h100-sxm", 64, 4096);
  req.parallel.gpus = 16;
  req.parallel.tp = 4;
  req.parallel.pp = 2;
  req.parallel.ep = 8;
  auto piped = compute_roofline(req);
  const Op& dispatch = find_op(piped, "moe.dispatch");
  CHECK(dispatch.collective->domains == 2);
  CHECK(dispatch.collective->out_bytes > 0);
  req.parallel.pp = 1;
  req.parallel.gpus = 8;
  req.parallel.tp = 4;
  req.parallel.ep = 8;
  CHECK(find_op(compute_roofline(req), "moe.dispatch").collective->domains == 1);
  // An NVL72 rack holds the stage's GPUs of 9 such copies (36): groups up to 36 stay inside.
  auto rack = request("deepseek-v3", "gb200", 64, 4096);
  rack.parallel.tp = 4;
  rack.parallel.pp = 2;
  for (u64 ep : {u64{8}, u64{16}, u64{24}, u64{36}}) {
    rack.parallel.ep = ep;
    rack.parallel.gpus = 2 * ep;
    CHECK(find_op(compute_roofline(rack), "moe.dispatch").collective->domains == 1);
  }
  rack.parallel.ep = 72;
  rack.parallel.gpus = 144;
  CHECK(find_op(compute_roofline(rack), "moe.dispatch").collective->domains == 2);
}

// DeepSeek-V3 (config.json: 61 layers, first 3 dense, 128 heads, q_lora_rank 1536,
// kv_lora_rank 512, qk_rope 64, qk_nope 128, v 128, 256 routed experts of 2048, one shared of
// 2048, dense MLP 18432, hidden 7168; fp8 weights in 128 × 128 blocks with fp32 scales) on
// 8 × H200 at tp 8 without expert parallel: every GPU holds a slice of every expert.
TEST_CASE("a step's shape on one GPU: DeepSeek-V3 at tp 8, by hand", "[roofline][shape]") {
  auto req = request("deepseek-v3", "h200", 1, 4096);
  req.parallel.tp = 8;
  req.parallel.gpus = 8;
  StepShape x = step_shape(req);
  CHECK(x.layers.stage == 61);
  CHECK(x.layers.dense == 3);
  CHECK(x.layers.moe == 58);
  CHECK(x.main.heads == 16);      // 128 / 8
  CHECK(x.mla.q_out == 16 * 192); // heads × (d_nope + d_R)
  const AttentionKindShape& full = x.kinds[static_cast<std::size_t>(kv::CacheKind::full)];
  CHECK(full.layers == 61);
  CHECK(full.kv_rate == (512 + 64) * 2); // the latent and the rope key, bf16: 1,152 B
  CHECK(x.present_count == 1);
  // W_UK and W_UV of this GPU's 16 heads, bf16: 16 × 512 × (128 + 128) × 2 B.
  CHECK(x.mla.w_absorb == 16.0 * 512 * 256 * 2);
  // kv_a_proj_with_mqa: (512 + 64) × 7168 fp8 bytes, scales ⌈576/128⌉ × 56 × 4 B.
  CHECK(x.mla.w_kv_down == 576.0 * 7168 + 5 * 56 * 4);
  CHECK(x.ffn.mlp_width == 18432.0 / 8);
  CHECK(x.ffn.shared_width == 2048.0 / 8);
  // One routed expert's down_proj, whole: 2048 × 7168 fp8 bytes, scales 16 × 56 × 4 B.
  CHECK(x.ffn.w_expert == 2048.0 * 7168 + 16 * 56 * 4);
  CHECK(x.split.experts_local == 256);
  CHECK(x.split.expert_tp == 8);
  CHECK_FALSE(x.split.all_to_all);
  CHECK(x.math.expert == DType::fp8_e4m3);
  CHECK(x.math.absorb == DType::bf16);
}

TEST_CASE("a prepared deployment prices every step as compute_roofline does", "[roofline]") {
  auto req = request("deepseek-v3", "h200", 1, 4096);
  req.parallel.tp = 8;
  req.parallel.gpus = 8;
  req.mla = MlaMode::automatic;
  Roofline roofline(req);
  RooflineResult reused;
  // Steps whose op lists differ in length and in names (decode absorbed, prefill naive, a
  // long extend naive, then decode again), so that an op left over from a longer step, or a
  // name from another, would show.
  struct Step {
    Phase phase;
    u64 batch, context, query;
  };
  std::size_t shortest = SIZE_MAX;
  std::size_t longest = 0;
  for (const Step& step : {Step{Phase::decode, 64, 131072, 1}, Step{Phase::prefill, 1, 8192, 1},
                           Step{Phase::extend, 4, 65536, 512}, Step{Phase::decode, 1, 1024, 1}}) {
    req.phase = step.phase;
    req.batch = step.batch;
    req.context = step.context;
    req.query = step.query;
    RooflineResult alone = compute_roofline(req);
    roofline.step(req, reused);
    REQUIRE(reused.ops.size() == alone.ops.size());
    for (std::size_t i = 0; i < alone.ops.size(); ++i) {
      INFO("op " << alone.ops[i].name);
      CHECK(reused.ops[i].name == alone.ops[i].name);
      CHECK(reused.ops[i].variant == alone.ops[i].variant);
      CHECK(reused.ops[i].time_s == alone.ops[i].time_s);
      CHECK(reused.ops[i].bytes == alone.ops[i].bytes);
      CHECK(reused.ops[i].exposed_s == alone.ops[i].exposed_s);
    }
    CHECK(reused.time_s == alone.time_s);
    CHECK(reused.dominant == alone.dominant);
    CHECK(reused.mla == alone.mla);
    CHECK(reused.query == alone.query);
    shortest = std::min(shortest, alone.ops.size());
    longest = std::max(longest, alone.ops.size());
  }
  CHECK(shortest < longest); // the op list did shrink and grow
  // A step's own sizes are checked on a prepared deployment too.
  req.batch = 0;
  CHECK_THROWS_AS(roofline.step(req, reused), InputError);
}
