// The HuggingFace cache layout (huggingface_hub's file_download.py: models--{owner}--{name},
// refs/{revision} holding a commit, snapshots/{commit}/{file}) and the Hub's file URL
// ({endpoint}/{repo}/resolve/{revision}/{file}), read with libcurl, which is opened at the first
// download rather than linked (curl_on_demand.cpp).

#include <kvcalc/model/hub.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <memory>

#if defined(KVCALC_HAVE_CURL)
#include <curl/curl.h>

#include "curl_on_demand.hpp"
#endif

#include <kvcalc/core/error.hpp>
#include <kvcalc/core/file.hpp>

namespace kvcalc::model {

namespace {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? std::optional<std::string>(v) : std::nullopt;
}

bool truthy(const char* name) {
  std::optional<std::string> v = env(name);
  return v && (*v == "1" || *v == "true" || *v == "TRUE" || *v == "yes" || *v == "ON");
}

std::filesystem::path hf_home() {
  if (auto home = env("HF_HOME")) {
    return *home;
  }
  if (auto xdg = env("XDG_CACHE_HOME")) {
    return std::filesystem::path(*xdg) / "huggingface";
  }
  return std::filesystem::path(env("HOME").value_or(".")) / ".cache" / "huggingface";
}

#if defined(KVCALC_HAVE_CURL)
/// The bytes of a reply, capped: a config is kilobytes, never this.
constexpr std::size_t k_max_reply_bytes = k_max_input_bytes; // as a file on disk

std::size_t collect(char* data, std::size_t size, std::size_t count, void* out) {
  auto* text = static_cast<std::string*>(out);
  std::size_t n = size * count;
  if (text->size() + n > k_max_reply_bytes) {
    return 0; // libcurl stops with CURLE_WRITE_ERROR
  }
  text->append(data, n);
  return n;
}

struct CurlDeleter {
  void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct ListDeleter {
  void operator()(curl_slist* l) const { curl_slist_free_all(l); }
};
#endif

} // namespace

bool looks_like_repo_id(std::string_view spec) {
  std::size_t slash = spec.find('/');
  if (slash == std::string_view::npos || slash == 0 || slash + 1 == spec.size() ||
      spec.find('/', slash + 1) != std::string_view::npos || spec.size() > 96 + 1 + 96) {
    return false;
  }
  // The Hub's rules for each part: no "..", no "--", neither starting nor ending in '.' or '-'.
  for (std::string_view part : {spec.substr(0, slash), spec.substr(slash + 1)}) {
    if (part.find("..") != std::string_view::npos || part.find("--") != std::string_view::npos ||
        part.front() == '.' || part.front() == '-' || part.back() == '.' || part.back() == '-') {
      return false;
    }
  }
  for (std::string_view ext : {".json", ".yaml", ".yml"}) {
    if (spec.ends_with(ext)) {
      return false;
    }
  }
  return std::all_of(spec.begin(), spec.end(),
                     [](char c) {
                       return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                              (c >= '0' && c <= '9') || c == '-' || c == '_' || c == '.' ||
                              c == '/';
                     }) &&
         spec.front() != '.';
}

std::filesystem::path hub_cache_dir() {
  if (auto cache = env("HF_HUB_CACHE")) {
    return *cache;
  }
  return hf_home() / "hub";
}

std::optional<std::filesystem::path> cached_snapshot(std::string_view repo) {
  std::size_t slash = repo.find('/');
  std::string folder =
      "models--" + std::string(repo.substr(0, slash)) + "--" + std::string(repo.substr(slash + 1));
  std::filesystem::path dir = hub_cache_dir() / folder;
  std::error_code ec;
  std::filesystem::path ref = dir / "refs" / "main";
  if (!std::filesystem::is_regular_file(ref, ec)) {
    return std::nullopt;
  }
  std::string commit = read_text_file(ref.string());
  while (!commit.empty() && std::isspace(static_cast<unsigned char>(commit.back())) != 0) {
    commit.pop_back();
  }
  // A commit hash names the snapshot: hex digits only, never a path.
  bool hex = !commit.empty() && commit.size() <= 64 &&
             std::all_of(commit.begin(), commit.end(),
                         [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
  std::filesystem::path snapshot = dir / "snapshots" / commit;
  if (!hex || !std::filesystem::is_directory(snapshot, ec)) {
    return std::nullopt;
  }
  return snapshot;
}

bool is_cached_snapshot(const std::filesystem::path& folder) {
  std::filesystem::path snapshots = folder.parent_path();
  return snapshots.filename() == "snapshots" &&
         snapshots.parent_path().filename().string().starts_with("models--");
}

bool known_absent(const std::filesystem::path& snapshot, std::string_view filename) {
  std::error_code ec;
  std::filesystem::path repo = snapshot.parent_path().parent_path();
  if (std::filesystem::exists(repo / ".no_exist" / snapshot.filename() / filename, ec)) {
    return true;
  }
  for (const auto& entry : std::filesystem::directory_iterator(snapshot, ec)) {
    std::string name = entry.path().filename().string();
    if (name.ends_with(".safetensors") || name.ends_with(".bin") || name.ends_with(".pth")) {
      return true;
    }
  }
  return false;
}

std::optional<HubFile> fetch_hub_file(std::string_view repo, std::string_view filename,
                                      bool optional) {
  std::string r(repo);
  if (truthy("HF_HUB_OFFLINE") || truthy("TRANSFORMERS_OFFLINE")) {
    if (optional) {
      return std::nullopt;
    }
    throw InputError("model '" + r + "' is not in the HF cache (" + hub_cache_dir().string() +
                     ") and HF_HUB_OFFLINE is set: download its config.json first "
                     "(huggingface-cli download " +
                     r +
                     " config.json hf_quant_config.json: the second only ModelOpt "
                     "checkpoints have), or unset HF_HUB_OFFLINE");
  }
  std::string endpoint = env("HF_ENDPOINT").value_or("https://huggingface.co");
  while (!endpoint.empty() && endpoint.back() == '/') {
    endpoint.pop_back();
  }
  std::string url = endpoint + "/" + r + "/resolve/main/" + std::string(filename);
  std::optional<std::string> token = env("HF_TOKEN");
  if (!token) {
    std::error_code ec;
    std::filesystem::path file = hf_home() / "token";
    if (std::filesystem::is_regular_file(file, ec)) {
      std::string t = read_text_file(file.string());
      t.erase(std::remove_if(t.begin(), t.end(), [](char c) { return c == '\n' || c == '\r'; }),
              t.end());
      if (!t.empty()) {
        token = t;
      }
    }
  }

#if !defined(KVCALC_HAVE_CURL)
  throw Error("model '" + r + "' is not in the HF cache (" + hub_cache_dir().string() +
              "), and this kvcalc was built without the Hub (KVCALC_HUB), so it cannot fetch " +
              url + ": download its config.json (huggingface-cli download " + r +
              " config.json hf_quant_config.json) and give the folder");
#else
  if (std::optional<std::string> failure = detail::open_curl()) {
    throw Error("model '" + r + "' is not in the HF cache (" + hub_cache_dir().string() +
                "), and kvcalc cannot fetch " + url + ": " + *failure + ". kvcalc downloads with " +
                detail::k_curl_soname +
                ": install it (Debian, Ubuntu: apt install libcurl4; Fedora: dnf install "
                "libcurl), or download the model's config.json (huggingface-cli download " +
                r +
                " config.json hf_quant_config.json) and give its folder, or the file, as the "
                "model");
  }
  static const bool initialised = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
  std::unique_ptr<CURL, CurlDeleter> curl(initialised ? curl_easy_init() : nullptr);
  if (!curl) {
    throw Error("cannot start an HTTP client (libcurl) to fetch " + url);
  }
  std::string body;
  std::unique_ptr<curl_slist, ListDeleter> headers;
  if (token) {
    headers.reset(curl_slist_append(nullptr, ("Authorization: Bearer " + *token).c_str()));
  }
  CURL* c = curl.get();
  detail::easy_setopt(c, CURLOPT_URL, url.c_str());
  detail::easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
  detail::easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
  detail::easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 10L);
  detail::easy_setopt(c, CURLOPT_TIMEOUT, 30L);
  detail::easy_setopt(c, CURLOPT_USERAGENT, "kvcalc");
  detail::easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
  detail::easy_setopt(c, CURLOPT_WRITEDATA, &body);
  detail::easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  if (headers) {
    detail::easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
  }
  CURLcode rc = curl_easy_perform(c);
  long status = 0;
  detail::easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  if (rc == CURLE_WRITE_ERROR) {
    throw InputError(url + ": the reply is over 16 MiB, which no config.json is");
  }
  if (rc != CURLE_OK) {
    throw Error("cannot fetch " + url + ": " + curl_easy_strerror(rc) +
                " (offline? set HF_HUB_OFFLINE=1 to use the HF cache only, HF_ENDPOINT for a "
                "mirror)");
  }
  if (status == 200) {
    return HubFile{std::move(body), url};
  }
  if (status == 404 && optional) {
    return std::nullopt;
  }
  if (status == 401 || status == 403) {
    // The Hub answers 401 for a repo it will not show: missing, private or gated.
    throw InputError(url + ": HTTP " + std::to_string(status) +
                     ": no such repo, or it is private or gated" +
                     (token ? " and the token given (HF_TOKEN) has no access to it"
                            : ": check the name, or set HF_TOKEN to a token with access"));
  }
  if (status == 404) {
    throw InputError(url + ": HTTP 404: no such repo or file on the Hub (is '" + r +
                     "' spelt as on huggingface.co?)");
  }
  throw Error(url + ": HTTP " + std::to_string(status) + " from the Hub");
#endif
}

bool hub_over_http() {
#if defined(KVCALC_HAVE_CURL)
  return true;
#else
  return false;
#endif
}

} // namespace kvcalc::model
