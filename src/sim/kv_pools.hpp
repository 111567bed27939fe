#pragma once
// The engine's KV pools as one simulated instance holds them (docs/simulate.md, "KV pools"):
// the units free in each pool, and what each sequence holds of them as it grows. Per layer
// group, a full-attention term holds a block for every block of tokens, a window only the
// blocks it overlaps (those behind it are given back), a state one slot whatever the length.
// Private to the simulator; tests/unit/test_sim.cpp checks it on its own.

#include <algorithm>
#include <array>
#include <vector>

#include <kvcalc/core/error.hpp>
#include <kvcalc/kv/capacity.hpp>

namespace kvcalc::sim::detail {

/// The most pools an engine splits its cache into (SGLang: full, sliding, state).
inline constexpr std::size_t k_max_pools = 4;
using Units = std::array<u64, k_max_pools>;
/// Units of each pool a sequence still needs; a window gives some back (negative).
using UnitChange = std::array<long long, k_max_pools>;

/// What one sequence holds of the pools.
struct KvHold {
  Units held{};       ///< units of each pool it holds alone (a shared prefix's are not among them)
  u64 held_until = 0; ///< tokens up to which `held` stays what it needs (when `sized`)
  bool sized = false; ///< `held` was sized by the pools' terms and `held_until` is valid

  /// Whether it already holds what `tokens` tokens want of every pool.
  [[nodiscard]] bool holds(u64 tokens) const { return sized && tokens <= held_until; }
};

class KvPools {
public:
  /// `pools` at the capacity of the whole instance, `limits` the most units of each that one
  /// sequence may hold (one attention-DP rank's pool). Throws InputError for a pool that holds
  /// nothing, and Error for more than k_max_pools pools or a limit missing.
  KvPools(std::vector<kv::SequencePool> pools, std::vector<u64> limits)
      : m_pools(std::move(pools)), m_limits(std::move(limits)) {
    if (m_pools.size() > k_max_pools || m_limits.size() != m_pools.size()) {
      throw Error("internal error: the simulator takes at most 4 pools, each with its limit");
    }
    for (std::size_t p = 0; p < m_pools.size(); ++p) {
      if (m_pools[p].capacity == 0 || m_limits[p] == 0 || m_pools[p].terms.empty() ||
          std::any_of(m_pools[p].terms.begin(), m_pools[p].terms.end(),
                      [](const kv::PoolTerm& t) { return t.block_size == 0; })) {
        throw InputError("the simulated instance needs KV pools of at least one block");
      }
      m_free[p] = m_pools[p].capacity;
    }
    m_prefix_block = m_pools.empty() ? 0 : m_pools.front().prefix_block_size();
  }

  [[nodiscard]] std::size_t size() const { return m_pools.size(); }
  [[nodiscard]] u64 capacity(std::size_t p) const { return m_pools[p].capacity; }
  [[nodiscard]] u64 free_units(std::size_t p) const { return m_free[p]; }
  [[nodiscard]] u64 used(std::size_t p) const { return m_pools[p].capacity - m_free[p]; }
  /// Tokens per block of the first pool's full-attention layers, in whose blocks prefixes are
  /// shared (0: it has none).
  [[nodiscard]] u64 prefix_block() const { return m_prefix_block; }

  /// Whether a sequence that grows to `tokens` tokens (its last sampled, never stored) stays
  /// within one sequence's limit of every pool; a window's need peaks a block past its window.
  [[nodiscard]] bool sequence_fits(u64 tokens) const {
    bool fits = true;
    for (std::size_t p = 0; p < m_pools.size(); ++p) {
      u64 peak = 0;
      for (u64 t : {tokens - 1, std::min(tokens - 1, peak_tokens(p))}) {
        peak = std::max(peak, m_pools[p].units_at(t));
      }
      fits = fits && peak <= m_limits[p];
    }
    return fits;
  }

  /// Units of pool `p` a sequence with `tokens` tokens cached holds alone: its terms, less the
  /// first `shared_blocks` blocks of a shared prefix (the first pool's full layers).
  [[nodiscard]] u64 wanted(std::size_t p, u64 tokens, u64 shared_blocks) const {
    u64 want = m_pools[p].units_at(tokens);
    u64 shared = p == 0 ? m_pools[0].prefix_units(shared_blocks) : 0;
    return want > shared ? want - shared : 0;
  }

  /// Units of each pool `hold` still needs to hold `tokens` tokens.
  [[nodiscard]] UnitChange shortfall(const KvHold& hold, u64 tokens, u64 shared_blocks) const {
    UnitChange need{};
    for (std::size_t p = 0; p < m_pools.size(); ++p) {
      need[p] = static_cast<long long>(wanted(p, tokens, shared_blocks)) -
                static_cast<long long>(hold.held[p]);
    }
    return need;
  }

  /// Whether every pool has the units `need` takes.
  [[nodiscard]] bool room_for(const UnitChange& need) const {
    for (std::size_t p = 0; p < m_pools.size(); ++p) {
      if (need[p] > 0 && static_cast<u64>(need[p]) > m_free[p]) {
        return false;
      }
    }
    return true;
  }

  /// Takes (or gives back) `need`, so that `hold` holds what `tokens` tokens want.
  void allocate(KvHold& hold, const UnitChange& need, u64 tokens) {
    hold.held_until = ~u64{0};
    for (std::size_t p = 0; p < m_pools.size(); ++p) {
      hold.held_until = std::min(hold.held_until, m_pools[p].stable_until(tokens));
      if (need[p] >= 0) {
        m_free[p] -= static_cast<u64>(need[p]);
        hold.held[p] += static_cast<u64>(need[p]);
      } else {
        m_free[p] += static_cast<u64>(-need[p]);
        hold.held[p] -= static_cast<u64>(-need[p]);
      }
    }
    hold.sized = true;
  }

  /// Gives back everything `hold` holds (a sequence that finishes or is preempted).
  void release(KvHold& hold) {
    for (std::size_t p = 0; p < m_pools.size(); ++p) {
      m_free[p] += hold.held[p];
      hold.held[p] = 0;
    }
    hold.sized = false;
  }

  /// The first `blocks` blocks of a prefix `hold` computed pass to a shared entry: they are no
  /// longer its own, and stay taken until free_prefix.
  void share_prefix(KvHold& hold, u64 blocks) const {
    hold.held[0] -= m_pools[0].prefix_units(blocks);
    hold.sized = false;
  }

  /// Gives back a shared prefix of `blocks` blocks whose last holder has left.
  void free_prefix(u64 blocks) { m_free[0] += m_pools[0].prefix_units(blocks); }

  /// The fullest pool's units in use / capacity. Throws Error when a pool gave back more than
  /// it holds.
  [[nodiscard]] double occupancy() const {
    double occupancy = 0;
    for (std::size_t p = 0; p < m_pools.size(); ++p) {
      if (m_free[p] > m_pools[p].capacity) {
        throw Error("internal error: the simulator over-committed the KV pool");
      }
      occupancy = std::max(occupancy, static_cast<double>(m_pools[p].capacity - m_free[p]) /
                                          static_cast<double>(m_pools[p].capacity));
    }
    return occupancy;
  }

private:
  /// Tokens at which pool `p`'s windowed terms hold the most (a full window past a block edge).
  [[nodiscard]] u64 peak_tokens(std::size_t p) const {
    u64 most = 0;
    for (const kv::PoolTerm& t : m_pools[p].terms) {
      if (t.kind == kv::CacheKind::sliding || t.kind == kv::CacheKind::chunked) {
        most = std::max(most, t.window + t.block_size - 1);
      }
    }
    return most;
  }

  std::vector<kv::SequencePool> m_pools;
  std::vector<u64> m_limits;
  Units m_free{};
  u64 m_prefix_block = 0;
};

} // namespace kvcalc::sim::detail
