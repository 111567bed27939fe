# CTest cli.flat_memory: a sweep's results stream, so its peak memory does not grow with its
# length. Runs a roofline sweep of 1,000 scenarios and one ten times longer, in each streamed
# format (and one whose every scenario warns), and fails when the longer one's peak exceeds the
# shorter's by more than a noise margin (docs/performance.md, "Results that stream").
# Inputs: -DKVCALC=<kvcalc binary> -DPEAK=<peak_memory binary>

function(peak_of out_var format contexts tp)
  set(list "")
  foreach(i RANGE 1 ${contexts})
    math(EXPR tokens "${i} * 1024")
    list(APPEND list ${tokens})
  endforeach()
  list(JOIN list "," context_arg)
  execute_process(
    COMMAND ${PEAK} ${KVCALC} roofline deepseek-v3 --gpu h200 --gpus ${tp} --tp ${tp}
            --batch 1,2,4,8,16,32,64,128,256,512 --context ${context_arg} --format ${format}
    OUTPUT_VARIABLE result RESULT_VARIABLE status)
  if(NOT status EQUAL 0 OR NOT result MATCHES "peak_kib=([0-9]+) exit=[04]")
    message(FATAL_ERROR "the ${format} sweep of ${contexts} contexts did not run: ${result}")
  endif()
  set(${out_var} ${CMAKE_MATCH_1} PARENT_SCOPE)
endfunction()

# tp 8 fits; at tp 1 the weights do not, and every scenario repeats that warning.
foreach(run "csv;8" "json;8" "csv;1")
  list(GET run 0 format)
  list(GET run 1 tp)
  peak_of(small ${format} 100 ${tp})  # 1,000 scenarios
  peak_of(large ${format} 1000 ${tp}) # 10,000 scenarios
  # A twentieth more, and 512 KiB for the allocator's arenas: a sweep that kept a few dozen
  # bytes a scenario would pass that by a third.
  math(EXPR limit "${small} + ${small} / 20 + 512")
  message(STATUS "${format} at tp ${tp}: 1,000 scenarios ${small} KiB, 10,000 scenarios "
                 "${large} KiB")
  if(large GREATER limit)
    message(FATAL_ERROR "${format} at tp ${tp}: the 10,000-scenario sweep peaked at ${large} "
                        "KiB, past ${limit} KiB (the 1,000-scenario sweep's ${small} KiB and a "
                        "margin): memory grows with the sweep")
  endif()
endforeach()
