# What the on-demand checks (check_cuda_on_demand.cmake, check_curl_on_demand.cmake) share:
# running kvcalc and keeping all it said, and the dynamic loader of the binary (`loader`), which
# lists the libraries it needs and loads them by the rules a check sets.
# Include with KVCALC and READELF set.

function(run_kvcalc out_rc out_stdout out_stderr)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE stdout ERROR_VARIABLE stderr)
  set(${out_rc} "${rc}" PARENT_SCOPE)
  set(${out_stdout} "${stdout}" PARENT_SCOPE)
  set(${out_stderr} "${stderr}" PARENT_SCOPE)
endfunction()

execute_process(COMMAND ${READELF} -p .interp ${KVCALC} OUTPUT_VARIABLE interp RESULT_VARIABLE rc)
string(REGEX MATCH "/[^ \n]+" loader "${interp}")
if(NOT rc EQUAL 0 OR NOT EXISTS "${loader}")
  message(FATAL_ERROR "cannot find the dynamic loader of ${KVCALC}: ${interp}")
endif()
