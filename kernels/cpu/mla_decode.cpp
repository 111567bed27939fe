#include "mla_decode.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <thread>
#include <tuple>

#include <Eigen/Dense>

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

/// The latent rows of sequence b gathered from its pages: [context][d_c + d_r].
void gather(const MlaInputs& in, std::uint64_t b, RowMatrix& rows) {
  const MlaShape& s = in.shape;
  std::uint64_t width = s.d_c + s.d_r;
  rows.resize(static_cast<Eigen::Index>(s.context), static_cast<Eigen::Index>(width));
  std::uint64_t pages = in.pages_per_sequence();
  for (std::uint64_t p = 0; p < pages; ++p) {
    std::uint64_t first = p * s.block;
    std::uint64_t count = std::min(s.block, s.context - first);
    const float* src = in.cache.data() + in.block_table[b * pages + p] * s.block * width;
    std::memcpy(rows.data() + first * width, src, count * width * sizeof(float));
  }
}

/// Softmax of each row in place, scaled.
void softmax_rows(RowMatrix& scores, float scale) {
  for (Eigen::Index r = 0; r < scores.rows(); ++r) {
    auto row = scores.row(r);
    row *= scale;
    float peak = row.maxCoeff();
    row = (row.array() - peak).exp();
    row /= row.sum();
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

template <class Body> void parallel_for(std::uint64_t count, unsigned threads, Body&& body) {
  threads = std::max(1u, std::min<unsigned>(threads, static_cast<unsigned>(count)));
  std::vector<std::thread> pool;
  std::exception_ptr failure;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      try {
        for (std::uint64_t i = t; i < count; i += threads) {
          body(i);
        }
      } catch (...) {
        failure = std::current_exception();
      }
    });
  }
  for (auto& th : pool) {
    th.join();
  }
  if (failure) {
    std::rethrow_exception(failure);
  }
}

} // namespace

std::uint64_t MlaInputs::pages_per_sequence() const {
  return (shape.context + shape.block - 1) / shape.block;
}

float round_bf16(float v) {
  if (std::isnan(v)) {
    return v;
  }
  std::uint32_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  bits += 0x7FFFu + ((bits >> 16) & 1u);
  bits &= 0xFFFF0000u;
  float out = 0;
  std::memcpy(&out, &bits, sizeof out);
  return out;
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
  const MlaShape& s = shape;
  std::uint64_t width = s.d_c + s.d_r;
  fill(in.q, s.batch * s.query * s.heads * (s.d_nope + s.d_r), 1.0f);
  fill(in.w_uk, s.heads * s.d_nope * s.d_c, 1.0f / std::sqrt(static_cast<float>(s.d_c)));
  fill(in.w_uv, s.heads * s.d_v * s.d_c, 1.0f / std::sqrt(static_cast<float>(s.d_c)));
  std::uint64_t pages = in.pages_per_sequence();
  std::uint64_t total = s.batch * pages;
  fill(in.cache, total * s.block * width, 1.0f);
  // Pages in a random order, so a kernel that assumes contiguity reads the wrong rows.
  in.block_table.resize(total);
  std::iota(in.block_table.begin(), in.block_table.end(), 0u);
  std::shuffle(in.block_table.begin(), in.block_table.end(), rng);
  // NaN past each sequence's last token: reading them poisons the output.
  float nan = std::numeric_limits<float>::quiet_NaN();
  for (std::uint64_t b = 0; b < s.batch; ++b) {
    std::uint64_t last = in.block_table[b * pages + pages - 1];
    std::uint64_t used = s.context - (pages - 1) * s.block;
    std::fill(in.cache.begin() + static_cast<std::ptrdiff_t>((last * s.block + used) * width),
              in.cache.begin() + static_cast<std::ptrdiff_t>((last + 1) * s.block * width), nan);
  }
  return in;
}

void mla_decode_absorbed(const MlaInputs& in, MlaOutput& out, unsigned threads) {
  check(in);
  const MlaShape& s = in.shape;
  const Dims d(s);
  auto [H, S, dc, dr, dn, dv, qk, width] =
      std::tuple{d.H, d.S, d.dc, d.dr, d.dn, d.dv, d.qk, d.width};
  float scale = d.scale;
  std::uint64_t pages = in.pages_per_sequence();
  out.assign(s.batch * s.query * s.heads * s.d_v, 0.0f);
  parallel_for(s.batch, threads, [&](std::uint64_t b) {
    // Q in latent space: rows (s, h) = q_nope[s][h] · W_UK[h], plus the RoPE part.
    RowMatrix q_lat(S * H, width);
    for (Eigen::Index si = 0; si < S; ++si) {
      for (Eigen::Index h = 0; h < H; ++h) {
        const float* q = in.q.data() + d.row(b, si, h) * static_cast<std::uint64_t>(qk);
        Eigen::Map<const Eigen::RowVectorXf> q_nope(q, dn);
        ConstMap w_uk(in.w_uk.data() + static_cast<std::uint64_t>(h) * s.d_nope * s.d_c, dn, dc);
        q_lat.row(si * H + h).head(dc) = q_nope * w_uk;
        q_lat.row(si * H + h).tail(dr) = Eigen::Map<const Eigen::RowVectorXf>(q + dn, dr);
      }
    }
    q_lat *= scale;
    // One pass over the pages with an online softmax: each page is read once, and every head
    // attends it in one GEMM (the 576-wide latent is shared by all heads).
    Eigen::Index rows_q = S * H;
    Eigen::VectorXf running_max = Eigen::VectorXf::Constant(rows_q, -INFINITY);
    Eigen::VectorXf running_sum = Eigen::VectorXf::Zero(rows_q);
    Eigen::VectorXf new_max(rows_q);
    Eigen::VectorXf rescale(rows_q);
    RowMatrix o_lat = RowMatrix::Zero(rows_q, dc);
    // Page by page, straight from the cache: a 64-token page (147 KB in fp32) stays in the L2
    // between the score GEMM and the output GEMM, so DRAM sees each cached byte once.
    RowMatrix scores(rows_q, static_cast<Eigen::Index>(s.block));
    for (std::uint64_t p = 0; p < pages; ++p) {
      auto rows = static_cast<Eigen::Index>(std::min(s.block, s.context - p * s.block));
      ConstMap tokens(in.cache.data() + in.block_table[b * pages + p] * s.block *
                                            static_cast<std::uint64_t>(width),
                      rows, width);
      auto sc = scores.leftCols(rows);
      sc.noalias() = q_lat * tokens.transpose();
      new_max = running_max.cwiseMax(sc.rowwise().maxCoeff());
      rescale = (running_max - new_max).array().exp();
      sc = (sc.colwise() - new_max).array().exp();
      running_sum = running_sum.cwiseProduct(rescale) + sc.rowwise().sum();
      o_lat = rescale.asDiagonal() * o_lat;
      o_lat.noalias() += sc * tokens.leftCols(dc);
      running_max = new_max;
    }
    o_lat = running_sum.cwiseInverse().asDiagonal() * o_lat;
    for (Eigen::Index si = 0; si < S; ++si) {
      for (Eigen::Index h = 0; h < H; ++h) {
        ConstMap w_uv(in.w_uv.data() + static_cast<std::uint64_t>(h) * s.d_v * s.d_c, dv, dc);
        Eigen::Map<Eigen::RowVectorXf> o(out.data() + d.row(b, si, h) * s.d_v, dv);
        o = o_lat.row(si * H + h) * w_uv.transpose();
      }
    }
  });
}

void mla_decode_naive(const MlaInputs& in, MlaOutput& out, unsigned threads) {
  check(in);
  const MlaShape& s = in.shape;
  const Dims d(s);
  auto [S, dc, dr, dn, dv, qk] = std::tuple{d.S, d.dc, d.dr, d.dn, d.dv, d.qk};
  float scale = d.scale;
  out.assign(s.batch * s.query * s.heads * s.d_v, 0.0f);
  // Threads over sequences × heads; each decompresses its own head's K and V.
  parallel_for(s.batch * s.heads, threads, [&](std::uint64_t task) {
    std::uint64_t b = task / s.heads;
    auto h = static_cast<Eigen::Index>(task % s.heads);
    thread_local RowMatrix latent;
    thread_local std::uint64_t gathered = UINT64_MAX;
    thread_local const MlaInputs* source = nullptr;
    if (gathered != b || source != &in) {
      gather(in, b, latent);
      gathered = b;
      source = &in;
    }
    ConstMap w_uk(in.w_uk.data() + static_cast<std::uint64_t>(h) * s.d_nope * s.d_c, dn, dc);
    ConstMap w_uv(in.w_uv.data() + static_cast<std::uint64_t>(h) * s.d_v * s.d_c, dv, dc);
    RowMatrix k_nope = latent.leftCols(dc) * w_uk.transpose(); // [t][d_nope]
    RowMatrix v = latent.leftCols(dc) * w_uv.transpose();      // [t][d_v]
    RowMatrix q(S, qk);
    for (Eigen::Index si = 0; si < S; ++si) {
      q.row(si) = Eigen::Map<const Eigen::RowVectorXf>(
          in.q.data() + d.row(b, si, h) * static_cast<std::uint64_t>(qk), qk);
    }
    RowMatrix scores =
        q.leftCols(dn) * k_nope.transpose() + q.rightCols(dr) * latent.rightCols(dr).transpose();
    softmax_rows(scores, scale);
    RowMatrix o = scores * v;
    for (Eigen::Index si = 0; si < S; ++si) {
      Eigen::Map<Eigen::RowVectorXf>(out.data() + d.row(b, si, h) * s.d_v, dv) = o.row(si);
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
        const float* w_uk = in.w_uk.data() + h * s.d_nope * s.d_c;
        const float* w_uv = in.w_uv.data() + h * s.d_v * s.d_c;
        // k_nope(t) · q_nope = (W_UK c_t) · q_nope = c_t · (W_UKᵀ q_nope): exact in double.
        std::fill(q_lat.begin(), q_lat.end(), 0.0);
        for (std::uint64_t n = 0; n < s.d_nope; ++n) {
          for (std::uint64_t j = 0; j < s.d_c; ++j) {
            q_lat[j] += static_cast<double>(q[n]) * w_uk[n * s.d_c + j];
          }
        }
        double peak = -std::numeric_limits<double>::infinity();
        for (std::uint64_t t = 0; t < s.context; ++t) {
          const float* c = row(t);
          double dot = 0;
          for (std::uint64_t j = 0; j < s.d_c; ++j) {
            dot += q_lat[j] * c[j];
          }
          for (std::uint64_t r = 0; r < s.d_r; ++r) {
            dot += static_cast<double>(q[s.d_nope + r]) * c[s.d_c + r];
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
          const float* c = row(t);
          double p = scores[t] / sum;
          for (std::uint64_t j = 0; j < s.d_c; ++j) {
            o_lat[j] += p * c[j];
          }
        }
        double* o = out.data() + ((b * s.query + si) * s.heads + h) * s.d_v;
        for (std::uint64_t v = 0; v < s.d_v; ++v) {
          for (std::uint64_t j = 0; j < s.d_c; ++j) {
            o[v] += static_cast<double>(w_uv[v * s.d_c + j]) * o_lat[j];
          }
        }
      }
    }
  }
  return out;
}

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
    double err = std::fabs(got[i] - want[i]);
    if (err > abs_bar && err > rel_bar * std::max(std::fabs(want[i]), rms)) {
      ++a.elements_over_bar;
    }
  }
  a.cos_diff = norms > 0 ? 1.0 - 2.0 * xy / norms : 0.0;
  return a;
}

} // namespace kvcalc::kernels
