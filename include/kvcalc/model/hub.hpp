#pragma once
/// Models where users keep them: a HuggingFace repo id (`Qwen/Qwen3-32B`) read from the local
/// HF cache, else from the Hub over HTTP; a snapshot folder (docs/model-format.md, "From the
/// Hub"). kvcalc reads the HF cache and never writes it.

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace kvcalc::model {

/// Whether `spec` reads as a repo id: `owner/name`, one slash, letters, digits, `-`, `_`, `.`,
/// and no file extension kvcalc reads.
[[nodiscard]] bool looks_like_repo_id(std::string_view spec);

/// The HF cache's hub folder: $HF_HUB_CACHE, else $HF_HOME/hub, else
/// $XDG_CACHE_HOME/huggingface/hub, else ~/.cache/huggingface/hub.
[[nodiscard]] std::filesystem::path hub_cache_dir();

/// The snapshot folder of `repo` at refs/main in the local cache, if there is one.
[[nodiscard]] std::optional<std::filesystem::path> cached_snapshot(std::string_view repo);

/// Whether `folder` is a snapshot of the HF cache (…/models--owner--name/snapshots/<commit>).
[[nodiscard]] bool is_cached_snapshot(const std::filesystem::path& folder);

/// Whether a cached snapshot lacks `filename` for certain: the Hub once answered that the repo
/// has no such file (huggingface_hub then writes .no_exist/<commit>/<filename>), or the snapshot
/// holds the weights, so it is a whole download. A snapshot of config.json alone cannot tell.
[[nodiscard]] bool known_absent(const std::filesystem::path& snapshot, std::string_view filename);

/// A file of a model repo on the Hub.
struct HubFile {
  std::string text;
  std::string url; ///< where it came from: names the model and locates errors
};

/// `filename` of `repo` at main from $HF_ENDPOINT (else https://huggingface.co), with $HF_TOKEN
/// (else the token file under $HF_HOME) as a bearer token. nullopt when the repo has no such
/// file and `optional`; every other failure is an error that says what to do: offline
/// ($HF_HUB_OFFLINE=1), gated or private (401/403), no such repo, no network.
[[nodiscard]] std::optional<HubFile> fetch_hub_file(std::string_view repo,
                                                    std::string_view filename, bool optional);

/// Whether this build fetches from the Hub (KVCALC_HUB: built with curl's headers; libcurl itself
/// is opened at the first download, and fetch_hub_file says what to do where it cannot be);
/// without, only the cache.
[[nodiscard]] bool hub_over_http();

} // namespace kvcalc::model
