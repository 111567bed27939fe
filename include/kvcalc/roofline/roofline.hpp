#pragma once
/// One serving step on a roofline, op by op: FLOPs, bytes (weights, activations, KV), the
/// attainable rate and the time of each op on one GPU, for decode, prefill and chunked
/// prefill, with MLA absorbed or naive (docs/formulas.md, "Roofline"). A pure function.

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <kvcalc/core/names.hpp>
#include <kvcalc/device/gpu.hpp>
#include <kvcalc/device/profile.hpp>
#include <kvcalc/kv/cache_format.hpp>
#include <kvcalc/kv/capacity.hpp>
#include <kvcalc/kv/deployment.hpp>
#include <kvcalc/model/model.hpp>
#include <kvcalc/roofline/collective.hpp>
#include <kvcalc/roofline/estimate.hpp>

namespace kvcalc::roofline {

enum class Phase {
  decode,  ///< s new tokens per request over a cache of `context` tokens
  prefill, ///< a prompt of `context` tokens, no cached prefix
  extend,  ///< a chunk of s tokens over a cached prefix of `context` tokens
};

enum class MlaMode {
  absorbed,  ///< W_UK folded into the query, attention over the latent, W_UV after
  naive,     ///< decompress the latent into per-head K and V every step
  automatic, ///< what an engine picks: absorbed for chunks of ≤ 128 tokens, else naive
};

/// How naive MLA holds the decompressed K and V.
enum class NaiveKv {
  fused,        ///< decompressed on chip, never written back
  materialized, ///< written to memory and read back by the attention kernel
};

/// Whether a step hides its communication behind compute.
enum class Overlap {
  none,      ///< ops run one after another
  two_batch, ///< two micro-batches: one computes while the other communicates (DeepSeek, SGLang)
};

inline constexpr NameTable<Overlap, 2> k_overlaps{
    "overlap", {{{Overlap::none, "none"}, {Overlap::two_batch, "two-batch"}}}};
inline constexpr NameTable<Phase, 3> k_phases{
    "phase", {{{Phase::decode, "decode"}, {Phase::prefill, "prefill"}, {Phase::extend, "extend"}}}};
inline constexpr NameTable<MlaMode, 3> k_mla_modes{
    "MLA mode",
    {{{MlaMode::absorbed, "absorbed"}, {MlaMode::naive, "naive"}, {MlaMode::automatic, "auto"}}}};
inline constexpr NameTable<NaiveKv, 2> k_naive_kv{
    "naive KV", {{{NaiveKv::fused, "fused"}, {NaiveKv::materialized, "materialized"}}}};

[[nodiscard]] std::string_view phase_name(Phase p);
[[nodiscard]] std::string_view overlap_name(Overlap o);
[[nodiscard]] Phase parse_phase(std::string_view text);
[[nodiscard]] std::string_view mla_mode_name(MlaMode m);
[[nodiscard]] MlaMode parse_mla_mode(std::string_view text);

/// The ceilings the roofline uses, and where they come from.
struct DeviceRates {
  double bandwidth_bytes_per_s = 0;
  device::PeakFlops flops_per_s;
  Topology links;     ///< the scale-up link (one direction) and the NIC a collective crosses
  std::string source; ///< "datasheet", "datasheet x efficiency (bw 0.85, flops 0.7)", ...
  /// The estimate's efficiency curves (choose_estimator); null: the step gets no estimate.
  std::shared_ptr<const Estimator> estimate;
  std::string estimate_note; ///< where the estimate comes from, or why there is none
};

/// Which time of an op a total sums: the bound's (datasheet or measured ceilings) or the
/// estimate's (what the kernels reach).
enum class Pricing { bound, estimate };
inline constexpr NameTable<Pricing, 2> k_pricings{
    "ceilings", {{{Pricing::estimate, "estimate"}, {Pricing::bound, "datasheet"}}}};

/// The datasheet ceilings of `gpu` scaled by efficiencies (1 = datasheet).
[[nodiscard]] DeviceRates device_rates(const device::Gpu& gpu, double bandwidth_efficiency = 1.0,
                                       double flops_efficiency = 1.0);

/// The most sequences in one step, 2^24 (a thousand times engines' largest batches), and the
/// most tokens one step may attend over all of them, 2^40: beyond, byte counts pass 2^64 and
/// the figures mean nothing.
inline constexpr u64 k_max_batch = u64{1} << 24;
inline constexpr u64 k_max_step_tokens = u64{1} << 40;
/// The most tokens of one request's context or query, 2^32: no model's context comes near.
inline constexpr u64 k_max_context_tokens = u64{1} << 32;

struct RooflineRequest {
  model::Model model;
  device::Gpu gpu;
  DeviceRates rates;
  kv::CacheRequest cache;
  std::optional<DType> weight_dtype; ///< nullopt: the checkpoint's
  kv::Parallelism parallel;          ///< gpus, tp, pp, ep, dp_attention, redundant experts
  Phase phase = Phase::decode;
  u64 batch = 1;      ///< sequences of one copy per step (one micro-batch under pp)
  u64 context = 4096; ///< decode: tokens in the cache; prefill: the prompt; extend: the prefix
  u64 query = 1;      ///< decode: tokens per request per step; extend: the chunk
  MlaMode mla = MlaMode::automatic;
  NaiveKv naive_kv = NaiveKv::fused;
  bool communication = true; ///< price the collectives
  Overlap overlap = Overlap::none;
  u64 draft_tokens = 0;        ///< MTP: tokens the model's MTP module drafts per decode step
  double acceptance = 1;       ///< MTP: each drafted token's chance to be kept, given the last was
  double expert_imbalance = 1; ///< token-expert pairs on the busiest GPU over the mean (≥ 1)
  std::optional<DType> dispatch_dtype; ///< of the expert dispatch; nullopt: fp8 for fp8 experts
};

/// One op of a step. Its names are views of text that lives as long as the program.
struct Op {
  std::string_view name;  ///< "attention.core", "moe.experts", "mtp.attention.core", ...
  std::string_view dtype; ///< of the arithmetic
  double flops = 0;
  double weight_bytes = 0;
  double activation_bytes = 0;
  double kv_bytes = 0;
  double bytes = 0;      ///< all three
  double intensity = 0;  ///< FLOP per byte
  double peak_flops = 0; ///< ceiling for its dtype, FLOP/s
  double attainable = 0; ///< min(peak, intensity × bandwidth), FLOP/s
  bool compute_bound = false;
  bool communication = false; ///< a collective over the interconnect
  double time_s = 0;
  double exposed_s = 0;  ///< of time_s, on the critical path (overlap hides the rest)
  double estimate_s = 0; ///< the estimate's time (0 without one)
  double estimate_exposed_s = 0;
  std::string_view variant;             ///< "absorbed" / "naive" for MLA attention ops, else ""
  std::optional<Collective> collective; ///< communication: one of them, as priced
  double collectives = 0;               ///< communication: how many run in the step
};

/// A step's totals as the estimate prices it.
struct StepEstimate {
  double compute_s = 0;
  double communication_s = 0;
  double stage_s = 0;
  double time_s = 0;
  double tokens_per_s = 0;
  double tokens_per_s_per_gpu = 0;
  double time_per_token_s = 0;
  std::string_view dominant;
};

struct RooflineResult {
  std::vector<Op> ops; ///< one stage's, MTP drafts included
  double flops = 0;
  double bytes = 0;
  double compute_s = 0;       ///< Σ of the ops that compute or move memory
  double communication_s = 0; ///< Σ of the collectives
  double stage_s = 0;         ///< one stage, one micro-batch: Σ exposed (= time_s when pp = 1)
  double time_s = 0;          ///< one step of a micro-batch through every stage
  double tokens_per_s = 0;    ///< tokens per second of one copy (decode: accepted tokens)
  double tokens_per_s_per_gpu = 0;
  double time_per_token_s = 0;     ///< decode: per generated token of one request; prefill: TTFT
  double tokens_per_step = 0;      ///< decode: tokens a request keeps per step (MTP: 1 + a + …)
  std::string_view dominant;       ///< the op that takes the longest
  MlaMode mla = MlaMode::absorbed; ///< the mode used (MLA models)
  u64 query = 0;                   ///< s
  u64 attended = 0;                ///< t
  double attended_effective = 0;   ///< t_eff
  u64 layers = 0;                  ///< on this GPU
  double heads = 0;                ///< query heads on this GPU
  u64 batch_per_gpu = 0;           ///< sequences whose attention this GPU runs
  u64 gpus = 0;                    ///< of one copy: tp × pp
  u64 micro_batches = 1;           ///< in flight: pp
  std::optional<Collective> stage_transfer; ///< pp: activations from one stage to the next
  std::string rates_source;
  std::optional<StepEstimate> estimate; ///< none where no profile covers the GPU
  std::string estimate_note;            ///< where the estimate comes from, or why there is none
  bool weights_fit = true; ///< the weights of one GPU fit its memory (else computed all the same)
  std::vector<std::string> notes;
};

/// The checks of one step, each an InputError naming the flag: its sizes within what 64-bit
/// counts hold, and MTP's decode-only rule. A deployment's own checks are Roofline's.
void check_step(const RooflineRequest& request);

/// s, the new tokens of each sequence in the request's step: decode's query and drafted tokens,
/// prefill's prompt, extend's chunk.
[[nodiscard]] u64 new_tokens(const RooflineRequest& request);

/// The step of `request`, checked: the step's checks, then the deployment's, then priced.
[[nodiscard]] RooflineResult compute_roofline(const RooflineRequest& request);

/// The MLA mode `requested` resolves to for a chunk of s tokens in `phase`: automatic is
/// absorbed for s ≤ 128 outside prefill, naive otherwise (vLLM's FlashMLA rule).
[[nodiscard]] MlaMode resolve_mla_mode(MlaMode requested, Phase phase, u64 s);

/// Attention work of a set of sequences over one kind of layer, summed over the sequences.
struct AttentionSums {
  double query = 0;    ///< Σ s: new tokens
  double attended = 0; ///< Σ s·t_eff: query-key pairs per head (capped by a window or chunk)
  double held = 0;     ///< Σ t: cached tokens read (capped likewise)
  /// Of each, the prefill and extend sequences' (the estimate prices them on their own kernel).
  double prefill_query = 0;
  double prefill_attended = 0;
  double prefill_held = 0;
};

/// Attention kinds a step prices apart: full (DSA: its top-k tokens), sliding, chunked.
inline constexpr std::size_t k_attention_kinds_priced = 3;

/// One kind of attention path: its sums over each kind of attention layer.
struct AttentionLoad {
  std::array<AttentionSums, k_attention_kinds_priced>
      kinds; ///< by CacheKind full, sliding, chunked
};

/// One step of a model copy as sums over its sequences, so that one step may mix decodes,
/// prefills and chunks of any context (docs/formulas.md §11, "Mixed steps"). Build it with
/// StepCost::add.
struct StepLoad {
  /// The same load with every sum times `f` (one of two micro-batches: 0.5).
  [[nodiscard]] StepLoad scaled(double f) const;
  /// The same load with the sums of the attention group's side (its tokens, sequences and
  /// attention sums) times `f`: the busiest group's share where sequences do not spread evenly.
  [[nodiscard]] StepLoad scaled_attention(double f) const;

  double tokens = 0;           ///< new tokens through the linear layers of the copy (Σ s)
  double logits = 0;           ///< rows of the LM head
  double attention_tokens = 0; ///< new tokens whose attention (and state) this GPU runs
  double sequences = 0;        ///< sequences whose attention (and state) this GPU runs
  double prefill_tokens = 0;   ///< of attention_tokens, prefill and extend ones
  AttentionLoad absorbed;      ///< MHA/GQA sequences, and MLA sequences attended absorbed
  AttentionLoad naive;         ///< MLA sequences attended naive (decompressed)
  AttentionSums indexer;       ///< DSA: the indexer's pass over every cached token
};

/// One attention geometry on one GPU, and the weights of its projections per layer.
struct AttentionGeometry {
  double layers = 0;   ///< attention layers of this geometry on this GPU
  double heads = 0;    ///< query heads on this GPU
  double kv_heads = 0; ///< KV heads on this GPU
  double head_dim = 0;
  double v_head_dim = 0;
  double qkv_out = 0; ///< GQA: q + k + v widths on this GPU (with an output gate, 2q + k + v)
  double v_width = 0; ///< heads × d_v
  double w_qkv = 0;   ///< GQA: bytes of the q/k/v projection per layer
  double w_o = 0;     ///< bytes of the output projection per layer
};

/// One priced kind of attention layers on one GPU (CacheKind full, sliding or chunked).
struct AttentionKindShape {
  double layers = 0;  ///< layers that attend (KV-shared ones included)
  double stored = 0;  ///< layers that store their own KV
  double window = 0;  ///< tokens a layer holds; 0: every token (full)
  double kv_rate = 0; ///< KV bytes per token per layer on this GPU
  double cap = 0;     ///< most tokens a query attends (window, chunk or DSA top-k); 0: all
  bool sliding_geometry = false; ///< attends with the model's `sliding_attention`
};

/// One GPU's share of a step of a deployment: every width, layer count and weight the op
/// formulas read that does not depend on the batch (docs/formulas.md §11). Worked out once by
/// step_shape(); --explain prints it.
struct StepShape {
  /// How the deployment splits the model, as this GPU sees it.
  struct Split {
    double tp = 1;
    double attention_tp = 1;    ///< GPUs one attention group splits over (dense parts too)
    double attention_share = 1; ///< of the copy's sequences this GPU attends (1/tp with dp)
    double ep = 1;              ///< expert-parallel ranks
    double expert_tp = 1;       ///< GPUs each expert splits over
    double experts_local = 0;   ///< routed experts (redundant ones included) on this GPU
    double expert_copies = 1;   ///< copies whose tokens one expert group serves
    bool all_to_all = false;    ///< tokens travel to their experts' GPUs
    u64 domain_copy = 0;        ///< GPUs of one copy, tp × pp
    u64 expert_local = 0;       ///< GPUs of one expert group that share a scale-up domain
  } split;
  /// Layers of one pipeline stage on this GPU.
  struct Layers {
    u64 stage = 0;     ///< layers on this GPU
    double mixers = 0; ///< with a token mixer (attention or state)
    double dense = 0;  ///< with a dense MLP
    double moe = 0;    ///< with an MoE MLP
  } layers;
  AttentionGeometry main;    ///< full and chunked layers (and sliding ones without their own)
  AttentionGeometry sliding; ///< sliding layers with `sliding_attention`
  std::array<AttentionKindShape, k_attention_kinds_priced> kinds;
  std::array<std::size_t, k_attention_kinds_priced> present{}; ///< kinds with layers here
  std::size_t present_count = 0;
  /// MLA: the query width and the weights per layer, bytes (W_UK and W_UV together in absorb).
  struct Mla {
    double q_out = 0; ///< heads × (d_nope + d_R) on this GPU
    double w_q_down = 0, w_q_up = 0, w_q = 0, w_kv_down = 0, w_absorb = 0;
  } mla;
  /// DSA: the indexer on this GPU.
  struct Indexer {
    double layers = 0;
    double rate = 0; ///< key bytes per token per layer
    double heads = 0;
    double head_dim = 0;
    double weights = 0; ///< per layer
  } indexer;
  /// Recurrent layers on this GPU: one sequence's state per layer, the projections' weights.
  struct State {
    double layers = 0;
    double bytes = 0;
    double elements = 0;
    double weights = 0; ///< per layer
    double params = 0;  ///< per layer (2 FLOP each per token)
    double linears = 0; ///< matmuls a layer (Mamba-1 4, Mamba-2 2, Gated DeltaNet 3)
  } state;
  /// Weights no formula places (a params override's remainder), on this GPU.
  struct Other {
    double weights = 0;
    double params = 0;
  } other;
  /// Feed-forward widths on this GPU and weights per layer, bytes.
  struct FeedForward {
    double mlp_width = 0;    ///< dense MLP width
    double w_mlp = 0;        ///< one of its matrices
    double shared_width = 0; ///< shared-expert width
    double w_shared = 0;
    double w_expert = 0;       ///< one matrix of one routed expert
    double dispatch_bytes = 0; ///< one token's hidden state as dispatched
  } ffn;
  /// Dtypes of the arithmetic.
  struct Math {
    DType attention = DType::bf16; ///< attention and dense matmuls
    DType expert = DType::bf16;    ///< expert matmuls
    DType absorb = DType::bf16;    ///< W_UK / W_UV
    DType dispatch = DType::bf16;  ///< expert dispatch payload
    DType kv = DType::bf16;        ///< the attention cache
    bool attention_blocks = false; ///< attention and dense weights carry block scales
    bool expert_blocks = false;    ///< expert weights carry block scales
  } math;
  double activation_bytes = 0; ///< per element
  bool mla_model = false;
};

/// The shape of the request's step on one GPU (its batch, context and phase aside).
[[nodiscard]] StepShape step_shape(const RooflineRequest& request);

/// The roofline of one step for any StepLoad, with everything that does not depend on the
/// batch prepared once (StepShape): compute_roofline is StepCost over a uniform batch, and the
/// simulator prices every mixed step with it (the same op formulas, no copy of them).
class StepCost {
public:
  /// Uses the request's model, GPU rates, cache, weight dtype, parallelism, MLA mode, naive-KV
  /// layout, communication switch, overlap, expert imbalance and dispatch dtype; batch,
  /// context, query and phase are the load's. `draft`: the request's model is an MTP module,
  /// whose own projection of [embedding; hidden] is priced too and whose ops are named mtp.*.
  explicit StepCost(const RooflineRequest& request, bool draft = false);
  /// The same for a deployment already checked and resolved for `request` (Roofline's).
  StepCost(const RooflineRequest& request, const kv::Deployment& deployment);

  /// Adds `copies` sequences with s new tokens over a cached prefix of `prefix` tokens
  /// (decode: t_eff = t = prefix + s; prefill/extend: t_eff = prefix + s/2), of which
  /// `attention_copies` are attended on this GPU (fewer than `copies` with dp-attention).
  void add(StepLoad& load, Phase phase, u64 s, u64 prefix, double copies,
           double attention_copies) const;

  /// Seconds of the step on one GPU: Σ over ops of max(FLOPs / peak, bytes / bandwidth) plus
  /// the collectives; with two-batch overlap, two half steps with the longer of compute and
  /// communication exposed.
  [[nodiscard]] double time_s(const StepLoad& load, Pricing pricing = Pricing::bound) const;
  /// Every op of the step, as compute_roofline reports them (exposed_s set).
  [[nodiscard]] std::vector<Op> ops(const StepLoad& load) const;
  /// The same, written into `out` from index `first` on (the ops already there are reused, so
  /// a sweep that keeps `out` allocates nothing); `out` ends after them.
  void ops(const StepLoad& load, std::vector<Op>& out, std::size_t first) const;
  /// A micro-batch `load` handing its hidden states on at one stage boundary: over NVLink while
  /// the copy fits one scale-up domain, else over the NIC.
  [[nodiscard]] Collective stage_transfer(const StepLoad& load) const;
  /// Seconds of a stage transfer `c`, priced as asked.
  [[nodiscard]] double transfer_s(const Collective& c, Pricing pricing) const;
  /// Seconds for every one of `sequences` sequences in `load` to advance one step under
  /// pipeline parallel: m = min(pp, sequences) micro-batches of 1/m of the load each cross the
  /// pp stages, with pp − 1 transfers; a sequence is never split (time_s at pp 1).
  [[nodiscard]] double pipeline_time_s(const StepLoad& load, u64 sequences,
                                       Pricing pricing = Pricing::bound) const;

  /// Fraction of the copy's sequences whose attention one GPU runs (1/tp with dp-attention).
  [[nodiscard]] double attention_share() const { return m_shape.split.attention_share; }
  [[nodiscard]] u64 layers() const { return m_shape.layers.stage; }
  [[nodiscard]] double heads() const { return m_shape.main.heads; }
  [[nodiscard]] const StepShape& shape() const { return m_shape; }
  [[nodiscard]] const RooflineRequest& request() const { return m_req; }

private:
  /// `calls` dense GEMMs of `rows` tokens each in the attention and dense weights' format.
  [[nodiscard]] Kernels gemm(double calls, double rows) const {
    return {KernelClass::gemm, calls, rows, m_shape.math.attention_blocks};
  }
  template <class Sink> void build(const StepLoad& load, Sink& sink) const;
  template <class Sink> void projections(const StepLoad& load, Sink& sink) const;
  template <class Sink> void indexer(const StepLoad& load, Sink& sink) const;
  template <class Sink> void attention_core(const StepLoad& load, Sink& sink) const;
  template <class Sink> void state_layers(const StepLoad& load, Sink& sink) const;
  template <class Sink> void feed_forward(const StepLoad& load, Sink& sink) const;
  template <class Sink> void experts(const StepLoad& load, Sink& sink) const;

  RooflineRequest m_req;
  bool m_draft = false;
  StepShape m_shape;
};

/// A deployment's roofline with everything that does not depend on the step prepared once:
/// the deployment resolved, its weights placed, its StepCost (and its MTP module's) built. A
/// sweep prices each batch, context and query with step() and no more.
class Roofline {
public:
  /// Everything of `deployment` but its phase, batch, context and query.
  explicit Roofline(const RooflineRequest& deployment);
  Roofline(const Roofline&) = delete;
  Roofline& operator=(const Roofline&) = delete;

  /// The step of `step` (whose other fields are the deployment's), checked (check_step), into
  /// `out`: its buffers are reused, so a sweep allocates nothing once they have grown.
  void step(const RooflineRequest& step, RooflineResult& out) const;
  [[nodiscard]] RooflineResult step(const RooflineRequest& step) const;
  [[nodiscard]] const kv::Deployment& deployment() const { return m_deployment; }
  [[nodiscard]] const StepShape& shape() const { return m_cost.shape(); }

private:
  friend RooflineResult compute_roofline(const RooflineRequest& request);
  /// step() once its checks have passed.
  void price(const RooflineRequest& step, RooflineResult& out) const;
  /// The estimate's totals of a step `bound` has priced (its ops carry their estimates).
  [[nodiscard]] StepEstimate estimate_totals(const RooflineResult& bound,
                                             const RooflineRequest& step, double in_flight,
                                             double pp) const;

  RooflineRequest m_req;
  kv::Deployment m_deployment;
  StepCost m_cost;
  std::optional<StepCost> m_draft; ///< the MTP module, when the deployment drafts
  bool m_weights_fit = true;
  std::string m_weights_note;
};

/// Where absorbed MLA stops paying, for chunks of s tokens over a prefix of P (docs/formulas.md).
struct MlaCrossover {
  /// s·t_eff/P at equal FLOPs: d_c(d_nope+d_v)/(2d_c − d_nope − d_v); none where 2d_c ≤
  /// d_nope + d_v, since absorbed then costs fewer FLOPs at every s.
  std::optional<double> flop_ratio;
  std::optional<double> flop_query; ///< the s where FLOPs are equal at this prefix; none likewise
  u64 time_query =
      0; ///< the smallest s at which naive takes less time on this GPU (0: none ≤ limit)
  u64 prefix = 0;
};

/// For the request's model, GPU, batch and prefix (`context`); the model must be MLA.
[[nodiscard]] MlaCrossover mla_crossover(const RooflineRequest& request);

/// The time of the ops that differ between MLA modes (the attention of absorbed or naive) in a
/// step of `query` new tokens per sequence over the request's prefix.
[[nodiscard]] double mla_attention_time(const RooflineRequest& request, MlaMode mode, u64 query);

/// E · (1 − (1 − k/E)^n): experts a batch of n tokens touches under uniform routing.
[[nodiscard]] double expected_experts(u64 experts, u64 per_token, double tokens);

} // namespace kvcalc::roofline

namespace kvcalc::roofline {

/// Ceilings from a profile. Dtypes it did not measure take the datasheet peak of `gpu` scaled
/// by the measured/datasheet ratio of bf16 (said in the source line); the link likewise.
[[nodiscard]] DeviceRates device_rates(const device::Gpu& gpu,
                                       const device::DeviceProfile& profile);

} // namespace kvcalc::roofline
