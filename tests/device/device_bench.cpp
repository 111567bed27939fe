// The absorbed MLA decode kernels side by side on one GPU: mma_sync and (on Hopper) wgmma, the
// same inputs, each checked before it is timed. Every mma_sync row comes first, so a fault of
// the wgmma kernel loses only its own rows. Not a test: kernels/cuda/device_check.sh runs it
// and docs/performance.md records what it prints. Exit 77 without a GPU, 1 when a check fails.
//
//   kvcalc_device_bench [--quick]     batch 128; heads 16, 64, 128; context 4k and 32k
//                                     (--quick: context 4k only)

#include <cstdio>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

#include <cpu/mla_decode.hpp>
#include <cpu/probes.hpp>
#include <cuda/cuda_kernels.hpp>

using namespace kvcalc::kernels;

namespace {

struct Timing {
  double total_s = 0;     ///< q·W_UK, attention, combine, W_UV
  double attention_s = 0; ///< the split-KV kernel and its combine step
};

/// Median of 10 runs after a warm-up, the L2 flushed before each.
Timing time_absorbed(cuda::MlaDecodeCuda& problem) {
  (void)problem.run(false, true);
  std::vector<double> totals;
  std::vector<double> attention;
  for (int i = 0; i < 10; ++i) {
    cuda::MlaRunTimes t = problem.run(false, true);
    totals.push_back(t.total_s);
    double core = 0;
    for (const auto& p : t.phases) {
      if (p.name == "attention" || p.name == "combine") {
        core += p.seconds;
      }
    }
    attention.push_back(core);
  }
  return {median(totals), median(attention)};
}

/// Throws unless `got` is within the bars of `want`.
void require(const Agreement& a, double max_cos_diff, const std::string& what) {
  if (!a.finite || a.cos_diff > max_cos_diff || a.elements_over_bar != 0) {
    throw std::runtime_error(what + ": cos diff " + std::to_string(a.cos_diff) + ", " +
                             std::to_string(a.elements_over_bar) + " elements over the bar" +
                             (a.finite ? "" : ", not finite"));
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
                "(bytes: latent + q + out; FLOPs: 2·h·t·(576 + 512) per sequence).\n\n");
    std::printf("%5s %7s  %-8s %6s %11s %11s %9s %10s  %s\n", "heads", "context", "kernel",
                "splits", "total us", "attn us", "attn TB/s", "attn TF/s", "check");
    std::vector<MlaShape> shapes;
    for (std::uint64_t heads : {16u, 64u, 128u}) {
      for (std::uint64_t context : {4096u, 32768u}) {
        if (quick && context > 4096) {
          continue;
        }
        MlaShape s;
        s.batch = 128;
        s.heads = heads;
        s.query = 1;
        s.context = context;
        shapes.push_back(s);
      }
    }
    // Per shape, from the mma_sync pass: the reference, the whole output and the attention time.
    std::vector<std::vector<double>> references(shapes.size());
    std::vector<std::vector<float>> mma_outputs(shapes.size());
    std::vector<double> mma_attention(shapes.size());
    for (cuda::AbsorbedKernel kernel :
         {cuda::AbsorbedKernel::mma_sync, cuda::AbsorbedKernel::wgmma}) {
      const bool is_wgmma = kernel == cuda::AbsorbedKernel::wgmma;
      if (is_wgmma && !wgmma) {
        continue;
      }
      const char* name = is_wgmma ? "wgmma" : "mma_sync";
      for (std::size_t i = 0; i < shapes.size(); ++i) {
        const MlaShape& s = shapes[i];
        const std::string where = std::string(name) + ", " + std::to_string(s.heads) +
                                  " heads, context " + std::to_string(s.context);
        const double b = static_cast<double>(s.batch);
        const double h = static_cast<double>(s.heads);
        const double t = static_cast<double>(s.context);
        const double bytes = (b * t * 576 + b * h * (576 + 512)) * 2;
        const double flops = 2 * b * h * t * (576 + 512);

        cuda::MlaDecodeCuda problem(s, 20260101, kernel);
        (void)problem.run(false, true);
        std::vector<float> out = problem.output();
        if (references[i].empty()) {
          references[i] = mla_decode_reference(problem.first_sequence(), 1);
        }
        Agreement a = compare(out, references[i]);
        require(a, 1e-5, where + ", against the double reference");
        char text[96];
        std::snprintf(text, sizeof text, "ref cos %.1e", a.cos_diff);
        std::string check = text;
        if (is_wgmma) {
          // Every sequence: each is within the bars of the reference, so twice them apart.
          Agreement both =
              compare(out, std::vector<double>(mma_outputs[i].begin(), mma_outputs[i].end()),
                      2 * k_abs_bar, 2 * k_rel_bar);
          require(both, 2e-5, where + ", against mma_sync over the whole batch");
          std::snprintf(text, sizeof text, ", vs mma_sync cos %.1e", both.cos_diff);
          check += text;
        } else {
          mma_outputs[i] = std::move(out);
        }
        Timing tm = time_absorbed(problem);
        std::printf("%5llu %7llu  %-8s %6d %11.1f %11.1f %9.3f %10.1f  %s",
                    static_cast<unsigned long long>(s.heads),
                    static_cast<unsigned long long>(s.context), name, problem.splits(),
                    tm.total_s * 1e6, tm.attention_s * 1e6, bytes / tm.attention_s / 1e12,
                    flops / tm.attention_s / 1e12, check.c_str());
        if (is_wgmma) {
          std::printf("; attn %.2fx mma_sync", mma_attention[i] / tm.attention_s);
        } else {
          mma_attention[i] = tm.attention_s;
        }
        std::printf("\n");
        std::fflush(stdout);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "kvcalc device bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
