#include <kvcalc/kernels/cpu/mla_decode.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <Eigen/Dense>

#include "attention_tiles.hpp"
#include "thread_pool.hpp"

namespace kvcalc::kernels {

namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using ConstMap = Eigen::Map<const RowMatrix>;

double scale_of(const MlaShape& s) {
  return s.softmax_scale > 0 ? s.softmax_scale
                             : 1.0 / std::sqrt(static_cast<double>(s.d_nope + s.d_r));
}

void check(const MlaInputs& in) {
  const MlaShape& s = in.shape;
  if (s.batch == 0 || s.heads == 0 || s.query == 0 || s.context == 0 || s.block == 0 ||
      s.d_c == 0 || s.d_nope == 0 || s.d_v == 0) {
    throw std::invalid_argument("MLA decode: every dimension must be at least 1");
  }
  std::uint64_t width = s.d_c + s.d_r;
  if (in.q.size() != s.batch * s.query * s.heads * (s.d_nope + s.d_r) ||
      in.w_uk.size() != s.heads * s.d_nope * s.d_c || in.w_uv.size() != s.heads * s.d_v * s.d_c ||
      in.block_table.size() != s.batch * in.pages_per_sequence() ||
      in.cache.size() % (s.block * width) != 0) {
    throw std::invalid_argument("MLA decode: input sizes do not match the shape");
  }
  std::uint64_t pages = in.cache.size() / (s.block * width);
  for (std::uint32_t page : in.block_table) {
    if (page >= pages) {
      throw std::invalid_argument("MLA decode: block table points past the cache");
    }
  }
}

/// Tokens [first, first + count) of sequence b's latent, widened to fp32, into `rows`.
void gather(const MlaInputs& in, std::uint64_t b, std::uint64_t first, std::uint64_t count,
            RowMatrix& rows) {
  const MlaShape& s = in.shape;
  std::uint64_t width = s.d_c + s.d_r;
  rows.resize(static_cast<Eigen::Index>(count), static_cast<Eigen::Index>(width));
  std::uint64_t pages = in.pages_per_sequence();
  for (std::uint64_t t = first; t < first + count;) {
    std::uint64_t p = t / s.block;
    std::uint64_t run = std::min((p + 1) * s.block, first + count) - t;
    const std::uint16_t* src =
        in.cache.data() + (in.block_table[b * pages + p] * s.block + t % s.block) * width;
    tiles::widen_all(src, run * width, rows.data() + (t - first) * width);
    t += run;
  }
}

/// The shape as Eigen indices, and the flat index of (sequence, query token, head).
struct Dims {
  explicit Dims(const MlaShape& s)
      : H(static_cast<Eigen::Index>(s.heads)), S(static_cast<Eigen::Index>(s.query)),
        dc(static_cast<Eigen::Index>(s.d_c)), dr(static_cast<Eigen::Index>(s.d_r)),
        dn(static_cast<Eigen::Index>(s.d_nope)), dv(static_cast<Eigen::Index>(s.d_v)), qk(dn + dr),
        width(dc + dr), scale(static_cast<float>(scale_of(s))), m_shape(s) {}
  Eigen::Index H, S, dc, dr, dn, dv, qk, width;
  float scale;
  [[nodiscard]] std::uint64_t row(std::uint64_t b, Eigen::Index si, Eigen::Index h) const {
    return (b * m_shape.query + static_cast<std::uint64_t>(si)) * m_shape.heads +
           static_cast<std::uint64_t>(h);
  }

private:
  const MlaShape& m_shape;
};

/// One split of one sequence's attention: its latent query, and its partial result (the
/// un-normalised latent output, running max and sum per row).
struct AttentionPart {
  /// Few rows: q[row][d_c + d_r] for dot products. Many rows (`wide`): Qt[d_c + d_r][stride]
  /// for the broadcast tiles. `stride` is the rows rounded up to whole vectors, zero-padded.
  std::vector<float> query;
  std::vector<tiles::Bf16> query_pairs; ///< few rows, with bf16 pair dot products: q in bf16
  bool wide = false;
  std::size_t stride = 0;
  std::vector<float> o_lat;   ///< [rows][d_c]
  std::vector<float> maximum; ///< [stride]
  std::vector<float> sum;     ///< [stride]

  /// Sized for `rows` query rows of `s`, the output and running figures reset; `q_rows` are
  /// the rows' latent queries, [rows][d_c + d_r].
  void start(const MlaShape& s, std::size_t rows, const float* q_rows);
};

/// The working buffers of one pass over a part's pages, held only while it runs.
struct PageScratch {
  PageScratch(const MlaShape& s, const AttentionPart& part)
      : scores(s.block * part.stride, 0.0f), rescale(part.stride),
        widened(part.wide ? s.block * (s.d_c + s.d_r) : 0) {}
  std::vector<float> scores;  ///< [block][stride]: a page's scores, then its weights
  std::vector<float> rescale; ///< [stride]
  std::vector<float> widened; ///< wide: the page in fp32, [block][d_c + d_r]
};

void AttentionPart::start(const MlaShape& s, std::size_t rows, const float* q_rows) {
  const std::size_t latent = s.d_c + s.d_r;
  const std::size_t lanes = tiles::k_lanes;
  wide = rows >= lanes;
  stride = (rows + lanes - 1) / lanes * lanes;
  if (wide) {
    query.assign(latent * stride, 0.0f);
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t x = 0; x < latent; ++x) {
        query[x * stride + r] = q_rows[r * latent + x];
      }
    }
  } else {
#if KVCALC_SIMD_BF16_PAIRS
    // Rounded to bf16, as the GPU kernels (and FlashMLA) round the absorbed query.
    query_pairs.resize(rows * latent);
    for (std::size_t i = 0; i < rows * latent; ++i) {
      query_pairs[i] = bf16_bits(q_rows[i]);
    }
#else
    query.assign(q_rows, q_rows + rows * latent);
#endif
  }
  o_lat.assign(rows * s.d_c, 0.0f);
  maximum.assign(stride, -INFINITY);
  sum.assign(stride, 0.0f);
}

/// Attends `rows` rows of `part` to `tokens` tokens of one page with an online softmax: the
/// scores, the weights, and the weighted sum into the latent output. `next` (the next page, or
/// null) is fetched meanwhile, so each page is read from memory once while the one before is
/// worked on; a page (74 KB in bf16) stays in the L2 between its scores and its output, every
/// row sharing the read.
void attend_page(AttentionPart& part, PageScratch& w, const MlaShape& s, std::size_t rows,
                 const tiles::Bf16* page, std::size_t tokens, const tiles::Bf16* next) {
  using tiles::Bf16;
  using tiles::Block;
  const std::size_t latent = s.d_c + s.d_r;
  if (part.wide) {
    // Many rows: widen the page once, then the broadcast tiles read fp32.
    tiles::widen_all(page, tokens * latent, w.widened.data());
    Block<float> widened{w.widened.data(), latent};
    tiles::wide_scores(Block<float>{part.query.data(), part.stride}, latent, widened, tokens,
                       w.scores.data(), next, latent);
    tiles::online_softmax(w.scores.data(), part.stride, tokens, part.maximum.data(),
                          part.sum.data(), w.rescale.data());
    tiles::weighted_sum(tiles::Weights{w.scores.data(), part.stride, 1}, w.rescale.data(), rows,
                        widened, tokens, s.d_c, part.o_lat.data(), s.d_c);
    return;
  }
  // Few rows: the tiles read the bf16 page as it is, scores row-major, S[row][t], so the
  // softmax runs along the tokens.
  Block<Bf16> bf16_page{page, latent};
#if KVCALC_SIMD_BF16_PAIRS
  tiles::dot_products(Block<Bf16>{part.query_pairs.data(), latent}, rows, bf16_page, tokens, latent,
                      w.scores.data(), 1, s.block);
#else
  tiles::dot_products(Block<float>{part.query.data(), latent}, rows, bf16_page, tokens, latent,
                      w.scores.data(), 1, s.block);
#endif
  tiles::online_softmax_rows(w.scores.data(), s.block, rows, tokens, part.maximum.data(),
                             part.sum.data(), w.rescale.data());
  // The next page is fetched during the weighted sum, not the scores: the scores pass waits on
  // this page's own misses and fetches queued behind them are lost, while the weighted sum
  // reads the page from the L2 and leaves the misses free (the measurements are in
  // docs/performance.md, "`kvcalc measure` on the CPU").
  tiles::weighted_sum(tiles::Weights{w.scores.data(), 1, s.block}, w.rescale.data(), rows,
                      bf16_page, tokens, s.d_c, part.o_lat.data(), s.d_c, next,
                      next != nullptr ? s.block * latent * sizeof(Bf16) : 0);
}

} // namespace

std::uint64_t MlaInputs::pages_per_sequence() const {
  return (shape.context + shape.block - 1) / shape.block;
}

std::uint16_t bf16_bits(float v) {
  std::uint32_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  if (std::isnan(v)) {
    return static_cast<std::uint16_t>((bits >> 16) | 0x0040u); // stays a (quiet) NaN
  }
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<std::uint16_t>(bits >> 16);
}

float bf16_value(std::uint16_t bits) {
  return simd::bf16_to_float(bits);
}

float round_bf16(float v) {
  return bf16_value(bf16_bits(v));
}

MlaInputs make_mla_inputs(const MlaShape& shape, std::uint64_t seed) {
  MlaInputs in;
  in.shape = shape;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto fill = [&](std::vector<float>& v, std::uint64_t n, float scale) {
    v.resize(n);
    for (auto& x : v) {
      x = round_bf16(normal(rng) * scale);
    }
  };
  auto fill_bf16 = [&](Bf16Buffer& v, std::uint64_t n, float scale) {
    v.resize(n);
    for (auto& x : v) {
      x = bf16_bits(normal(rng) * scale);
    }
  };
  const MlaShape& s = shape;
  std::uint64_t width = s.d_c + s.d_r;
  fill(in.q, s.batch * s.query * s.heads * (s.d_nope + s.d_r), 1.0f);
  fill_bf16(in.w_uk, s.heads * s.d_nope * s.d_c, 1.0f / std::sqrt(static_cast<float>(s.d_c)));
  fill_bf16(in.w_uv, s.heads * s.d_v * s.d_c, 1.0f / std::sqrt(static_cast<float>(s.d_c)));
  std::uint64_t pages = in.pages_per_sequence();
  std::uint64_t total = s.batch * pages;
  fill_bf16(in.cache, total * s.block * width, 1.0f);
  // Pages in a random order, so a kernel that assumes contiguity reads the wrong rows.
  in.block_table.resize(total);
  std::iota(in.block_table.begin(), in.block_table.end(), 0u);
  std::shuffle(in.block_table.begin(), in.block_table.end(), rng);
  // NaN past each sequence's last token: reading them poisons the output.
  std::uint16_t nan = bf16_bits(std::numeric_limits<float>::quiet_NaN());
  for (std::uint64_t b = 0; b < s.batch; ++b) {
    std::uint64_t last = in.block_table[b * pages + pages - 1];
    std::uint64_t used = s.context - (pages - 1) * s.block;
    std::fill(in.cache.begin() + static_cast<std::ptrdiff_t>((last * s.block + used) * width),
              in.cache.begin() + static_cast<std::ptrdiff_t>((last + 1) * s.block * width), nan);
  }
  return in;
}

void mla_decode_absorbed(const MlaInputs& in, MlaOutput& out, unsigned threads) {
  using tiles::Bf16;
  using tiles::Block;
  check(in);
  const MlaShape& s = in.shape;
  const std::size_t heads = s.heads;
  const std::size_t rows = s.query * heads;         // query rows of one sequence, (s, h)
  const std::size_t batch_rows = s.batch * s.query; // rows of one head, (b, s)
  const std::size_t latent = s.d_c + s.d_r;
  const std::size_t qk = s.d_nope + s.d_r;
  const std::size_t lanes = tiles::k_lanes;
  auto whole_vectors = [&](std::size_t n) { return (n + lanes - 1) / lanes * lanes; };
  const auto scale = static_cast<float>(scale_of(s));
  std::uint64_t pages = in.pages_per_sequence();
  threads = std::max(1u, threads);
  // With fewer sequences than threads, each sequence's pages are split between threads
  // (split-KV) and the parts merged by their running maxima and sums.
  std::uint64_t splits =
      s.batch >= threads ? 1 : std::min<std::uint64_t>(pages, (threads + s.batch - 1) / s.batch);
  // Row (b, s, h) of these is row (b·S + s)·H + h; sequence b's rows are contiguous.
  std::vector<float> q_lat(s.batch * rows * latent, 0.0f);
  std::vector<float> o_lat(s.batch * rows * s.d_c);
  std::vector<AttentionPart> parts(s.batch * splits);
  out.assign(s.batch * rows * s.d_v, 0.0f);

  // Q in latent space, per head over the whole batch so W_UK is read once:
  // q_lat(b, s, h) = scale · (q_nope(b, s, h) · W_UK[h], q_rope(b, s, h)). The product
  // broadcasts each q_nope value against rows of W_UK, like the attention output.
  parallel_for(heads, threads, [&](std::uint64_t h, unsigned /*worker*/) {
    std::size_t stride = whole_vectors(batch_rows);
    std::vector<float> q_nope_t(s.d_nope * stride); // [n][(b, s)]
    std::vector<float> ones(batch_rows, 1.0f);
    for (std::size_t i = 0; i < batch_rows; ++i) {
      const float* q = in.q.data() + (i * heads + h) * qk;
      float* q_row = q_lat.data() + (i * heads + h) * latent;
      for (std::size_t n = 0; n < s.d_nope; ++n) {
        q_nope_t[n * stride + i] = scale * q[n];
      }
      for (std::size_t r = 0; r < s.d_r; ++r) {
        q_row[s.d_c + r] = scale * q[s.d_nope + r];
      }
    }
    tiles::weighted_sum(tiles::Weights{q_nope_t.data(), stride, 1}, ones.data(), batch_rows,
                        Block<Bf16>{in.w_uk.data() + h * s.d_nope * s.d_c, s.d_c}, s.d_nope, s.d_c,
                        q_lat.data() + h * latent, heads * latent);
  });

  // Writes the normalised latent output of sequence b's rows, merging its splits.
  auto merge = [&](std::uint64_t b) {
    std::vector<float> weights(splits);
    for (std::size_t r = 0; r < rows; ++r) {
      float peak = -INFINITY;
      for (std::uint64_t k = 0; k < splits; ++k) {
        peak = std::max(peak, parts[b * splits + k].maximum[r]);
      }
      float total = 0;
      for (std::uint64_t k = 0; k < splits; ++k) {
        const AttentionPart& part = parts[b * splits + k];
        weights[k] = std::exp(part.maximum[r] - peak);
        total += weights[k] * part.sum[r];
      }
      float* o = o_lat.data() + (b * rows + r) * s.d_c;
      for (std::size_t x = 0; x < s.d_c; ++x) {
        float value = 0;
        for (std::uint64_t k = 0; k < splits; ++k) {
          value += weights[k] * parts[b * splits + k].o_lat[r * s.d_c + x];
        }
        o[x] = value / total;
      }
    }
  };

  parallel_for(s.batch * splits, threads, [&](std::uint64_t item, unsigned /*worker*/) {
    std::uint64_t b = item / splits;
    std::uint64_t split = item % splits;
    AttentionPart& part = parts[item];
    part.start(s, rows, q_lat.data() + b * rows * latent);
    PageScratch scratch(s, part);
    // One pass over this split's pages.
    std::uint64_t first = pages * split / splits;
    std::uint64_t last = pages * (split + 1) / splits;
    auto page_at = [&](std::uint64_t p) {
      return in.cache.data() + in.block_table[b * pages + p] * s.block * latent;
    };
    for (std::uint64_t p = first; p < last; ++p) {
      std::size_t tokens = std::min(s.block, s.context - p * s.block);
      attend_page(part, scratch, s, rows, page_at(p), tokens,
                  p + 1 < last ? page_at(p + 1) : nullptr);
    }
    if (splits == 1) {
      merge(b);
    }
  });
  if (splits > 1) {
    parallel_for(s.batch, threads, [&](std::uint64_t b, unsigned /*worker*/) { merge(b); });
  }

  // W_UV after, per head over the whole batch: out(b, s, h)[v] = o_lat(b, s, h) · W_UV[h][v].
  parallel_for(heads, threads, [&](std::uint64_t h, unsigned /*worker*/) {
    tiles::dot_products(Block<float>{o_lat.data() + h * s.d_c, heads * s.d_c}, batch_rows,
                        Block<Bf16>{in.w_uv.data() + h * s.d_v * s.d_c, s.d_c}, s.d_v, s.d_c,
                        out.data() + h * s.d_v, 1, heads * s.d_v);
  });
}

double absorbed_page_flops(const MlaShape& shape) {
  auto rows = static_cast<double>(shape.query * shape.heads);
  return 2 * rows * static_cast<double>(shape.block) *
         static_cast<double>(2 * shape.d_c + shape.d_r);
}

Spread measure_absorbed_page_flops(const MlaShape& shape, unsigned threads, unsigned repeats) {
  const std::size_t rows = shape.query * shape.heads;
  const std::size_t latent = shape.d_c + shape.d_r;
  if (rows == 0 || shape.block == 0 || shape.d_c == 0) {
    throw std::invalid_argument("absorbed page probe: every dimension must be at least 1");
  }
  threads = std::max(1u, threads);
  // Each thread its own page and queries, so nothing is shared between the cores.
  MlaShape one = shape;
  one.batch = threads;
  one.context = shape.block;
  MlaInputs in = make_mla_inputs(one, 20260102);
  std::vector<float> q_rows(rows * latent);
  for (std::size_t i = 0; i < q_rows.size(); ++i) {
    q_rows[i] = 0.01f * in.q[i % in.q.size()];
  }
  std::vector<AttentionPart> parts(threads);
  // About 4·10⁸ FLOPs a thread a run: milliseconds, long against the clock and the pool.
  const double page = absorbed_page_flops(shape);
  const auto passes = static_cast<std::uint64_t>(std::max(1.0, 4e8 / page));
  auto run = [&] {
    parallel_for(threads, threads, [&](std::uint64_t t, unsigned /*worker*/) {
      AttentionPart& part = parts[t];
      part.start(shape, rows, q_rows.data());
      PageScratch scratch(shape, part);
      const tiles::Bf16* data = in.cache.data() + in.block_table[t] * shape.block * latent;
      // No next page: fetching one is a transfer between memory levels, which the bound
      // counts on its memory side, not as the core's work.
      for (std::uint64_t i = 0; i < passes; ++i) {
        attend_page(part, scratch, shape, rows, data, shape.block, nullptr);
      }
    });
  };
  run();
  std::vector<double> seconds;
  for (unsigned rep = 0; rep < repeats; ++rep) {
    auto start = std::chrono::steady_clock::now();
    run();
    seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  volatile float observed = parts[0].o_lat[0];
  (void)observed;
  return rate_of(page * static_cast<double>(passes) * threads, spread_of(seconds));
}

void mla_decode_naive(const MlaInputs& in, MlaOutput& out, unsigned threads) {
  check(in);
  const MlaShape& s = in.shape;
  const Dims d(s);
  const Eigen::Index S = d.S, dc = d.dc, dr = d.dr, dn = d.dn, dv = d.dv, qk = d.qk;
  float scale = d.scale;
  out.assign(s.batch * s.query * s.heads * s.d_v, 0.0f);
  // Threads over sequences × heads; each decompresses its own head's K and V.
  threads = std::max(1u, threads);
  std::vector<RowMatrix> chunks(threads);
  // The weights widened to fp32 once, for Eigen.
  std::vector<float> w_uk_f(in.w_uk.size());
  std::vector<float> w_uv_f(in.w_uv.size());
  tiles::widen_all(in.w_uk.data(), in.w_uk.size(), w_uk_f.data());
  tiles::widen_all(in.w_uv.data(), in.w_uv.size(), w_uv_f.data());
  parallel_for(s.batch * s.heads, threads, [&](std::uint64_t task, unsigned worker) {
    std::uint64_t b = task / s.heads;
    auto h = static_cast<Eigen::Index>(task % s.heads);
    RowMatrix& chunk = chunks[worker];
    ConstMap w_uk(w_uk_f.data() + static_cast<std::uint64_t>(h) * s.d_nope * s.d_c, dn, dc);
    ConstMap w_uv(w_uv_f.data() + static_cast<std::uint64_t>(h) * s.d_v * s.d_c, dv, dc);
    RowMatrix q(S, qk);
    for (Eigen::Index si = 0; si < S; ++si) {
      q.row(si) = Eigen::Map<const Eigen::RowVectorXf>(
          in.q.data() + d.row(b, si, h) * static_cast<std::uint64_t>(qk), qk);
    }
    // Gathered and decompressed a chunk of the context at a time, with an online softmax across
    // chunks, so the latent rows, K and V stay in the cache whatever the context: a whole long
    // sequence at a time outgrows the caches and its GEMMs fall far below the GEMM rate
    // (docs/performance.md, "`kvcalc measure` on the CPU").
    Eigen::VectorXf peak = Eigen::VectorXf::Constant(S, -INFINITY);
    Eigen::VectorXf total = Eigen::VectorXf::Zero(S);
    RowMatrix o = RowMatrix::Zero(S, dv);
    for (std::uint64_t t0 = 0; t0 < s.context; t0 += k_naive_chunk_tokens) {
      gather(in, b, t0, std::min(k_naive_chunk_tokens, s.context - t0), chunk);
      RowMatrix k_nope = chunk.leftCols(dc) * w_uk.transpose(); // [t][d_nope]
      RowMatrix v = chunk.leftCols(dc) * w_uv.transpose();      // [t][d_v]
      RowMatrix scores =
          q.leftCols(dn) * k_nope.transpose() + q.rightCols(dr) * chunk.rightCols(dr).transpose();
      for (Eigen::Index si = 0; si < S; ++si) {
        auto row = scores.row(si);
        row *= scale;
        float new_peak = std::max(peak[si], row.maxCoeff());
        float rescale = std::exp(peak[si] - new_peak);
        row = (row.array() - new_peak).exp();
        total[si] = total[si] * rescale + row.sum();
        o.row(si) *= rescale;
        peak[si] = new_peak;
      }
      o.noalias() += scores * v;
    }
    for (Eigen::Index si = 0; si < S; ++si) {
      Eigen::Map<Eigen::RowVectorXf>(out.data() + d.row(b, si, h) * s.d_v, dv) =
          o.row(si) / total[si];
    }
  });
}

std::vector<double> mla_decode_reference(const MlaInputs& in, std::uint64_t sequences) {
  check(in);
  const MlaShape& s = in.shape;
  sequences = std::min(sequences, s.batch);
  std::uint64_t width = s.d_c + s.d_r;
  std::uint64_t qk = s.d_nope + s.d_r;
  double scale = scale_of(s);
  std::uint64_t pages = in.pages_per_sequence();
  std::vector<double> out(sequences * s.query * s.heads * s.d_v, 0.0);
  std::vector<double> q_lat(s.d_c);
  std::vector<double> o_lat(s.d_c);
  std::vector<double> scores(s.context);
  for (std::uint64_t b = 0; b < sequences; ++b) {
    auto row = [&](std::uint64_t t) {
      return in.cache.data() +
             (in.block_table[b * pages + t / s.block] * s.block + t % s.block) * width;
    };
    for (std::uint64_t si = 0; si < s.query; ++si) {
      for (std::uint64_t h = 0; h < s.heads; ++h) {
        const float* q = in.q.data() + ((b * s.query + si) * s.heads + h) * qk;
        const std::uint16_t* w_uk = in.w_uk.data() + h * s.d_nope * s.d_c;
        const std::uint16_t* w_uv = in.w_uv.data() + h * s.d_v * s.d_c;
        // k_nope(t) · q_nope = (W_UK c_t) · q_nope = c_t · (W_UKᵀ q_nope): exact in double.
        std::fill(q_lat.begin(), q_lat.end(), 0.0);
        for (std::uint64_t n = 0; n < s.d_nope; ++n) {
          for (std::uint64_t j = 0; j < s.d_c; ++j) {
            q_lat[j] += static_cast<double>(q[n]) * bf16_value(w_uk[n * s.d_c + j]);
          }
        }
        double peak = -std::numeric_limits<double>::infinity();
        for (std::uint64_t t = 0; t < s.context; ++t) {
          const std::uint16_t* c = row(t);
          double dot = 0;
          for (std::uint64_t j = 0; j < s.d_c; ++j) {
            dot += q_lat[j] * bf16_value(c[j]);
          }
          for (std::uint64_t r = 0; r < s.d_r; ++r) {
            dot += static_cast<double>(q[s.d_nope + r]) * bf16_value(c[s.d_c + r]);
          }
          scores[t] = dot * scale;
          peak = std::max(peak, scores[t]);
        }
        double sum = 0;
        for (std::uint64_t t = 0; t < s.context; ++t) {
          scores[t] = std::exp(scores[t] - peak);
          sum += scores[t];
        }
        std::fill(o_lat.begin(), o_lat.end(), 0.0);
        for (std::uint64_t t = 0; t < s.context; ++t) {
          const std::uint16_t* c = row(t);
          double p = scores[t] / sum;
          for (std::uint64_t j = 0; j < s.d_c; ++j) {
            o_lat[j] += p * bf16_value(c[j]);
          }
        }
        double* o = out.data() + ((b * s.query + si) * s.heads + h) * s.d_v;
        for (std::uint64_t v = 0; v < s.d_v; ++v) {
          for (std::uint64_t j = 0; j < s.d_c; ++j) {
            o[v] += static_cast<double>(bf16_value(w_uv[v * s.d_c + j])) * o_lat[j];
          }
        }
      }
    }
  }
  return out;
}

namespace {

/// The per-element bar of compare and describe_misses: |x − y| ≤ abs_bar or ≤ rel_bar ·
/// max(|y|, rms). A NaN misses it.
bool misses_bar(double got, double want, double rms, double abs_bar, double rel_bar) {
  double err = std::fabs(got - want);
  return !(err <= abs_bar || err <= rel_bar * std::max(std::fabs(want), rms));
}

/// The marked indices as ranges, "0–7, 16, 24–31 of 64" (at most six ranges, then "…"), or
/// "all 64".
std::string index_ranges(const std::vector<bool>& marked) {
  const std::size_t n = marked.size();
  if (std::all_of(marked.begin(), marked.end(), [](bool m) { return m; })) {
    return "all " + std::to_string(n);
  }
  std::string text;
  int listed = 0;
  for (std::size_t i = 0; i < n;) {
    if (!marked[i]) {
      ++i;
      continue;
    }
    std::size_t last = i;
    while (last + 1 < n && marked[last + 1]) {
      ++last;
    }
    if (listed == 6) {
      text += ", …";
      break;
    }
    text += (listed == 0 ? "" : ", ") + std::to_string(i);
    if (last > i) {
      text += "–" + std::to_string(last);
    }
    ++listed;
    i = last + 1;
  }
  return text + " of " + std::to_string(n);
}

} // namespace

Agreement compare(const std::vector<float>& got, const std::vector<double>& want, double abs_bar,
                  double rel_bar) {
  Agreement a;
  if (got.size() < want.size()) {
    throw std::invalid_argument("compare: fewer outputs than reference values");
  }
  double xy = 0;
  double norms = 0;
  double squares = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    double x = got[i];
    double y = want[i];
    if (!std::isfinite(x) || !std::isfinite(y)) {
      a.finite = false;
      a.cos_diff = std::numeric_limits<double>::quiet_NaN();
      a.max_abs_error = std::numeric_limits<double>::quiet_NaN();
      a.elements_over_bar = want.size();
      return a;
    }
    xy += x * y;
    norms += x * x + y * y;
    squares += y * y;
    a.max_abs_error = std::max(a.max_abs_error, std::fabs(x - y));
  }
  double rms = want.empty() ? 0.0 : std::sqrt(squares / static_cast<double>(want.size()));
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (misses_bar(got[i], want[i], rms, abs_bar, rel_bar)) {
      ++a.elements_over_bar;
    }
  }
  a.cos_diff = norms > 0 ? 1.0 - 2.0 * xy / norms : 0.0;
  return a;
}

std::string describe_misses(const std::vector<float>& got, const std::vector<double>& want,
                            const MlaShape& shape, double abs_bar, double rel_bar) {
  if (got.size() < want.size()) {
    throw std::invalid_argument("describe_misses: fewer outputs than reference values");
  }
  const std::uint64_t per_sequence = shape.query * shape.heads * shape.d_v;
  if (per_sequence == 0) {
    throw std::invalid_argument("describe_misses: every dimension must be at least 1");
  }
  double squares = 0;
  std::uint64_t finite = 0;
  for (double y : want) {
    if (std::isfinite(y)) {
      squares += y * y;
      ++finite;
    }
  }
  const double rms = finite > 0 ? std::sqrt(squares / static_cast<double>(finite)) : 0.0;

  std::vector<bool> sequences((want.size() + per_sequence - 1) / per_sequence);
  std::vector<bool> queries(shape.query);
  std::vector<bool> heads(shape.heads);
  std::vector<bool> columns(shape.d_v);
  std::uint64_t misses = 0;
  std::uint64_t not_finite = 0;
  std::size_t worst = 0;
  double worst_err = -1;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double x = got[i];
    const double y = want[i];
    if (!misses_bar(x, y, rms, abs_bar, rel_bar)) {
      continue;
    }
    ++misses;
    // A non-finite element is the worst there is: it ranks above every finite error.
    const bool bad = !std::isfinite(x) || !std::isfinite(y);
    not_finite += bad ? 1 : 0;
    const double err = bad ? std::numeric_limits<double>::infinity() : std::fabs(x - y);
    if (err > worst_err) {
      worst_err = err;
      worst = i;
    }
    sequences[i / per_sequence] = true;
    queries[i / (shape.heads * shape.d_v) % shape.query] = true;
    heads[i / shape.d_v % shape.heads] = true;
    columns[i % shape.d_v] = true;
  }
  if (misses == 0) {
    return {};
  }
  char values[96];
  std::snprintf(values, sizeof values, "%.6g against %.6g", static_cast<double>(got[worst]),
                want[worst]);
  return std::to_string(misses) + " of " + std::to_string(want.size()) +
         " elements miss the bar (" + std::to_string(not_finite) + " not finite): sequences " +
         index_ranges(sequences) + ", query rows " + index_ranges(queries) + ", heads " +
         index_ranges(heads) + ", columns " + index_ranges(columns) + "; the worst, sequence " +
         std::to_string(worst / per_sequence) + " query " +
         std::to_string(worst / (shape.heads * shape.d_v) % shape.query) + " head " +
         std::to_string(worst / shape.d_v % shape.heads) + " column " +
         std::to_string(worst % shape.d_v) + ": " + values;
}

} // namespace kvcalc::kernels
