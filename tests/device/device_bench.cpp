// The absorbed MLA decode kernels side by side on one GPU: mma_sync and (on Hopper) wgmma, the
// same inputs, each checked before it is timed; after each kernel's rows, the memory-bound
// shape at a range of KV split counts, against that kernel's split rule, to tune the rule by.
// Every mma_sync row comes first and a failed row does not end the run, so a fault of the
// wgmma kernel loses only its own rows. Not a test: kernels/cuda/device_check.sh runs it and
// docs/performance.md records what it prints. Exit 77 without a GPU, 1 when a check failed.
//
//   kvcalc_device_bench [--quick]     batch 128; heads 16, 64, 128; context 4k and 32k
//                                     (--quick: context 4k only); splits at 16 heads, 4k

#include <cstdio>
#include <cstring>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <kvcalc/kernels/cpu/mla_decode.hpp>
#include <kvcalc/kernels/cpu/probes.hpp>
#include <kvcalc/kernels/cuda/cuda_kernels.hpp>

using namespace kvcalc::kernels;

namespace {

struct Timing {
  double total_s = 0;     ///< q·W_UK, attention, combine, W_UV
  double attention_s = 0; ///< the split-KV kernel and its combine step
  double combine_s = 0;   ///< the combine step alone
};

/// Median of 10 runs after a warm-up, the L2 flushed before each.
Timing time_absorbed(cuda::MlaDecodeCuda& problem) {
  (void)problem.run(false, true);
  std::vector<double> totals;
  std::vector<double> attention;
  std::vector<double> combine;
  for (int i = 0; i < 10; ++i) {
    cuda::MlaRunTimes t = problem.run(false, true);
    totals.push_back(t.total_s);
    double core = 0;
    for (const auto& p : t.phases) {
      if (p.name == "attention" || p.name == "combine") {
        core += p.seconds;
      }
      if (p.name == "combine") {
        combine.push_back(p.seconds);
      }
    }
    attention.push_back(core);
  }
  return {median(totals), median(attention), combine.empty() ? 0.0 : median(combine)};
}

/// Throws unless `got` is within the bars of `want`, saying where it is not.
Agreement require(const std::vector<float>& got, const std::vector<double>& want,
                  const MlaShape& shape, double bar_scale, const std::string& what) {
  const double abs_bar = bar_scale * k_abs_bar;
  const double rel_bar = bar_scale * k_rel_bar;
  const double max_cos_diff = bar_scale * 1e-5;
  Agreement a = compare(got, want, abs_bar, rel_bar);
  if (!a.finite || a.cos_diff > max_cos_diff || a.elements_over_bar != 0) {
    const std::string misses = describe_misses(got, want, shape, abs_bar, rel_bar);
    char figures[96];
    std::snprintf(figures, sizeof figures, ": cos diff %.3g (bar %.0e); ", a.cos_diff,
                  max_cos_diff);
    throw std::runtime_error(what + figures +
                             (misses.empty() ? "every element within the bar" : misses));
  }
  return a;
}

/// The batch-128 shapes the bench times.
MlaShape bench_shape(std::uint64_t heads, std::uint64_t context) {
  MlaShape s;
  s.batch = 128;
  s.heads = heads;
  s.query = 1;
  s.context = context;
  return s;
}

/// A timed row that later rows of the same shape are checked and timed against.
struct Baseline {
  std::string name;       ///< "mma_sync", "split rule"
  std::vector<float> out; ///< every sequence's output
  double attention_s = 0;
};

/// Checks then times one kernel on `s` and prints its row: against the double reference
/// (`reference`, computed on the first call for the shape) and, when given, against `base`
/// over the whole batch, with the attention time's ratio to it. `splits` 0 lets the kernel
/// choose. Returns the row, to serve as a baseline.
Baseline bench_row(const MlaShape& s, cuda::AbsorbedKernel kernel, int splits,
                   std::vector<double>& reference, const Baseline* base) {
  const char* name = kernel == cuda::AbsorbedKernel::wgmma ? "wgmma" : "mma_sync";
  const std::string where = std::string(name) + ", " + std::to_string(s.heads) +
                            " heads, context " + std::to_string(s.context) +
                            (splits > 0 ? ", " + std::to_string(splits) + " splits asked" : "");
  const double b = static_cast<double>(s.batch);
  const double h = static_cast<double>(s.heads);
  const double t = static_cast<double>(s.context);
  const double bytes = (b * t * 576 + b * h * (576 + 512)) * 2;
  const double flops = 2 * b * h * t * (576 + 512);

  cuda::MlaDecodeCuda problem(s, 20260101, kernel, splits);
  (void)problem.run(false, true);
  Baseline row;
  row.out = problem.output();
  if (reference.empty()) {
    reference = mla_decode_reference(problem.first_sequence(), 1);
  }
  Agreement a = require(row.out, reference, s, 1, where + ", against the double reference");
  char text[96];
  std::snprintf(text, sizeof text, "ref cos %.1e", a.cos_diff);
  std::string check = text;
  if (base != nullptr) {
    // Every sequence: each is within the bars of the reference, so twice them apart.
    Agreement both = require(row.out, std::vector<double>(base->out.begin(), base->out.end()), s, 2,
                             where + ", against " + base->name + " over the whole batch");
    std::snprintf(text, sizeof text, ", vs %s cos %.1e", base->name.c_str(), both.cos_diff);
    check += text;
  }
  Timing tm = time_absorbed(problem);
  row.attention_s = tm.attention_s;
  const std::string asked = splits > 0 ? std::to_string(splits) : "rule";
  std::printf("%5llu %7llu  %-8s %5s %6d %11.1f %11.1f %10.1f %9.3f %10.1f  %s",
              static_cast<unsigned long long>(s.heads), static_cast<unsigned long long>(s.context),
              name, asked.c_str(), problem.splits(), tm.total_s * 1e6, tm.attention_s * 1e6,
              tm.combine_s * 1e6, bytes / tm.attention_s / 1e12, flops / tm.attention_s / 1e12,
              check.c_str());
  if (base != nullptr) {
    std::printf("; attn %.2fx %s", base->attention_s / tm.attention_s, base->name.c_str());
  }
  std::printf("\n");
  std::fflush(stdout);
  return row;
}

/// Runs `body`; a failed check or a CUDA error prints and counts instead of ending the bench,
/// so one kernel's failure does not cost the other's rows. (After a fault the CUDA context is
/// gone and every later row fails as well: the wgmma rows come last.)
template <class Body> void guarded_row(int& failures, Body&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "kvcalc device bench: %s\n", e.what());
    ++failures;
  }
}

} // namespace

int main(int argc, char* argv[]) {
  bool quick = false;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else {
      std::fprintf(stderr, "kvcalc device bench: unknown argument '%s'; usage: %s [--quick]\n",
                   argv[i], argv[0]);
      return 2;
    }
  }
  if (cuda::device_count() == 0) {
    std::puts("kvcalc device bench: no CUDA device visible; skipped");
    return 77;
  }
  try {
    cuda::DeviceInfo info = cuda::device_info();
    bool wgmma = cuda::MlaDecodeCuda::wgmma_supported();
    std::printf("%s, %d SMs, compute capability %d.%d; wgmma kernel %s\n", info.name.c_str(),
                info.sm_count, info.compute_major, info.compute_minor,
                wgmma ? "available"
                      : "not available (needs compute capability 9.0 and sm_90a code)");
    std::printf("absorbed MLA decode, batch 128, query 1, DeepSeek dimensions; median of 10, L2 "
                "flushed.\n'attn' is the split-KV kernel + combine, counted as FlashMLA counts "
                "(bytes: latent + q + out; FLOPs: 2·h·t·(576 + 512) per sequence).\n");
    std::vector<MlaShape> shapes;
    for (std::uint64_t heads : {16u, 64u, 128u}) {
      for (std::uint64_t context : {4096u, 32768u}) {
        if (!quick || context == 4096) {
          shapes.push_back(bench_shape(heads, context));
        }
      }
    }
    // The memory-bound target's shape at these split counts. A count is asked, not forced: the
    // tiles (128 of mma_sync's, 64 of wgmma's at 4k) go in runs of ceil(tiles / asked), so
    // fewer splits may run (24 asked of 128 tiles: 22); the 'splits' column says what ran.
    const MlaShape sweep = bench_shape(16, 4096);
    const int sweep_splits[] = {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64};

    // Per shape: the double reference, and mma_sync's row, which wgmma's is checked against.
    std::vector<std::vector<double>> references(shapes.size());
    std::vector<std::optional<Baseline>> mma_rows(shapes.size());
    int failures = 0;
    for (cuda::AbsorbedKernel kernel :
         {cuda::AbsorbedKernel::mma_sync, cuda::AbsorbedKernel::wgmma}) {
      const bool is_wgmma = kernel == cuda::AbsorbedKernel::wgmma;
      if (is_wgmma && !wgmma) {
        continue;
      }
      std::printf("\n%5s %7s  %-8s %5s %6s %11s %11s %10s %9s %10s  %s\n", "heads", "context",
                  "kernel", "asked", "splits", "total us", "attn us", "combine us", "attn TB/s",
                  "attn TF/s", "check");
      std::optional<Baseline> rule; // this kernel's row of the sweep's shape, by its split rule
      std::vector<double>* sweep_reference = nullptr;
      for (std::size_t i = 0; i < shapes.size(); ++i) {
        guarded_row(failures, [&] {
          const Baseline* base = is_wgmma && mma_rows[i] ? &*mma_rows[i] : nullptr;
          Baseline row = bench_row(shapes[i], kernel, 0, references[i], base);
          if (!is_wgmma) {
            mma_rows[i] = row;
            mma_rows[i]->name = "mma_sync";
          }
          if (shapes[i].heads == sweep.heads && shapes[i].context == sweep.context) {
            row.name = "split rule";
            rule = std::move(row);
            sweep_reference = &references[i];
          }
        });
      }
      if (!rule) {
        continue; // its row failed: nothing to check the sweep against
      }
      std::printf("\nKV splits asked, %llu heads, context %llu, against %s's split rule:\n",
                  static_cast<unsigned long long>(sweep.heads),
                  static_cast<unsigned long long>(sweep.context), is_wgmma ? "wgmma" : "mma_sync");
      for (int splits : sweep_splits) {
        guarded_row(failures,
                    [&] { (void)bench_row(sweep, kernel, splits, *sweep_reference, &*rule); });
      }
    }
    if (failures > 0) {
      std::fprintf(stderr, "kvcalc device bench: %d rows failed their checks\n", failures);
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvcalc device bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
