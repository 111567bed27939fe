# `cmake --install` into a fresh prefix, then the installed kvcalc run from outside the source
# tree: bundled data, man page, completion and docs must all be there.
# cmake -DBUILD_DIR=<build> -DPREFIX=<empty dir> -P check_install.cmake
file(REMOVE_RECURSE ${PREFIX})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${PREFIX}
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed (${rc})")
endif()
foreach(f bin/kvcalc share/man/man1/kvcalc.1 share/bash-completion/completions/kvcalc
          share/zsh/site-functions/_kvcalc share/fish/vendor_completions.d/kvcalc.fish
          share/kvcalc/models/deepseek-v3.yaml share/doc/kvcalc/cli.md)
  if(NOT EXISTS ${PREFIX}/${f})
    message(FATAL_ERROR "not installed: ${f}")
  endif()
endforeach()
set(away ${PREFIX}/elsewhere)
file(MAKE_DIRECTORY ${away})
execute_process(COMMAND ${PREFIX}/bin/kvcalc footprint deepseek-v3 --context 4k --format csv
                WORKING_DIRECTORY ${away} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "deepseek-v3,mla,61,latent bf16,1152,70272,0,4096,287834112")
  message(FATAL_ERROR "the installed kvcalc did not find its bundled model (${rc}): ${out}${err}")
endif()
execute_process(COMMAND ${PREFIX}/bin/kvcalc --version OUTPUT_VARIABLE version RESULT_VARIABLE rc)
if(NOT rc EQUAL 0 OR NOT version MATCHES "^kvcalc [0-9.]+ \\(CUDA support: (built in|not built)\\)")
  message(FATAL_ERROR "kvcalc --version: ${version}")
endif()
find_program(BASH bash)
if(BASH)
  execute_process(COMMAND ${BASH} -n ${PREFIX}/share/bash-completion/completions/kvcalc
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the bash completion does not parse")
  endif()
endif()
file(REMOVE_RECURSE ${PREFIX})
