#!/usr/bin/env bash
# `kvcalc measure` on this machine's CPU, round after round, alternating `--quick` and the
# default shapes, each run against the ceilings probed in that same run (docs/performance.md,
# "`kvcalc measure` on the CPU"). Prints every run's memory levels and each kernel's level,
# bound, fraction of its bound and naive:absorbed ratio error, then the ranges over all runs
# against the acceptance: every kernel within 60–110% of its bound, every predicted
# naive:absorbed ratio within 30% of the measured one. Beside the bound, where memory and
# compute overlap completely, each kernel's fraction of the serial estimate, where they do not
# overlap at all (memory time + compute time): a kernel between the two shows how much of its
# memory traffic its core hides.
# Usage: tests/bench/measure_rounds.sh [rounds (default 10)] [kvcalc binary]
set -euo pipefail
cd "$(dirname "$0")/../.."

rounds=${1:-10}
kvcalc=${2:-build/dev/src/kvcalc}
if [ ! -x "$kvcalc" ]; then
  echo "measure_rounds.sh: no kvcalc at $kvcalc; build it, or name it as the second argument" >&2
  exit 2
fi
if ! command -v python3 >/dev/null; then
  echo "measure_rounds.sh: needs python3 to read measure's JSON" >&2
  exit 2
fi

runs=$(mktemp -d)
trap 'rm -rf "$runs"' EXIT
for ((round = 1; round <= rounds; round++)); do
  for mode in quick default; do
    flags=()
    [ "$mode" = quick ] && flags=(--quick)
    "$kvcalc" measure --backend cpu "${flags[@]}" --format json \
      >"$runs/$(printf '%02d' "$round")-$mode.json" 2>/dev/null
  done
done

python3 - "$runs" <<'EOF'
import glob, json, os, sys

def rate(v):
    return f"{v / 1e9:.1f}"

fractions, ratio_errors, serials = [], [], []
print("round mode     read GB/s; GEMM, absorbed page GFLOP/s                          kernel                     in   bound    of bound  of serial  ratio error")
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    run = json.load(open(path))
    name = os.path.basename(path)[:-5]
    round_, mode = name.split("-")
    probes = run["probes"]
    levels = " ".join(f"{l['name']} {rate(l['read_bytes_per_s'])}" for l in probes["memory_levels"])
    levels += f", GEMM {rate(probes['flops_per_s']['fp32'])}"
    pages = [(key.split("_")[2], figure["median"]) for key, figure in probes["spread"].items()
             if key.startswith("absorbed_page_")]
    if pages:
        levels += ", page " + " ".join(f"{rows}r {rate(v)}" for rows, v in pages)
    kernels = run["kernels"]
    for i, k in enumerate(kernels):
        c = k["config"]
        label = f"{k['name'].split('.')[1]:8} h{c['heads']} b{c['batch']} t{c['context']}"
        error = ""
        if k["name"].endswith("naive"):
            a = kernels[i - 1]
            measured = k["time_s"] / a["time_s"]
            predicted = k["predicted_time_s"] / a["predicted_time_s"]
            ratio_errors.append(measured / predicted - 1)
            error = f"{(measured / predicted - 1) * 100:+.0f}%"
        fractions.append((k["roofline_fraction"], label, mode))
        serial = (k["memory_time_s"] + k["compute_time_s"]) / k["time_s"]
        serials.append((serial, label, mode))
        print(f"{round_:>5} {mode:8} {levels:64} {label:26} {k['memory_level']:4} {k['bound']:8} "
              f"{k['roofline_fraction'] * 100:7.1f}%  {serial * 100:8.1f}%  {error}")
        levels = ""

inside = sum(1 for f, _, _ in fractions if 0.6 <= f <= 1.1)
print(f"\n{len(fractions)} kernel runs: {inside} within 60-110% of their bound "
      f"(range {min(f for f, _, _ in fractions) * 100:.1f}% to {max(f for f, _, _ in fractions) * 100:.1f}%)")
print("  mode     kernel                     of bound           of serial")
for mode in ("quick", "default"):
    for label in sorted({l for _, l, m in fractions if m == mode}):
        fs = [f for f, l, m in fractions if l == label and m == mode]
        ss = [f for f, l, m in serials if l == label and m == mode]
        print(f"  {mode:8} {label:26} {min(fs) * 100:5.1f}% to {max(fs) * 100:5.1f}%  "
              f"{min(ss) * 100:5.1f}% to {max(ss) * 100:5.1f}%")
close = sum(1 for e in ratio_errors if abs(e) <= 0.3)
print(f"{len(ratio_errors)} naive:absorbed ratios: {close} within 30% of the prediction "
      f"(range {min(ratio_errors) * 100:+.0f}% to {max(ratio_errors) * 100:+.0f}%)")
EOF
