#pragma once
// libcurl opened when a model is first fetched from the Hub (private to model): hub.cpp calls
// libcurl's functions by their own names, curl_on_demand.cpp defines them to forward to the
// library, and hub.cpp opens it before its first call so that it can say what to do when it
// cannot. curl_easy_setopt and curl_easy_getinfo are variadic, which a C++ definition cannot
// read after their enum parameter (va_start needs a type that promotion leaves alone), so they
// are reached through typed overloads here instead; called by their own names, they would not
// link.

#include <curl/curl.h>

#include <optional>
#include <string>

namespace kvcalc::model::detail {

/// libcurl's soname (its ABI has been version 4 since 7.16, 2006). It is opened by this name,
/// found where the dynamic loader finds a linked library (LD_LIBRARY_PATH, the loader's cache,
/// the system folders), unless $KVCALC_LIBCURL names another (a soname or a path).
inline constexpr const char* k_curl_soname = "libcurl.so.4";

/// Opens the library and looks up every function kvcalc calls in it, once for the process
/// (thread-safe). nullopt once it is open; else why it cannot be: the loader's reason, or a
/// function the library lacks. While it is not open, the functions fail as libcurl's own do
/// without memory: curl_easy_init and curl_slist_append return null, the rest CURLE_FAILED_INIT.
[[nodiscard]] std::optional<std::string> open_curl();

/// curl_easy_setopt of the library, with the argument of the option's type (<curl/curl.h>,
/// CURLOPTTYPE_*): a long, a string, a pointer to data, a list, a write callback.
CURLcode easy_setopt(CURL* handle, CURLoption option, long value);
CURLcode easy_setopt(CURL* handle, CURLoption option, const char* value);
CURLcode easy_setopt(CURL* handle, CURLoption option, void* value);
CURLcode easy_setopt(CURL* handle, CURLoption option, curl_slist* value);
CURLcode easy_setopt(CURL* handle, CURLoption option, curl_write_callback value);

/// curl_easy_getinfo of the library, for an answer that is a long (CURLINFO_LONG).
CURLcode easy_getinfo(CURL* handle, CURLINFO info, long* value);

} // namespace kvcalc::model::detail
