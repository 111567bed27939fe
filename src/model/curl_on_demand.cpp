// libcurl opened when a model is first fetched from the Hub, not linked. Linked, libcurl and the
// libraries it needs in turn (TLS, HTTP/2, IDN, SSH, LDAP, Kerberos: some 30 on Debian) are
// mapped at every start of every command, and a kvcalc built with it does not start where it
// is missing, though only a repo id that is not in the HF cache needs it. The functions hub.cpp
// calls are defined here under libcurl's own names, so the compiler checks each definition
// against <curl/curl.h>'s declaration (a changed signature fails to build), and forward to the
// library's, as kernels/cuda/cublas_on_demand.cpp does for cuBLAS; the two variadic ones are
// typed overloads (curl_on_demand.hpp), which call the library's through pointers of the
// declared types.

#include "curl_on_demand.hpp"

#include <curl/curl.h>
#include <dlfcn.h>

#include <cstdlib>
#include <type_traits>

namespace kvcalc::model::detail {

namespace {

/// The library's own definitions of the functions defined below, typed by their declarations
/// in <curl/curl.h>; all null while the library is not open.
struct Library {
  decltype(&::curl_global_init) global_init = nullptr;
  decltype(&::curl_easy_init) easy_init = nullptr;
  decltype(&::curl_easy_setopt) easy_setopt = nullptr;
  decltype(&::curl_easy_perform) easy_perform = nullptr;
  decltype(&::curl_easy_getinfo) easy_getinfo = nullptr;
  decltype(&::curl_easy_strerror) easy_strerror = nullptr;
  decltype(&::curl_easy_cleanup) easy_cleanup = nullptr;
  decltype(&::curl_slist_append) slist_append = nullptr;
  decltype(&::curl_slist_free_all) slist_free_all = nullptr;
  std::optional<std::string> failure;
};

Library open_library() {
  const char* chosen = std::getenv("KVCALC_LIBCURL");
  bool given = chosen != nullptr && *chosen != '\0';
  std::string name = given ? chosen : k_curl_soname;
  std::string from = given ? " (KVCALC_LIBCURL)" : "";
  Library l;
  void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* reason = dlerror();
    l.failure = (reason != nullptr ? std::string(reason) : "cannot open " + name) + from;
    return l;
  }
  auto find = [&](auto& function, const char* symbol) {
    void* found = dlsym(handle, symbol);
    if (found == nullptr && !l.failure) {
      l.failure = name + from + " has no " + symbol +
                  ": it is not libcurl, or one older than kvcalc was built with "
                  "(" LIBCURL_VERSION ")";
    }
    function = reinterpret_cast<std::remove_reference_t<decltype(function)>>(found);
  };
  find(l.global_init, "curl_global_init");
  find(l.easy_init, "curl_easy_init");
  find(l.easy_setopt, "curl_easy_setopt");
  find(l.easy_perform, "curl_easy_perform");
  find(l.easy_getinfo, "curl_easy_getinfo");
  find(l.easy_strerror, "curl_easy_strerror");
  find(l.easy_cleanup, "curl_easy_cleanup");
  find(l.slist_append, "curl_slist_append");
  find(l.slist_free_all, "curl_slist_free_all");
  if (l.failure) {
    // All or nothing: a half-bound library is not called at all.
    Library none;
    none.failure = l.failure;
    return none;
  }
  return l;
}

const Library& library() {
  static const Library opened = open_library();
  return opened;
}

template <class Value> CURLcode set_option(CURL* handle, CURLoption option, Value value) {
  const Library& l = library();
  return l.easy_setopt != nullptr ? l.easy_setopt(handle, option, value) : CURLE_FAILED_INIT;
}

} // namespace

std::optional<std::string> open_curl() {
  return library().failure;
}

CURLcode easy_setopt(CURL* handle, CURLoption option, long value) {
  return set_option(handle, option, value);
}

CURLcode easy_setopt(CURL* handle, CURLoption option, const char* value) {
  return set_option(handle, option, value);
}

CURLcode easy_setopt(CURL* handle, CURLoption option, void* value) {
  return set_option(handle, option, value);
}

CURLcode easy_setopt(CURL* handle, CURLoption option, curl_slist* value) {
  return set_option(handle, option, value);
}

CURLcode easy_setopt(CURL* handle, CURLoption option, curl_write_callback value) {
  return set_option(handle, option, value);
}

CURLcode easy_getinfo(CURL* handle, CURLINFO info, long* value) {
  const Library& l = library();
  return l.easy_getinfo != nullptr ? l.easy_getinfo(handle, info, value) : CURLE_FAILED_INIT;
}

} // namespace kvcalc::model::detail

using kvcalc::model::detail::library;

// The definitions match <curl/curl.h>'s declarations, so a changed signature fails to compile.
extern "C" {

CURLcode curl_global_init(long flags) {
  const auto& l = library();
  return l.global_init != nullptr ? l.global_init(flags) : CURLE_FAILED_INIT;
}

CURL* curl_easy_init(void) {
  const auto& l = library();
  return l.easy_init != nullptr ? l.easy_init() : nullptr;
}

CURLcode curl_easy_perform(CURL* handle) {
  const auto& l = library();
  return l.easy_perform != nullptr ? l.easy_perform(handle) : CURLE_FAILED_INIT;
}

const char* curl_easy_strerror(CURLcode code) {
  const auto& l = library();
  return l.easy_strerror != nullptr ? l.easy_strerror(code) : "libcurl cannot be opened";
}

void curl_easy_cleanup(CURL* handle) {
  const auto& l = library();
  if (l.easy_cleanup != nullptr) {
    l.easy_cleanup(handle);
  }
}

curl_slist* curl_slist_append(curl_slist* list, const char* text) {
  const auto& l = library();
  return l.slist_append != nullptr ? l.slist_append(list, text) : nullptr;
}

void curl_slist_free_all(curl_slist* list) {
  const auto& l = library();
  if (l.slist_free_all != nullptr) {
    l.slist_free_all(list);
  }
}

} // extern "C"
