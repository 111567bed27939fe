# kvcalc loads nothing of libcurl until a model is downloaded from the Hub, and every command
# that downloads nothing runs where libcurl cannot be opened. The dynamic loader lists the
# libraries the binary needs (`ld.so --list`, what ldd prints) and, with LD_DEBUG=files, those a
# run loads. libcurl is a system library, which no loader option hides, so KVCALC_LIBCURL names
# one that cannot be opened instead (docs/model-format.md, "From the Hub"). The Hub is
# http://127.0.0.1:1, where nobody listens: a download reaches libcurl and fails there.
# cmake -DKVCALC=<binary> -DREADELF=<readelf> -DHUB=<ON|OFF> -DSOURCE_DIR=<repo>
#       -DWORK_DIR=<scratch folder> -P check_curl_on_demand.cmake

include(${CMAKE_CURRENT_LIST_DIR}/loader.cmake)

# libcurl is none of the libraries the binary needs, directly or through another.
execute_process(COMMAND ${loader} --list ${KVCALC} OUTPUT_VARIABLE needed RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR needed MATCHES "libcurl")
  message(FATAL_ERROR "${KVCALC} needs libcurl at start-up (${rc}):\n${needed}")
endif()

# An HF cache holding one repo, acme/Tiny-Llama (Llama-3.1-8B's config.json); any other repo id
# is a download.
set(home ${WORK_DIR}/hf)
set(repo ${home}/hub/models--acme--Tiny-Llama)
file(REMOVE_RECURSE ${WORK_DIR})
file(WRITE ${repo}/refs/main "0e9e39f2\n")
configure_file(${SOURCE_DIR}/tests/data/hf/llama-3.1-8b.json ${repo}/snapshots/0e9e39f2/config.json
               COPYONLY)
set(ENV{HF_HOME} ${home})
set(ENV{HF_ENDPOINT} http://127.0.0.1:1)
set(ENV{no_proxy} 127.0.0.1,localhost)
set(ENV{NO_PROXY} 127.0.0.1,localhost)
foreach(name HF_HUB_CACHE HF_HUB_OFFLINE TRANSFORMERS_OFFLINE HF_TOKEN KVCALC_LIBCURL LD_DEBUG)
  unset(ENV{${name}})
endforeach()
set(missing ${WORK_DIR}/missing/libcurl.so.4)

# Commands that download nothing load no libcurl, and answer the same where it cannot be opened:
# a bundled model, a repo id in the HF cache, a config.json.
foreach(args "--version" "capacity;llama-3.1-8b;--gpu;h100"
             "capacity;acme/Tiny-Llama;--gpu;h100;--context;32k;--format;csv"
             "footprint;${SOURCE_DIR}/tests/data/hf/llama-3.1-8b.json;--context;128k;--format;json")
  set(ENV{LD_DEBUG} files)
  run_kvcalc(rc out err ${KVCALC} ${args})
  unset(ENV{LD_DEBUG})
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "kvcalc ${args} failed (${rc}): ${out}${err}")
  endif()
  if(err MATCHES "file=[^ ]*libcurl")
    string(REGEX MATCHALL "file=[^ ]*libcurl[^ ]*" loaded "${err}")
    message(FATAL_ERROR "kvcalc ${args} loaded libcurl: ${loaded}")
  endif()
  run_kvcalc(rc_seen out_seen err_seen ${KVCALC} ${args})
  set(ENV{KVCALC_LIBCURL} ${missing})
  run_kvcalc(rc out err ${KVCALC} ${args})
  unset(ENV{KVCALC_LIBCURL})
  if(NOT rc EQUAL rc_seen OR NOT out STREQUAL out_seen OR NOT err STREQUAL err_seen)
    message(FATAL_ERROR "kvcalc ${args} without libcurl (${rc}): ${out}${err}\n"
                        "differs from the normal run (${rc_seen}): ${out_seen}${err_seen}")
  endif()
endforeach()

set(download capacity acme/Not-Cached --gpu h100)
set(url "http://127\\.0\\.0\\.1:1/acme/Not-Cached/resolve/main/config\\.json")
if(NOT HUB)
  # Built without the Hub: a download is an error that says to give the config.json.
  run_kvcalc(rc out err ${KVCALC} ${download})
  if(NOT rc EQUAL 1 OR NOT err MATCHES "built without the Hub \\(KVCALC_HUB\\)"
     OR NOT err MATCHES "huggingface-cli download acme/Not-Cached config\\.json")
    message(FATAL_ERROR "a download, built without the Hub (${rc}): ${out}${err}")
  endif()
  return()
endif()

# A download where libcurl cannot be opened is an error (exit 1) that names it, how to install
# it, and the config.json to give instead.
set(ENV{KVCALC_LIBCURL} ${missing})
run_kvcalc(rc out err ${KVCALC} ${download})
if(NOT rc EQUAL 1 OR NOT err MATCHES "cannot fetch ${url}: [^\n]*missing/libcurl\\.so\\.4"
   OR NOT err MATCHES "\\(KVCALC_LIBCURL\\)" OR NOT err MATCHES "downloads with libcurl\\.so\\.4"
   OR NOT err MATCHES "apt install libcurl4"
   OR NOT err MATCHES "huggingface-cli download acme/Not-Cached config\\.json"
   OR NOT err MATCHES "give its folder, or the file, as the model")
  message(FATAL_ERROR "a download with libcurl missing (${rc}): ${out}${err}")
endif()
# A library that is not libcurl is refused before any of it is called.
set(ENV{KVCALC_LIBCURL} libc.so.6)
run_kvcalc(rc out err ${KVCALC} ${download})
unset(ENV{KVCALC_LIBCURL})
if(NOT rc EQUAL 1 OR NOT err MATCHES "libc\\.so\\.6 \\(KVCALC_LIBCURL\\) has no curl_[a-z_]+: it is not libcurl")
  message(FATAL_ERROR "a download with libc as libcurl (${rc}): ${out}${err}")
endif()

# With libcurl at hand, a download opens it, and libcurl's own error comes back through it.
set(ENV{LD_DEBUG} files)
run_kvcalc(rc out err ${KVCALC} ${download})
unset(ENV{LD_DEBUG})
if(NOT rc EQUAL 1 OR NOT err MATCHES "file=[^ ]*libcurl\\.so\\.4"
   OR NOT err MATCHES "cannot fetch ${url}: Couldn't connect to server")
  message(FATAL_ERROR "a download with libcurl (${rc}): ${out}${err}")
endif()
file(REMOVE_RECURSE ${WORK_DIR})
