#pragma once
// The deployments of a command line: its devices and one capacity request per model × device
// × tp (capacity, compare, simulate).

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <kvcalc/kv/capacity.hpp>
#include <kvcalc/roofline/roofline.hpp>

#include "command.hpp"

namespace kvcalc::cli {

/// The devices of a deployment: each --gpu from the catalog, `auto` the device `profile`
/// measured, and without --gpu, that device when there is a profile (docs/device-profile.md).
/// A profile set on a GPU it did not measure gets a warning. `how_to_measure` ends the error
/// of `auto` without a profile.
std::vector<Gpu> deployment_devices(const ParallelOptions& p,
                                    const std::optional<DeviceProfile>& profile,
                                    const GpuCatalog& catalog, const std::string& how_to_measure,
                                    std::vector<std::string>& warnings);

/// One capacity request per model × device × tp of the options.
std::vector<CapacityRequest>
capacity_requests(const std::vector<Model>& models, const CacheRequest& cache,
                  const ParallelOptions& p, const EngineOptions& engine,
                  std::optional<u64> block_size, const std::vector<Gpu>& devices,
                  const std::vector<u64>& contexts, std::optional<u64> max_context_at);

/// What a deployment that does not fit would need: "it fits at --gpus 8 --tp 8" (the smallest
/// power-of-two tp that holds the model and one sequence of every context asked), or what to
/// try when no tp up to 64 does.
[[nodiscard]] std::string fit_hint(const CapacityRequest& request);

/// The contexts a command reports when none are asked: 4k, 32k and 128k, those up to
/// --max-model-len and that length itself when it is given.
[[nodiscard]] std::vector<u64> default_contexts(const EngineOptions& engine);

/// The ceilings of --device-profile, or of this machine measured now with --measure (written
/// to --save-profile when given; --gpu is checked against the measured device before the probes
/// run); nullopt for neither.
std::optional<DeviceProfile> read_ceilings(const CeilingOptions& c, const ParallelOptions& p,
                                           const GpuCatalog& catalog,
                                           const std::string& how_to_measure, std::ostream& err);

/// The device profile of --device-profile FILE, if one is given.
std::optional<DeviceProfile> read_device_profile(const std::string& path);

} // namespace kvcalc::cli
