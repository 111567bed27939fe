#!/usr/bin/env bash
# Builds the libFuzzer targets with clang into build/fuzz and runs each for a while
# (docs/reliability.md). Usage: tests/fuzz/run_fuzzers.sh [seconds per target] [target ...]
# Default: 30 seconds, every target. New inputs go to build/fuzz/corpus/<target>, findings
# (crash-, leak-, timeout-, oom- files) to build/fuzz/findings/<target>; the committed corpus
# in tests/fuzz/corpus is only read. Exit status 1 when a target found something.
set -euo pipefail
cd "$(dirname "$0")/../.."

seconds=${1:-30}
shift || true
all_targets=(model_yaml hf_config model_compute gpu_catalog plan plan_evaluation device_profile workload
  trace scheduler
  strings)
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  targets=("${all_targets[@]}")
fi

build=build/fuzz
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER="${CXX:-clang++}" -DKVCALC_FUZZ=ON -DKVCALC_CUDA=OFF >/dev/null
cmake --build "$build" --target "${targets[@]/#/kvcalc_fuzz_}"

# Bounded inputs: 16 KiB holds every bundled file but the GPU catalog, whose entries are alike.
# -fork=1 keeps fuzzing after a finding, so one run reports all of them.
options=(-max_total_time="$seconds" -max_len=16384 -timeout=10 -rss_limit_mb=2048
  -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1)
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1

status=0
summary=()
for target in "${targets[@]}"; do
  corpus=$build/corpus/$target
  findings=$build/findings/$target
  log=$build/logs/$target.log
  mkdir -p "$corpus" "$findings" "$(dirname "$log")"
  echo "== $target: $seconds s"
  "$build/tests/fuzz/kvcalc_fuzz_$target" "${options[@]}" -dict="tests/fuzz/$target.dict" \
    -artifact_prefix="$findings/" "$corpus" "tests/fuzz/corpus/$target" >"$log" 2>&1 || true
  # Fork mode reports progress as "#<executions>: cov: ... corp: <units> ...".
  executions=$(grep -oE '^#[0-9]+:' "$log" | tail -n 1 | tr -d '#:')
  units=$(find "$corpus" -type f | wc -l)
  found=$(find "$findings" -type f | wc -l)
  summary+=("$(printf '%-16s %12s executions %6s corpus units %3s findings' "$target" \
    "${executions:-?}" "$units" "$found")")
  if [ "$found" -ne 0 ]; then
    status=1
    find "$findings" -type f | sed 's/^/   /'
  fi
done
echo "== summary ($seconds s per target; logs in $build/logs)"
printf '%s\n' "${summary[@]}"
exit $status
