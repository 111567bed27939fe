# A kvcalc built with CUDA loads nothing of cuBLAS until a GPU is measured, and starts where the
# CUDA libraries cannot be found. They are hidden by running the binary through its dynamic
# loader with the loader's cache, LD_LIBRARY_PATH and the binary's run path ignored
# (`--inhibit-rpath :` names the main program, whose name is empty); the system folders stay, so
# fmt, yaml-cpp and libstdc++ are found as always.
# cmake -DKVCALC=<binary> -DREADELF=<readelf> -P check_cuda_on_demand.cmake

include(${CMAKE_CURRENT_LIST_DIR}/loader.cmake)
set(hidden ${loader} --inhibit-cache --inhibit-rpath : ${KVCALC})
unset(ENV{LD_LIBRARY_PATH})

# Nothing of CUDA is loaded at start-up, even where the libraries are at hand.
set(ENV{LD_DEBUG} files)
run_kvcalc(rc out err ${KVCALC} --version)
unset(ENV{LD_DEBUG})
if(NOT rc EQUAL 0 OR NOT out MATCHES "CUDA support: built in")
  message(FATAL_ERROR "kvcalc --version (${rc}): ${out}${err}")
endif()
if(err MATCHES "file=[^ ]*(cublas|cudart|libcuda)")
  string(REGEX MATCHALL "file=[^ ]*(cublas|cudart|libcuda)[^ ]*" loaded "${err}")
  message(FATAL_ERROR "kvcalc --version loaded CUDA libraries: ${loaded}")
endif()

# With the libraries hidden, commands that measure no GPU answer exactly as they do with them.
foreach(args "--version" "capacity;deepseek-v3;--gpu;h200;--tp;8;--context;128k;--format;csv"
             "roofline;llama-3.1-8b;--gpu;h100;--batch;16;--context;8k;--format;json"
             "measure;--backend;fake;--quick;--format;csv")
  run_kvcalc(rc_seen out_seen err_seen ${KVCALC} ${args})
  run_kvcalc(rc out err ${hidden} ${args})
  if(NOT rc EQUAL rc_seen OR NOT out STREQUAL out_seen OR NOT err STREQUAL err_seen)
    message(FATAL_ERROR "kvcalc ${args} with the CUDA libraries hidden (${rc}): ${out}${err}\n"
                        "differs from the normal run (${rc_seen}): ${out_seen}${err_seen}")
  endif()
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "kvcalc ${args} failed (${rc}): ${err}")
  endif()
endforeach()

# Asked to measure a GPU, it says which library is missing and what to do, with or without a GPU.
run_kvcalc(rc out err ${hidden} measure --backend cuda --quick)
if(NOT rc EQUAL 1 OR NOT err MATCHES "cannot open cuBLAS: libcublas\\.so\\.[0-9]+"
   OR NOT err MATCHES "LD_LIBRARY_PATH" OR NOT err MATCHES "--backend cpu")
  message(FATAL_ERROR "measure --backend cuda with cuBLAS hidden (${rc}): ${out}${err}")
endif()
