// Models by HuggingFace repo id: the local HF cache, and the Hub's HTTP API served by a small
// server this test starts on 127.0.0.1.

#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include <kvcalc/core/error.hpp>
#include <kvcalc/model/hub.hpp>
#include <kvcalc/model/loader.hpp>

using namespace kvcalc;
using namespace kvcalc::model;

namespace {

std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

/// An HTTP/1.1 server on 127.0.0.1 that answers GETs from a table of path → (status, body),
/// one connection at a time, and remembers the requests' paths and Authorization headers.
class LocalHub {
public:
  explicit LocalHub(std::map<std::string, std::pair<int, std::string>> routes)
      : m_routes(std::move(routes)) {
    m_socket = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(m_socket >= 0);
    int yes = 1;
    ::setsockopt(m_socket, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    REQUIRE(::bind(m_socket, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    socklen_t len = sizeof addr;
    REQUIRE(::getsockname(m_socket, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    m_port = ntohs(addr.sin_port);
    REQUIRE(::listen(m_socket, 8) == 0);
    m_thread = std::thread([this] { serve(); });
  }
  ~LocalHub() {
    m_stop = true;
    ::shutdown(m_socket, SHUT_RDWR);
    ::close(m_socket);
    m_thread.join();
  }
  LocalHub(const LocalHub&) = delete;
  LocalHub& operator=(const LocalHub&) = delete;

  [[nodiscard]] std::string endpoint() const {
    return "http://127.0.0.1:" + std::to_string(m_port);
  }
  [[nodiscard]] std::vector<std::string> paths() const {
    std::lock_guard lock(m_mutex);
    return m_paths;
  }
  [[nodiscard]] std::vector<std::string> authorizations() const {
    std::lock_guard lock(m_mutex);
    return m_auth;
  }

private:
  void serve() {
    while (!m_stop) {
      int client = ::accept(m_socket, nullptr, nullptr);
      if (client < 0) {
        return;
      }
      std::string request;
      char buf[4096];
      while (request.find("\r\n\r\n") == std::string::npos) {
        ssize_t n = ::recv(client, buf, sizeof buf, 0);
        if (n <= 0) {
          break;
        }
        request.append(buf, static_cast<std::size_t>(n));
      }
      std::istringstream lines(request);
      std::string method;
      std::string path;
      lines >> method >> path;
      std::string auth;
      for (std::string line; std::getline(lines, line);) {
        if (line.rfind("Authorization: ", 0) == 0) {
          auth = line.substr(15, line.find('\r') - 15);
        }
      }
      {
        std::lock_guard lock(m_mutex);
        m_paths.push_back(path);
        m_auth.push_back(auth);
      }
      auto it = m_routes.find(path);
      int status = it == m_routes.end() ? 404 : it->second.first;
      std::string body = it == m_routes.end() ? "Entry not found" : it->second.second;
      std::string reply = "HTTP/1.1 " + std::to_string(status) +
                          " X\r\nContent-Length: " + std::to_string(body.size()) +
                          "\r\nConnection: close\r\n\r\n" + body;
      ::send(client, reply.data(), reply.size(), MSG_NOSIGNAL);
      ::close(client);
    }
  }

  std::map<std::string, std::pair<int, std::string>> m_routes;
  int m_socket = -1;
  int m_port = 0;
  std::atomic<bool> m_stop{false};
  std::thread m_thread;
  mutable std::mutex m_mutex;
  std::vector<std::string> m_paths;
  std::vector<std::string> m_auth;
};

/// A fresh HF home with an empty hub cache; the Hub at `endpoint`.
std::filesystem::path fresh_home(const std::string& name, const std::string& endpoint) {
  std::filesystem::path home = std::filesystem::temp_directory_path() /
                               ("kvcalc-hub-" + name + "-" + std::to_string(::getpid()));
  std::filesystem::remove_all(home);
  std::filesystem::create_directories(home / "hub");
  ::setenv("HF_HOME", home.c_str(), 1);
  ::unsetenv("HF_HUB_CACHE");
  ::unsetenv("HF_HUB_OFFLINE");
  ::unsetenv("TRANSFORMERS_OFFLINE");
  ::unsetenv("HF_TOKEN");
  ::setenv("HF_ENDPOINT", endpoint.c_str(), 1);
  ::setenv("no_proxy", "127.0.0.1,localhost", 1);
  ::setenv("NO_PROXY", "127.0.0.1,localhost", 1);
  return home;
}

const std::string k_llama =
    slurp(std::filesystem::path(KVCALC_SOURCE_DIR) / "tests/data/hf/llama-3.1-8b.json");

} // namespace

TEST_CASE("a repo id is read from the Hub over HTTP, with the token", "[hub]") {
  if (!hub_over_http()) {
    WARN("built without libcurl: the Hub is not fetched (skipped)");
    return;
  }
  LocalHub hub({{"/acme/Tiny-Llama/resolve/main/config.json", {200, k_llama}}});
  std::filesystem::path home = fresh_home("http", hub.endpoint());
  ::setenv("HF_TOKEN", "hf_secret", 1);
  Diagnostics d;
  Model m = load_model("acme/Tiny-Llama", d);
  CHECK(m.name == "tiny-llama");
  CHECK(m.layers == 32);
  CHECK(m.attention.kv_heads == 8);
  std::vector<std::string> paths = hub.paths();
  REQUIRE(paths.size() == 2); // config.json, then the ModelOpt file it may have beside it
  CHECK(paths[0] == "/acme/Tiny-Llama/resolve/main/config.json");
  CHECK(paths[1] == "/acme/Tiny-Llama/resolve/main/hf_quant_config.json");
  CHECK(hub.authorizations()[0] == "Bearer hf_secret");
  std::filesystem::remove_all(home);
}

TEST_CASE("a repo id in the HF cache is read from its snapshot, without the network", "[hub]") {
  LocalHub hub({});
  std::filesystem::path home = fresh_home("cache", hub.endpoint());
  std::filesystem::path repo = home / "hub" / "models--meta-llama--Llama-3.1-8B";
  std::filesystem::create_directories(repo / "refs");
  std::filesystem::create_directories(repo / "snapshots" / "0e9e39f2");
  std::ofstream(repo / "refs" / "main") << "0e9e39f2\n";
  std::ofstream(repo / "snapshots" / "0e9e39f2" / "config.json") << k_llama;
  Diagnostics d;
  Model m = load_model("meta-llama/Llama-3.1-8B", d);
  CHECK(m.name == "llama-3.1-8b"); // the repo's, not the commit's
  CHECK(hub.paths().empty());
  // The snapshot folder itself is a MODEL too.
  Model same = load_model((repo / "snapshots" / "0e9e39f2").string(), d);
  CHECK(same.name == "llama-3.1-8b");
  // refs/main names a commit, never a path.
  std::ofstream(repo / "refs" / "main") << "..\n";
  CHECK_FALSE(cached_snapshot("meta-llama/Llama-3.1-8B"));
  std::ofstream(repo / "refs" / "main") << "0e9e39f2\t\n";
  CHECK(cached_snapshot("meta-llama/Llama-3.1-8B"));
  // HF_HUB_CACHE wins over HF_HOME.
  ::setenv("HF_HUB_CACHE", (home / "elsewhere").c_str(), 1);
  CHECK_FALSE(cached_snapshot("meta-llama/Llama-3.1-8B"));
  std::filesystem::remove_all(home);
}

TEST_CASE("a cached snapshot without hf_quant_config.json says so unless the cache knows",
          "[hub][quantization]") {
  LocalHub hub({});
  std::filesystem::path home = fresh_home("modelopt", hub.endpoint());
  std::filesystem::path fixture =
      std::filesystem::path(KVCALC_SOURCE_DIR) / "tests/data/hf-quant/llama-3.1-70b-modelopt-fp8";
  std::filesystem::path repo = home / "hub" / "models--nvidia--Llama-3.1-70B-Instruct-FP8";
  std::filesystem::path snapshot = repo / "snapshots" / "5b1f2a";
  std::filesystem::create_directories(repo / "refs");
  std::filesystem::create_directories(snapshot);
  std::ofstream(repo / "refs" / "main") << "5b1f2a\n";
  std::filesystem::copy_file(fixture / "config.json", snapshot / "config.json");
  auto unknown = [](const Diagnostics& d) {
    return std::count_if(d.warnings.begin(), d.warnings.end(), [](const std::string& w) {
      return w.find("hf_quant_config.json") != std::string::npos &&
             w.find("hf download nvidia/Llama-3.1-70B-Instruct-FP8 hf_quant_config.json") !=
                 std::string::npos;
    });
  };
  SECTION("config.json alone: the weights are the config's dtype, and a warning says why") {
    Diagnostics d;
    Model m = load_model("nvidia/Llama-3.1-70B-Instruct-FP8", d);
    CHECK(m.quantization.empty());
    CHECK(unknown(d) == 1);
    Diagnostics by_folder; // the snapshot folder given as MODEL is the same case
    (void)load_model(snapshot.string() + "/", by_folder);
    CHECK(unknown(by_folder) == 1);
    CHECK(hub.paths().empty()); // the cache is read without the network
  }
  SECTION("the Hub said it has none (.no_exist), or the weights are there: no warning") {
    std::filesystem::create_directories(repo / ".no_exist" / "5b1f2a");
    std::ofstream(repo / ".no_exist" / "5b1f2a" / "hf_quant_config.json");
    Diagnostics d;
    CHECK(load_model("nvidia/Llama-3.1-70B-Instruct-FP8", d).quantization.empty());
    CHECK(unknown(d) == 0);
    std::filesystem::remove_all(repo / ".no_exist");
    std::ofstream(snapshot / "model-00001-of-00030.safetensors");
    Diagnostics whole;
    CHECK(load_model("nvidia/Llama-3.1-70B-Instruct-FP8", whole).quantization.empty());
    CHECK(unknown(whole) == 0);
  }
  SECTION("hf_quant_config.json in the snapshot is read") {
    std::filesystem::copy_file(fixture / "hf_quant_config.json", snapshot / "hf_quant_config.json");
    Diagnostics d;
    CHECK(load_model("nvidia/Llama-3.1-70B-Instruct-FP8", d).quantization == "modelopt");
    CHECK(unknown(d) == 0);
  }
  std::filesystem::remove_all(home);
}

TEST_CASE("the Hub's refusals and offline mode are errors that say what to do", "[hub]") {
  if (!hub_over_http()) {
    WARN("built without libcurl: the Hub is not fetched (skipped)");
    return;
  }
  LocalHub hub({{"/acme/gated/resolve/main/config.json", {401, "Unauthorized"}}});
  std::filesystem::path home = fresh_home("errors", hub.endpoint());
  Diagnostics d;
  CHECK_THROWS_WITH(load_model("acme/gated", d), Catch::Contains("set HF_TOKEN"));
  CHECK_THROWS_WITH(load_model("acme/missing", d), Catch::Contains("HTTP 404: no such repo"));
  ::setenv("HF_HUB_OFFLINE", "1", 1);
  std::size_t asked = hub.paths().size();
  CHECK_THROWS_WITH(load_model("acme/missing", d), Catch::Contains("HF_HUB_OFFLINE is set"));
  CHECK(hub.paths().size() == asked); // offline asks nothing
  ::unsetenv("HF_HUB_OFFLINE");
  // Nobody listening: a network error, not a crash.
  ::setenv("HF_ENDPOINT", "http://127.0.0.1:1", 1);
  CHECK_THROWS_AS(load_model("acme/anything", d), Error);
  std::filesystem::remove_all(home);
}

TEST_CASE("a folder is a model when it holds a config.json", "[hub]") {
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("kvcalc-folder-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "Llama-3.3-70B");
  Diagnostics d;
  CHECK_THROWS_WITH(load_model((dir / "Llama-3.3-70B").string(), d),
                    Catch::Contains("a folder without a config.json"));
  std::ofstream(dir / "Llama-3.3-70B" / "config.json") << k_llama;
  CHECK(load_model((dir / "Llama-3.3-70B").string(), d).name == "llama-3.3-70b");
  CHECK(looks_like_repo_id("Qwen/Qwen3-32B"));
  CHECK_FALSE(looks_like_repo_id("models/qwen3-32b.yaml"));
  CHECK_FALSE(looks_like_repo_id("a/b/c"));
  CHECK_FALSE(looks_like_repo_id("llama-3.1-8b"));
  CHECK_FALSE(looks_like_repo_id("zz/.."));
  CHECK_FALSE(looks_like_repo_id("owner/-name"));
  CHECK_FALSE(looks_like_repo_id("a--b/name"));
  std::filesystem::remove_all(dir);
}
