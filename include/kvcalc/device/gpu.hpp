#pragma once
/// The GPU catalog: memory, bandwidth and dense peak FLOP/s of each part (src/device/gpus.yaml,
/// compiled in; `--gpu-file` adds a user's own).

#include <array>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <kvcalc/core/checked.hpp>
#include <kvcalc/core/dtype.hpp>
#include <kvcalc/core/embedded.hpp>

namespace kvcalc::device {

/// Dense peak rates in FLOP/s (or OP/s for int8); unset where the part has no such unit.
struct PeakFlops {
  std::optional<double> fp32; ///< non-tensor FP32
  std::optional<double> tf32;
  std::optional<double> bf16;
  std::optional<double> fp16;
  std::optional<double> fp8;
  std::optional<double> int8;
  std::optional<double> fp4;
};

/// Each dtype of PeakFlops with its name, so code that reads, writes or scales the peaks
/// walks one list.
struct PeakFlopsField {
  std::string_view name; ///< "fp32", "bf16", ...
  std::optional<double> PeakFlops::*value;
};
inline constexpr std::array<PeakFlopsField, 7> k_peak_flops_fields{{
    {"fp32", &PeakFlops::fp32},
    {"tf32", &PeakFlops::tf32},
    {"bf16", &PeakFlops::bf16},
    {"fp16", &PeakFlops::fp16},
    {"fp8", &PeakFlops::fp8},
    {"int8", &PeakFlops::int8},
    {"fp4", &PeakFlops::fp4},
}};

/// A GPU's network port for scale-out traffic (the NIC of its rail).
struct NetworkLink {
  std::string kind;       ///< infiniband-ndr, roce-400g, ...; empty: the part has none
  double bytes_per_s = 0; ///< one direction (a 400 Gb/s NIC: 50e9)
  double latency_s = 0;   ///< one message, end to end (the α of a collective step)
};

struct Gpu {
  std::string name;         ///< registry key, lowercase
  std::string display_name; ///< vendor's name
  std::vector<std::string> aliases;
  std::string vendor;       ///< nvidia | amd
  std::string architecture; ///< ampere, ada, hopper, blackwell, cdna3
  u64 memory_bytes = 0;     ///< usable, as the driver reports the total
  u64 memory_nominal_bytes = 0;
  double memory_bandwidth_bytes_per_s = 0;
  PeakFlops flops_per_s;
  u64 sm_count = 0; ///< SMs, or CUs on AMD
  u64 l2_bytes = 0;
  std::string interconnect;            ///< nvlink4, pcie5, infinity-fabric, ...
  double interconnect_bytes_per_s = 0; ///< per GPU, both directions, as the vendor states it
  /// GPUs the interconnect joins: 8 on an HGX board, 72 in an NVL72 rack; 0: not stated.
  u64 scale_up_domain = 0;
  /// The domain joins several nodes (an NVL72 rack's trays); else it is one node's, and nodes
  /// of fewer GPUs make it smaller.
  bool domain_spans_nodes = false;
  double interconnect_latency_s = 0; ///< one message over it (a collective step's α)
  NetworkLink scale_out;             ///< to GPUs outside the domain
  std::string source;
  /// Keys a user's catalog left out (the bundled one gives every figure): the commands that
  /// need one say so (require_figures).
  std::vector<std::string> not_given;
  std::string file; ///< the catalog it came from
};

/// Throws an InputError naming every key of `keys` that `gpu`'s catalog entry left out, and
/// `what` needs them for ("the roofline"); does nothing when all are given.
void require_figures(const Gpu& gpu, std::initializer_list<std::string_view> keys,
                     std::string_view what);

/// Dense peak for `dtype` (fp8_e4m3/e5m2 → fp8, nvfp4/mxfp4 → fp4, int4 → int8), or nullopt.
[[nodiscard]] std::optional<double> peak_flops(const PeakFlops& flops, DType dtype);
[[nodiscard]] inline std::optional<double> peak_flops(const Gpu& gpu, DType dtype) {
  return peak_flops(gpu.flops_per_s, dtype);
}

/// GPUs of one scale-up domain in a deployment of nodes of `gpus_per_node` (0: not said): the
/// catalog's, or the node where the domain is one node's (or not stated) and the node is
/// smaller; 0 when neither says.
[[nodiscard]] u64 scale_up_domain(const Gpu& gpu, u64 gpus_per_node);

/// What a catalog entry must state: every figure (the bundled catalog), or only its name and
/// usable memory, the rest where a command uses it (a user's --gpu-file).
enum class CatalogKind { bundled, user };

/// Parses a catalog (`gpus:` list, docs/gpu-catalog.md); errors are located InputErrors.
[[nodiscard]] std::vector<Gpu> parse_gpu_catalog(const std::string& text, const std::string& file,
                                                 CatalogKind kind = CatalogKind::bundled);

/// src/device/gpus.yaml as compiled in; generated at build time.
[[nodiscard]] std::span<const EmbeddedFile> builtin_gpu_files();

/// The bundled catalog, parsed once, in file order.
[[nodiscard]] const std::vector<Gpu>& builtin_gpus();

/// A catalog: the bundled one, plus the GPUs of `extra_file` when given (its entries win on
/// a name clash).
class GpuCatalog {
public:
  explicit GpuCatalog(const std::string& extra_file = {});
  [[nodiscard]] const std::vector<Gpu>& gpus() const { return m_gpus; }
  /// By name or alias, any case; an unknown name is an InputError with a did-you-mean.
  [[nodiscard]] const Gpu& find(std::string_view name) const;

private:
  std::vector<Gpu> m_gpus;
};

} // namespace kvcalc::device
