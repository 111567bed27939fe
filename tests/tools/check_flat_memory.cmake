# CTest cli.flat_memory: a sweep's results stream, so its peak memory does not grow with its
# length. Runs a roofline sweep of SMALL scenarios and one ten times longer, in each streamed
# format, and fails when the longer one's peak exceeds the shorter's by more than a noise margin
# (docs/performance.md, "Memory").
# Inputs: -DKVCALC=<kvcalc binary> -DPEAK=<peak_memory binary>

function(peak_of out_var format contexts)
  set(list "")
  foreach(i RANGE 1 ${contexts})
    math(EXPR tokens "${i} * 1024")
    list(APPEND list ${tokens})
  endforeach()
  list(JOIN list "," context_arg)
  execute_process(
    COMMAND ${PEAK} ${KVCALC} roofline deepseek-v3 --gpu h200 --gpus 8 --tp 8
            --batch 1,2,4,8,16,32,64,128,256,512 --context ${context_arg} --format ${format}
    OUTPUT_VARIABLE result RESULT_VARIABLE status)
  if(NOT status EQUAL 0 OR NOT result MATCHES "peak_kib=([0-9]+) exit=0")
    message(FATAL_ERROR "the ${format} sweep of ${contexts} contexts did not run: ${result}")
  endif()
  set(${out_var} ${CMAKE_MATCH_1} PARENT_SCOPE)
endfunction()

foreach(format csv json)
  peak_of(small ${format} 100)  # 1,000 scenarios
  peak_of(large ${format} 1000) # 10,000 scenarios
  # A tenth more, and 2 MiB for the allocator's arenas: a sweep that kept its scenarios grows by
  # tens of kilobytes a scenario, hundreds of megabytes here.
  math(EXPR limit "${small} + ${small} / 10 + 2048")
  message(STATUS "${format}: 1,000 scenarios ${small} KiB, 10,000 scenarios ${large} KiB")
  if(large GREATER limit)
    message(FATAL_ERROR "${format}: the 10,000-scenario sweep peaked at ${large} KiB, past "
                        "${limit} KiB (the 1,000-scenario sweep's ${small} KiB and a margin): "
                        "memory grows with the sweep")
  endif()
endforeach()
