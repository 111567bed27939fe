#include <kvcalc/sim/simulator.hpp>

#include <algorithm>
#include <cmath>
#include <deque>
#include <unordered_map>

#include <fmt/format.h>

#include <kvcalc/core/spell.hpp>
#include <kvcalc/core/units.hpp>

#include "kv_pools.hpp"

using namespace kvcalc::roofline;
using namespace kvcalc::kv;
using namespace kvcalc::model;

namespace kvcalc::sim {

std::string_view preemption_name(Preemption p) {
  return k_preemptions.name(p);
}

Preemption parse_preemption(std::string_view text) {
  return k_preemptions.parse(text);
}

std::variant<InstanceSize, InstanceRefusal> size_instance(std::string_view model,
                                                          const CapacityResult& capacity) {
  using Reason = InstanceRefusal::Reason;
  std::string name(model);
  if (!capacity.fits) {
    return InstanceRefusal{Reason::does_not_fit,
                           name + " does not fit on " + group_digits(capacity.parallel.gpus) +
                               " × " + capacity.gpu + " (tp " + group_digits(capacity.parallel.tp) +
                               "): " + capacity.reason};
  }
  if (capacity.replicas > 1) {
    return InstanceRefusal{
        Reason::model_copies,
        "simulate runs one serving instance: --gpus " + group_digits(capacity.parallel.gpus) +
            " holds " + group_digits(capacity.replicas) +
            " copies of tp × pp = " + group_digits(capacity.parallel.tp * capacity.parallel.pp) +
            "; give --gpus equal to tp × pp (and divide the rate among the copies)"};
  }
  InstanceSize size;
  // The engine's pools: one rank's capacity bounds one sequence; the instance has kv_pools.
  for (const SequencePool& pool : capacity.sequence_pools) {
    if (pool.capacity == 0) {
      std::string why;
      for (const auto& note : capacity.notes) {
        why += "; " + note;
      }
      return InstanceRefusal{
          Reason::empty_pool,
          name + " on " + capacity.gpu + ": the engine's " + pool.name + " pool holds nothing" +
              (why.empty() ? " (kvcalc capacity --explain shows its budget)" : why)};
    }
    SequencePool whole = pool;
    whole.capacity = checked_mul(pool.capacity, capacity.kv_pools);
    size.pools.push_back(std::move(whole));
    size.pool_limits.push_back(pool.capacity);
  }
  if (size.pools.empty()) {
    return InstanceRefusal{Reason::no_cache,
                           name + ": no layer keeps a cache; there is nothing to simulate"};
  }
  const SequencePool& first = size.pools.front();
  size.pool_blocks = first.capacity;
  size.sequence_blocks_limit = size.pool_limits.front();
  size.pool_unit = first.unit;
  u64 prefix_block = first.prefix_block_size();
  size.block_size = prefix_block > 0 ? prefix_block
                    : !first.terms.empty() && first.terms.front().block_size > 0
                        ? first.terms.front().block_size
                        : 1;
  if (size.pool_unit == "bytes") {
    size.block_size = std::max<u64>(capacity.block_size, 1);
  }
  size.max_batched_tokens = capacity.max_batched_tokens;
  size.max_seqs = capacity.max_seqs;
  size.max_context = capacity.max_model_len;
  size.kv_bytes_per_token = static_cast<double>(capacity.kv_bytes_per_token_per_gpu);
  return size;
}

SimConfig instance_config(InstanceSize size, const CapacityRequest& request,
                          const Parallelism& parallel, const DeviceRates& rates, MlaMode mla) {
  SimConfig c;
  static_cast<InstanceSize&>(c) = std::move(size);
  c.step.model = request.model;
  c.step.gpu = request.gpu;
  c.step.rates = rates;
  c.step.cache = request.cache;
  c.step.weight_dtype = request.weight_dtype;
  c.step.parallel = parallel;
  c.step.mla = mla;
  return c;
}

SimConfig instance_config(const CapacityRequest& request, const CapacityResult& capacity,
                          const DeviceRates& rates, MlaMode mla) {
  auto sized = size_instance(request.model.name, capacity);
  if (auto* refusal = std::get_if<InstanceRefusal>(&sized)) {
    throw InputError(refusal->message);
  }
  return instance_config(std::get<InstanceSize>(std::move(sized)), request, capacity.parallel,
                         rates, mla);
}

double offered_rate(const SimResult& r) {
  double span = r.last_arrival_s - r.first_arrival_s;
  return span > 0 && r.requests_arrived > 1 ? static_cast<double>(r.requests_arrived - 1) / span
                                            : 0;
}

namespace {

/// The least-squares slope of y over x, from running sums.
class LeastSquares {
public:
  void add(double x, double y) {
    ++m_n;
    m_x += x;
    m_y += y;
    m_xx += x * x;
    m_xy += x * y;
  }
  /// Unset under 20 points, or when every x is the same.
  [[nodiscard]] std::optional<double> slope() const {
    double n = static_cast<double>(m_n);
    double spread = n * m_xx - m_x * m_x;
    if (m_n < 20 || !(spread > 1e-12 * n * m_xx)) {
      return std::nullopt;
    }
    return (n * m_xy - m_x * m_y) / spread;
  }

private:
  u64 m_n = 0;
  double m_x = 0;
  double m_y = 0;
  double m_xx = 0;
  double m_xy = 0;
};

using detail::KvHold;
using detail::KvPools;

/// A request inside the instance.
struct Seq {
  Request req;
  u64 computed = 0;         ///< tokens in the KV cache
  u64 computed_blocks = 0;  ///< blocks of the first pool's full layers `computed` fills
  u64 generated = 0;        ///< output tokens sampled so far
  u64 high = 0;             ///< most tokens it ever had computed (recompute counts below this)
  KvHold kv;                ///< what it holds of the pools
  u64 shared_blocks = 0;    ///< blocks of a shared prefix it reads
  bool owns_prefix = false; ///< computing a prefix others will share (not yet complete)
  bool holds_ref = false;   ///< counted among a ready prefix's holders
  bool swapped = false;     ///< its KV is in host memory
  double admitted_s = -1;   ///< first scheduled
  double first_token_s = -1;

  [[nodiscard]] u64 known() const { return req.prompt_tokens + generated; }
};

/// Blocks of a shared prefix, alive while any holder runs.
struct PrefixEntry {
  u64 blocks = 0; ///< of the first pool's full layers
  u64 refs = 0;
  bool ready = false; ///< computed: later requests may share it
};

/// The pools of `c`: its engine's, or one pool of whole blocks, every layer holding every token.
KvPools pools_of(const SimConfig& c) {
  if (c.pools.empty()) {
    return {{{"blocks", "blocks", c.pool_blocks, {{CacheKind::full, 0, c.block_size, 1}}}},
            {c.sequence_blocks_limit}};
  }
  return {c.pools, c.pool_limits};
}

class Instance {
public:
  Instance(const SimConfig& config, RequestSource& source,
           const std::function<void(const StepRecord&)>& on_step, const OnComplete& on_complete)
      : m_c(config), m_cost(config.step), m_source(source), m_on_step(on_step),
        m_on_complete(on_complete), m_kv(pools_of(config)), m_stages(config.step.parallel.pp) {
    m_prefix_block = m_kv.prefix_block();
    m_block = m_prefix_block > 0 ? m_prefix_block : std::max<u64>(m_c.block_size, 1);
    if (m_c.max_batched_tokens == 0 || m_c.max_seqs == 0) {
      throw InputError("the simulated instance needs a token budget and a sequence limit of at "
                       "least 1");
    }
    if (m_c.preemption == Preemption::swap && !(m_c.swap_bytes_per_s > 0)) {
      throw InputError("--swap-bandwidth must be above 0");
    }
    m_seq_limit = checked_mul(m_c.max_seqs, m_stages, "--max-seqs × pipeline stages");
    m_r.pool_blocks = m_kv.capacity(0);
    m_r.block_size = m_prefix_block > 0 ? m_prefix_block : m_c.block_size;
    m_next = m_source.next();
    if (m_next) {
      m_r.first_arrival_s = m_next->arrival_s;
    }
  }

  SimResult run() {
    double now = m_next ? m_next->arrival_s : 0;
    while (true) {
      pull(now);
      if (m_running.empty() && m_waiting.empty()) {
        if (!m_next) {
          m_next = m_source.next();
        }
        if (!m_next) {
          break;
        }
        now = std::max(now, m_next->arrival_s);
        continue;
      }
      now = step(now);
    }
    finish(now);
    return std::move(m_r);
  }

private:
  /// Blocks of the first pool's full layers that hold `tokens` tokens (prefixes, swap).
  [[nodiscard]] u64 blocks_for(u64 tokens) const { return (tokens + m_block - 1) / m_block; }

  /// New arrivals up to `now` join the queue, or are rejected when they can never run.
  void pull(double now) {
    if (!m_next) {
      m_next = m_source.next(); // a closed loop sends again once a request has left
    }
    while (m_next && m_next->arrival_s <= now) {
      Request r = *m_next;
      m_next = m_source.next();
      ++m_r.requests_arrived;
      m_r.last_arrival_s = r.arrival_s;
      if (r.prefilled && r.output_tokens == 1) {
        // Its one token came with the cache: done on arrival, holding no slot.
        ++m_r.requests_completed;
        m_r.input_tokens += r.prompt_tokens;
        m_r.output_tokens += 1;
        m_ttft.add(r.arrival_s - r.origin_s);
        m_e2e.add(r.arrival_s - r.origin_s);
        if (m_on_complete) {
          m_on_complete(r, r.arrival_s, r.arrival_s);
        }
        m_source.left(r.arrival_s, true);
        continue;
      }
      u64 total = checked_add(r.prompt_tokens, r.output_tokens);
      if (m_c.max_context > 0 && total > m_c.max_context) {
        ++m_r.requests_rejected;
        ++m_r.rejected_context;
        m_source.left(r.arrival_s, false);
        continue;
      }
      if (!m_kv.sequence_fits(total)) {
        ++m_r.requests_rejected;
        ++m_r.rejected_pool;
        m_source.left(r.arrival_s, false);
        continue;
      }
      if (m_waiting.size() + m_running.size() >= k_max_requests_in_system) {
        throw InputError(fmt::format(
            "more than {} requests are waiting or running at once (at t = {:.3f} s): the "
            "instance is far past what it serves, and memory grows with each; lower the rate "
            "or the burst, or add GPUs (docs/reliability.md, \"Limits\")",
            group_digits(k_max_requests_in_system), r.arrival_s));
      }
      Seq s;
      s.req = r;
      m_waiting.push_back(s);
    }
  }

  /// A prefilled request admitted now: its prompt's cache and its first token are in place.
  static void take_prefilled(Seq& s, double now) {
    s.computed = s.req.prompt_tokens;
    s.high = s.computed;
    s.generated = 1;
    s.first_token_s = now;
  }

  /// Undoes take_prefilled when the pool has no room after all.
  static void drop_prefilled(Seq& s) {
    s.computed = 0;
    s.computed_blocks = 0;
    s.high = 0;
    s.generated = 0;
    s.first_token_s = -1;
  }

  /// Gives back everything `s` holds; its prefix stays while other holders run.
  void release(Seq& s) {
    m_full_blocks -= own_blocks(s);
    m_kv.release(s.kv);
    m_stored -= s.computed - std::min(s.computed, s.shared_blocks * m_prefix_block);
    if (s.holds_ref || s.owns_prefix) {
      auto it = m_prefixes.find(s.req.prefix_id);
      if (s.holds_ref && --it->second.refs == 0) {
        m_full_blocks -= it->second.blocks;
        m_kv.free_prefix(it->second.blocks);
        m_stored -= it->second.blocks * m_prefix_block;
        m_prefixes.erase(it);
      } else if (s.owns_prefix) {
        m_prefixes.erase(it);
      }
    }
    s.shared_blocks = 0;
    s.holds_ref = false;
    s.owns_prefix = false;
  }

  /// Preempts the latest-arrived running sequence (the back of the running list).
  void preempt_back() {
    Seq victim = std::move(m_running.back());
    m_running.pop_back();
    if (m_c.preemption == Preemption::swap) {
      m_step_swap_s += swap_time(victim.computed);
      release(victim);
      victim.swapped = true;
    } else {
      release(victim);
      victim.computed = 0;
      victim.computed_blocks = 0;
    }
    ++m_r.preemptions;
    m_preempted_now = true;
    m_waiting.push_front(std::move(victim));
  }

  [[nodiscard]] double swap_time(u64 tokens) const {
    double bytes = static_cast<double>(blocks_for(tokens) * m_block) * m_c.kv_bytes_per_token;
    return bytes / m_c.swap_bytes_per_s;
  }

  /// Tries to share a ready prefix (or to start one) for a sequence about to be admitted.
  void attach_prefix(Seq& s) {
    if (!m_c.prefix_sharing || m_prefix_block == 0 || s.req.prefix_id == 0 || s.computed != 0) {
      return;
    }
    // Whole blocks only, and at least one token left to compute.
    u64 shareable = std::min(s.req.prefix_tokens, s.known() - 1) / m_prefix_block;
    if (shareable == 0) {
      return;
    }
    auto it = m_prefixes.find(s.req.prefix_id);
    if (it == m_prefixes.end()) {
      m_prefixes.emplace(s.req.prefix_id, PrefixEntry{shareable, 0, false});
      s.owns_prefix = true;
      return;
    }
    if (!it->second.ready) {
      return; // still being computed by its first holder: compute it alone
    }
    u64 k = std::min(shareable, it->second.blocks);
    s.kv.sized = false;
    ++it->second.refs;
    s.holds_ref = true;
    s.shared_blocks = k;
    s.computed = k * m_prefix_block;
    s.computed_blocks = k;
  }

  void detach_prefix(Seq& s) {
    if (s.owns_prefix) {
      m_prefixes.erase(s.req.prefix_id);
    } else if (s.holds_ref) {
      --m_prefixes.find(s.req.prefix_id)->second.refs; // others hold it: it stays
    }
    s.owns_prefix = false;
    s.holds_ref = false;
    s.shared_blocks = 0;
    s.computed = 0;
    s.computed_blocks = 0;
    s.kv.sized = false;
  }

  /// Records `n` new tokens of `s` in this step's load and in the cache.
  void schedule(Seq& s, u64 n) {
    roofline::Phase phase = s.generated > 0 && s.known() - s.computed == 1 ? Phase::decode
                            : s.computed == 0                              ? Phase::prefill
                                                                           : Phase::extend;
    m_cost.add(m_load, phase, n, s.computed, 1, m_cost.attention_share());
    (phase == Phase::decode ? m_decode_tokens : m_prefill_tokens) += n;
    if (s.computed < s.high) {
      m_r.recomputed_tokens += std::min(n, s.high - s.computed);
    }
    m_full_blocks -= own_blocks(s);
    s.computed += n;
    if (s.computed > s.computed_blocks * m_block) {
      s.computed_blocks = blocks_for(s.computed);
    }
    s.high = std::max(s.high, s.computed);
    m_stored += n;
    m_r.computed_tokens += n;
    if (s.owns_prefix) {
      auto it = m_prefixes.find(s.req.prefix_id);
      PrefixEntry& e = it->second;
      if (s.computed >= e.blocks * m_prefix_block) {
        // The prefix is complete: its blocks pass from this sequence to the shared entry.
        e.ready = true;
        e.refs = 1;
        m_full_blocks += e.blocks;
        m_kv.share_prefix(s.kv, e.blocks);
        s.shared_blocks = e.blocks;
        s.owns_prefix = false;
        s.holds_ref = true;
      }
    }
    m_full_blocks += own_blocks(s);
  }

  /// One step from `now`: the running sequences scheduled, waiting ones admitted, the step
  /// priced, its tokens sampled; returns when it ends.
  double step(double now) {
    u64 budget = begin_step();
    budget = schedule_running(budget);
    admit_waiting(now, budget);
    if (m_scheduled.empty()) {
      throw Error("internal error: the simulator's scheduler made no progress");
    }
    StepRecord rec;
    rec.start_s = now;
    rec.duration_s = price_step();
    rec.running = m_running.size();
    rec.kv_occupancy = m_kv.occupancy();
    rec.blocks_used = m_kv.used(0);
    double end = now + rec.duration_s;
    u64 outputs = advance(end);
    account(rec, outputs);
    return end;
  }

  /// Clears the step's load and counts; returns its token budget (one per micro-batch).
  u64 begin_step() {
    m_load = roofline::StepLoad{};
    m_step_swap_s = 0;
    m_preempted_now = false;
    m_decode_tokens = 0;
    m_prefill_tokens = 0;
    m_scheduled.clear();
    return checked_mul(m_c.max_batched_tokens, m_stages);
  }

  /// Running sequences first, oldest first, while `budget` lasts: one token for a decode, a
  /// chunk for a prompt. Returns the budget left.
  u64 schedule_running(u64 budget) {
    for (std::size_t i = 0; i < m_running.size() && budget > 0; ++i) {
      Seq& s = m_running[i];
      u64 n = std::min(s.known() - s.computed, budget);
      u64 tokens = s.computed + n;
      if (!s.kv.holds(tokens) && !allocate_running(i, tokens)) {
        break;
      }
      schedule(m_running[i], n);
      m_scheduled.push_back(i);
      budget -= n;
    }
    return budget;
  }

  /// Takes what running sequence `i` needs to hold `tokens` tokens, preempting the
  /// latest-arrived while the pools lack room; false when the sequence itself was preempted
  /// (nothing later was left to take from).
  bool allocate_running(std::size_t i, u64 tokens) {
    const Seq& s = m_running[i];
    auto need = m_kv.shortfall(s.kv, tokens, s.shared_blocks);
    while (!m_kv.room_for(need)) {
      bool itself = i + 1 == m_running.size();
      preempt_back();
      if (itself) {
        return false;
      }
    }
    m_kv.allocate(m_running[i].kv, need, tokens);
    return true;
  }

  /// Then waiting requests in arrival order (FCFS, no skipping) while `budget` lasts, the
  /// sequence limit allows and the pools hold their first chunk, unless this step preempted
  /// (vLLM v1).
  void admit_waiting(double now, u64 budget) {
    while (!m_preempted_now && !m_waiting.empty() && budget > 0 && m_running.size() < m_seq_limit) {
      if (!admit_front(now, budget)) {
        break;
      }
    }
  }

  /// Admits the head of the queue with its first chunk out of `budget`; false, with the
  /// request left as it was, when the pools have no room for it.
  bool admit_front(double now, u64& budget) {
    Seq& s = m_waiting.front();
    bool arriving = s.req.prefilled && s.generated == 0;
    if (arriving) {
      take_prefilled(s, now);
    } else {
      attach_prefix(s);
    }
    u64 n = std::min(s.known() - s.computed, budget);
    auto need = m_kv.shortfall(s.kv, s.computed + n, s.shared_blocks);
    if (!m_kv.room_for(need)) {
      if (arriving) {
        drop_prefilled(s);
      } else if (!s.swapped) {
        detach_prefix(s);
      }
      return false;
    }
    resume(s, now, arriving);
    m_running.push_back(std::move(s));
    m_waiting.pop_front();
    Seq& r = m_running.back();
    m_full_blocks += own_blocks(r);
    m_kv.allocate(r.kv, need, r.computed + n);
    schedule(r, n);
    m_scheduled.push_back(m_running.size() - 1);
    budget -= n;
    return true;
  }

  /// What admitting `s` now brings back: a handed-off cache or a swapped one is in place again
  /// (a swap copies it back), a shared prefix's tokens are hits, and the first admission ends
  /// its wait in the queue.
  void resume(Seq& s, double now, bool arriving) {
    if (arriving) {
      s.computed_blocks = blocks_for(s.computed);
      m_stored += s.computed;
    }
    if (s.swapped) {
      m_step_swap_s += swap_time(s.computed);
      m_stored += s.computed;
      s.swapped = false;
    } else if (s.computed > 0 && !arriving) {
      m_r.prefix_hit_tokens += s.computed;
    }
    if (s.admitted_s < 0) {
      s.admitted_s = now;
      m_queue.add(now - s.req.arrival_s);
      m_growth.add(s.req.arrival_s - m_r.first_arrival_s, now - s.req.arrival_s);
    }
  }

  /// The step's time: whole sequences, a step's n split into m = min(pp, n) micro-batches of
  /// ⌈n / m⌉, each spread over dp attention groups whose busiest holds ⌈⌈n / m⌉ / dp⌉ (each
  /// sequence was added at 1/dp of its attention); plus the swap copies.
  [[nodiscard]] double price_step() const {
    u64 n = m_scheduled.size();
    double dp = std::round(1.0 / m_cost.attention_share());
    double m = static_cast<double>(std::clamp<u64>(n, 1, m_stages));
    double micro = std::ceil(static_cast<double>(n) / m);
    double busiest = dp > 1 ? std::ceil(micro / dp) * dp * m / static_cast<double>(n) : 1.0;
    StepLoad priced = busiest > 1 ? m_load.scaled_attention(busiest) : m_load;
    double overhead = m_c.pricing == Pricing::estimate && m_c.step.rates.estimate
                          ? m_c.step.rates.estimate->step_overhead_s()
                          : 0;
    return m_cost.pipeline_time_s(priced, n, m_c.pricing) + overhead + m_step_swap_s;
  }

  /// Tokens sampled at the step's `end`: every sequence whose known tokens are all computed
  /// samples one; finished sequences leave. Returns the tokens sampled.
  u64 advance(double end) {
    u64 outputs = 0;
    for (std::size_t i : m_scheduled) {
      Seq& s = m_running[i];
      if (s.computed != s.known()) {
        continue; // a prompt chunk short of the end
      }
      ++s.generated;
      ++outputs;
      if (s.generated == 1) {
        s.first_token_s = end;
      }
      if (s.generated == s.req.output_tokens) {
        complete(s, end);
      }
    }
    if (m_finished_now > 0) {
      std::erase_if(m_running, [](const Seq& s) { return s.generated == s.req.output_tokens; });
      m_finished_now = 0;
    }
    return outputs;
  }

  /// The step's statistics, from `rec`'s figures taken while it ran and the `outputs` it
  /// sampled; the rest of `rec` filled for on_step.
  void account(StepRecord& rec, u64 outputs) {
    double duration = rec.duration_s;
    ++m_r.steps;
    m_r.busy_s += duration;
    m_r.swap_s += m_step_swap_s;
    m_r.kv_peak_blocks = std::max(m_r.kv_peak_blocks, rec.blocks_used);
    m_r.kv_peak = std::max(m_r.kv_peak, rec.kv_occupancy);
    m_occupancy_time += rec.kv_occupancy * duration;
#ifndef NDEBUG
    if (m_full_blocks != counted_full_blocks()) {
      throw Error("internal error: the simulator lost count of its full-attention blocks");
    }
#endif
    double slots = m_prefix_block > 0 ? static_cast<double>(m_full_blocks * m_prefix_block) : 0;
    if (slots > 0) {
      m_fragmentation_time += (slots - static_cast<double>(m_stored)) / slots * duration;
      m_holding_time += duration;
    }
    m_r.peak_running = std::max(m_r.peak_running, rec.running);
    m_running_time += static_cast<double>(rec.running) * duration;
    u64 tokens = m_decode_tokens + m_prefill_tokens;
    m_timeline.add(rec.start_s - m_r.first_arrival_s, duration, rec.kv_occupancy,
                   static_cast<double>(rec.running), static_cast<double>(tokens),
                   static_cast<double>(outputs));
    if (m_on_step) {
      rec.step = m_r.steps;
      rec.waiting = m_waiting.size();
      rec.decode_tokens = m_decode_tokens;
      rec.prefill_tokens = m_prefill_tokens;
      rec.preemptions = m_r.preemptions;
      rec.completed = m_r.requests_completed;
      m_on_step(rec);
    }
  }

  /// Blocks of the first pool's full layers `s` fills alone (a shared prefix is counted once,
  /// in its entry).
  [[nodiscard]] static u64 own_blocks(const Seq& s) {
    return s.computed_blocks > s.shared_blocks ? s.computed_blocks - s.shared_blocks : 0;
  }

  /// m_full_blocks counted afresh, to check the running count in debug builds.
  [[nodiscard]] u64 counted_full_blocks() const {
    u64 blocks = 0;
    for (const Seq& s : m_running) {
      blocks += own_blocks(s);
    }
    for (const auto& [id, e] : m_prefixes) {
      blocks += e.ready ? e.blocks : 0;
    }
    return blocks;
  }

  void complete(Seq& s, double end) {
    ++m_finished_now;
    ++m_r.requests_completed;
    m_r.input_tokens += s.req.prompt_tokens;
    m_r.output_tokens += s.req.output_tokens;
    double origin = s.req.prefilled ? s.req.origin_s : s.req.arrival_s;
    m_ttft.add(s.first_token_s - origin);
    m_e2e.add(end - origin);
    if (s.req.output_tokens > 1) {
      m_tpot.add((end - s.first_token_s) / static_cast<double>(s.req.output_tokens - 1));
    }
    if (m_on_complete) {
      m_on_complete(s.req, s.first_token_s, end);
    }
    m_source.left(end, true);
    release(s);
  }

  void finish(double end) {
    m_r.end_s = end;
    m_r.makespan_s = std::max(0.0, end - m_r.first_arrival_s);
    if (m_r.makespan_s > 0) {
      m_r.input_tokens_per_s = static_cast<double>(m_r.input_tokens) / m_r.makespan_s;
      m_r.output_tokens_per_s = static_cast<double>(m_r.output_tokens) / m_r.makespan_s;
      m_r.total_tokens_per_s = m_r.input_tokens_per_s + m_r.output_tokens_per_s;
      m_r.kv_mean = m_occupancy_time / m_r.makespan_s;
    }
    m_r.fragmentation = m_holding_time > 0 ? m_fragmentation_time / m_holding_time : 0;
    m_r.mean_running = m_r.busy_s > 0 ? m_running_time / m_r.busy_s : 0;
    m_r.mean_step_tokens =
        m_r.steps > 0 ? static_cast<double>(m_r.computed_tokens) / static_cast<double>(m_r.steps)
                      : 0;
    m_r.ttft = m_ttft.summary();
    m_r.tpot = m_tpot.summary();
    m_r.e2e = m_e2e.summary();
    m_r.queue = m_queue.summary();
    m_r.queue_growth = m_growth.slope();
    m_r.timeline = m_timeline.points(m_r.makespan_s);
  }

  const SimConfig& m_c;
  StepCost m_cost;
  RequestSource& m_source;
  const std::function<void(const StepRecord&)>& m_on_step;
  const OnComplete& m_on_complete;
  std::optional<Request> m_next;
  std::vector<Seq> m_running; ///< in arrival order: the back is the preemption victim
  std::deque<Seq> m_waiting;  ///< in arrival order: preempted sequences return to the front
  std::unordered_map<u64, PrefixEntry> m_prefixes;
  std::vector<std::size_t> m_scheduled;
  KvPools m_kv;
  u64 m_prefix_block = 0; ///< tokens per block of the first pool's full layers (0: none)
  u64 m_block = 1;        ///< m_prefix_block, or the instance's block size when it has none
  u64 m_stored = 0;       ///< tokens in allocated blocks, shared prefixes counted once
  /// Blocks of the first pool's full layers held by running sequences and ready prefixes
  /// (each prefix once): the slots the fragmentation figure compares with m_stored.
  u64 m_full_blocks = 0;
  /// Pipeline stages: a step advances up to pp micro-batches (never splitting a sequence), each
  /// with the engine's token budget and sequence limit.
  u64 m_stages = 1;
  u64 m_seq_limit = 0; ///< running sequences: max_seqs per micro-batch
  StepLoad m_load;
  double m_step_swap_s = 0;
  bool m_preempted_now = false;
  u64 m_decode_tokens = 0;
  u64 m_prefill_tokens = 0;
  u64 m_finished_now = 0;
  double m_occupancy_time = 0;
  double m_fragmentation_time = 0;
  double m_holding_time = 0;
  double m_running_time = 0;
  LatencyHistogram m_ttft;
  LatencyHistogram m_tpot;
  LatencyHistogram m_e2e;
  LatencyHistogram m_queue;
  LeastSquares m_growth; ///< queue time over arrival time
  TimeSeries m_timeline;
  SimResult m_r;
};

} // namespace

SimResult simulate(const SimConfig& config, RequestSource& source,
                   const std::function<void(const StepRecord&)>& on_step,
                   const OnComplete& on_complete) {
  Instance instance(config, source, on_step, on_complete);
  return instance.run();
}

double KvTransfer::send_s(u64 prompt_tokens) const {
  return latency_s +
         (static_cast<double>(prompt_tokens) * bytes_per_token + bytes_per_sequence) / bytes_per_s;
}

double KvTransfer::receive_s(u64 prompt_tokens) const {
  return latency_s + (static_cast<double>(prompt_tokens) * receive_bytes_per_token +
                      receive_bytes_per_sequence) /
                         bytes_per_s;
}

double KvTransfer::time_s(u64 prompt_tokens) const {
  return std::max(send_s(prompt_tokens), receive_s(prompt_tokens));
}

namespace {

/// The requests of a run cut to their first token, numbered, their outputs kept aside.
class PrefillSource : public RequestSource {
public:
  explicit PrefillSource(RequestSource& inner) : m_inner(inner) {}

  std::optional<Request> next() override {
    auto r = m_inner.next();
    if (!r) {
      return r;
    }
    r->id = m_outputs.size();
    m_outputs.push_back(r->output_tokens);
    r->output_tokens = 1;
    return r;
  }

  [[nodiscard]] u64 output_of(const Request& r) const { return m_outputs[r.id]; }

private:
  RequestSource& m_inner;
  std::vector<u64> m_outputs;
};

/// Handed-off requests in the order their caches arrive.
class HandoffSource : public RequestSource {
public:
  explicit HandoffSource(std::vector<Request> requests) : m_requests(std::move(requests)) {
    std::stable_sort(m_requests.begin(), m_requests.end(),
                     [](const Request& a, const Request& b) { return a.arrival_s < b.arrival_s; });
  }

  std::optional<Request> next() override {
    if (m_next == m_requests.size()) {
      return std::nullopt;
    }
    return m_requests[m_next++];
  }

private:
  std::vector<Request> m_requests;
  std::size_t m_next = 0;
};

} // namespace

DisaggregatedResult simulate_disaggregated(const SimConfig& prefill, const SimConfig& decode,
                                           const KvTransfer& transfer, RequestSource& source) {
  if (!(transfer.bytes_per_s > 0)) {
    throw InputError("the KV transfer between the pools needs the GPU's scale_out link (its NIC "
                     "bandwidth); give one in a --gpu-file (docs/gpu-catalog.md)");
  }
  DisaggregatedResult out;
  PrefillSource cut(source);
  std::vector<Request> handed;
  LatencyHistogram moved;
  // Caches leave in the order their first tokens come; on each side a cache takes the group
  // free first, and arrives when both its sending and its receiving are done.
  std::vector<double> senders(std::max<u64>(transfer.send_lanes, 1), 0.0);
  std::vector<double> receivers(std::max<u64>(transfer.receive_lanes, 1), 0.0);
  out.prefill = simulate(prefill, cut, {}, [&](const Request& r, double, double end) {
    Request next = r;
    next.output_tokens = cut.output_of(r);
    next.prefilled = true;
    next.origin_s = r.arrival_s;
    auto send = std::min_element(senders.begin(), senders.end());
    auto receive = std::min_element(receivers.begin(), receivers.end());
    *send = std::max(end, *send) + transfer.send_s(r.prompt_tokens);
    *receive = std::max(end, *receive) + transfer.receive_s(r.prompt_tokens);
    double arrives = std::max(*send, *receive);
    moved.add(arrives - end);
    next.arrival_s = arrives;
    handed.push_back(next);
  });
  out.transfer = moved.summary();
  HandoffSource arrivals(std::move(handed));
  out.decode = simulate(decode, arrivals);

  // The requests end to end: latencies are the decode pool's (measured from each origin);
  // counts, tokens and throughput over the whole run.
  SimResult& r = out.requests;
  r = out.decode;
  r.requests_arrived = out.prefill.requests_arrived;
  r.requests_rejected = out.prefill.requests_rejected + out.decode.requests_rejected;
  r.rejected_pool = out.prefill.rejected_pool + out.decode.rejected_pool;
  r.rejected_context = out.prefill.rejected_context + out.decode.rejected_context;
  r.preemptions = out.prefill.preemptions + out.decode.preemptions;
  r.steps = out.prefill.steps + out.decode.steps;
  r.busy_s = out.prefill.busy_s + out.decode.busy_s;
  r.swap_s = out.prefill.swap_s + out.decode.swap_s;
  r.computed_tokens = out.prefill.computed_tokens + out.decode.computed_tokens;
  r.mean_step_tokens =
      r.steps > 0 ? static_cast<double>(r.computed_tokens) / static_cast<double>(r.steps) : 0;
  // Both pools run at once: their sequences add up, their occupancies are each pool's own.
  r.peak_running = out.prefill.peak_running + out.decode.peak_running;
  r.mean_running = out.prefill.mean_running + out.decode.mean_running;
  r.kv_peak = std::max(out.prefill.kv_peak, out.decode.kv_peak);
  r.kv_mean = std::max(out.prefill.kv_mean, out.decode.kv_mean);
  r.recomputed_tokens = out.prefill.recomputed_tokens + out.decode.recomputed_tokens;
  r.prefix_hit_tokens = out.prefill.prefix_hit_tokens;
  r.first_arrival_s = out.prefill.first_arrival_s;
  r.last_arrival_s = out.prefill.last_arrival_s;
  // The queue that grows faster says the pair is overloaded: the prefill pool's, or the decode
  // pool's behind the transfers.
  r.queue_growth = out.prefill.queue_growth;
  if (out.decode.queue_growth && (!r.queue_growth || *out.decode.queue_growth > *r.queue_growth)) {
    r.queue_growth = out.decode.queue_growth;
  }
  r.end_s = std::max(out.prefill.end_s, out.decode.end_s);
  r.makespan_s = std::max(0.0, r.end_s - r.first_arrival_s);
  r.queue = out.prefill.queue;
  if (r.makespan_s > 0) {
    r.input_tokens_per_s = static_cast<double>(r.input_tokens) / r.makespan_s;
    r.output_tokens_per_s = static_cast<double>(r.output_tokens) / r.makespan_s;
    r.total_tokens_per_s = r.input_tokens_per_s + r.output_tokens_per_s;
  }
  return out;
}

} // namespace kvcalc::sim
