#!/usr/bin/env bash
# The GPU checks of kvcalc in one run, for a machine with an NVIDIA GPU and none of the build's
# libraries. Build the bundle first (kernels/cuda/build_device_bundle.sh), then run
#   kernels/cuda/device_check.sh build/device-bundle OUT_DIR
# It runs the device tests, times the absorbed kernels side by side (mma_sync and, on Hopper,
# wgmma), runs compute-sanitizer's memcheck over the MLA kernels when it is there, measures
# the probes and both MLA strategies at the memory-bound (16 heads) and compute-bound
# (128 heads) points, calibrates a roofline with the result, and writes summary.txt,
# bench.txt, measure.json, the device profile (with the efficiency curves its GEMM and memory
# sweeps fitted, and the estimate they give beside the typical profile's) and the logs to OUT_DIR.
set -uo pipefail
bundle=${1:?usage: device_check.sh BUNDLE_DIR OUT_DIR}
out=${2:?usage: device_check.sh BUNDLE_DIR OUT_DIR}
mkdir -p "$out"
kvcalc=$bundle/kvcalc
log=$out/device_check.log
say() { echo "== $*" | tee -a "$log"; }

# cuBLAS is the one CUDA library opened at run time (by soname, when a GPU is measured): take
# the first libcublas.so.13 there is.
if ! ldconfig -p | grep -q 'libcublas.so.13'; then
  lib=$(find /usr/local/cuda/lib64 /usr/local/cuda/targets /usr/lib /opt /usr/local/lib \
          -name 'libcublas.so.13*' 2>/dev/null | head -1)
  [ -n "$lib" ] && export LD_LIBRARY_PATH=$(dirname "$lib")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
say "date $(date -u +%FT%TZ), libcublas from ${LD_LIBRARY_PATH:-the system}"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit \
  --format=csv 2>&1 | tee -a "$log"

status=0
# The wgmma kernel's device tests and bench rows run after everything else of their kind, in
# processes of their own: a fault there cannot cost the other results.
say "device tests"
timeout 120 "$bundle/kvcalc_device_tests" --durations yes "~[wgmma]" 2>&1 |
  tee "$out/device_tests.log" | tail -25
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
say "device tests of the wgmma kernel"
timeout 90 "$bundle/kvcalc_device_tests" --durations yes "[wgmma]" 2>&1 |
  tee "$out/device_tests_wgmma.log" | tail -25
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

say "absorbed kernels side by side (kvcalc_device_bench)"
timeout 180 "$bundle/kvcalc_device_bench" 2>&1 | tee "$out/bench.txt"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1
if grep -q "compute capability 9.0; wgmma kernel not available" "$out/bench.txt"; then
  echo "a Hopper GPU, but the bundle has no sm_90a code: rebuild it with build_device_bundle.sh" |
    tee -a "$log"
  status=1
fi

if command -v compute-sanitizer >/dev/null; then
  say "compute-sanitizer memcheck over the MLA kernels"
  checks="CUDA MLA decode: absorbed and naive match the double reference"
  checks+=",CUDA MLA decode (wgmma): absorbed and naive match the double reference"
  timeout 120 compute-sanitizer --tool memcheck --leak-check full "$bundle/kvcalc_device_tests" \
    "$checks" >"$out/memcheck.log" 2>&1
  rc=$?
  tail -4 "$out/memcheck.log" | tee -a "$log"
  [ "$rc" -eq 0 ] || { echo "memcheck exit $rc" | tee -a "$log"; status=1; }
fi

say "kvcalc measure --backend cuda (issue 5's points)"
timeout 120 "$kvcalc" measure --backend cuda --heads 16,128 --batch 128 --context 4k,32k \
  --profile "$out/profile.yaml" --format json -o "$out/measure.json" 2>&1 | tee -a "$log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

say "the efficiency curves the sweeps fitted (the profile's efficiency section)"
sed -n '/^efficiency:/,/^machine:/p' "$out/profile.yaml" | tee "$out/efficiency.yaml" | head -8
say "the estimate from the measured curves beside the typical profile's (llama-3.1-8b, batch 1 and 64)"
"$kvcalc" roofline llama-3.1-8b --gpu auto --device-profile "$out/profile.yaml" --batch 1,64 \
  --context 4k 2>&1 | tee "$out/estimate_measured.txt" | head -5
"$kvcalc" roofline llama-3.1-8b --gpu h200 --batch 1,64 --context 4k 2>&1 |
  tee "$out/estimate_typical.txt" | head -5

say "kvcalc measure: the absorbed kernel over heads and batch (context 8k)"
timeout 90 "$kvcalc" measure --backend cuda --heads 16,32,64,128 --batch 16,64 --context 8k \
  --format csv -o "$out/sweep.csv" 2>&1 | tee -a "$log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

say "roofline calibrated by the measured profile, and --measure --gpu auto end to end"
"$kvcalc" roofline deepseek-v3 --gpu auto --device-profile "$out/profile.yaml" --tp 8 \
  --batch 32 --context 8k 2>&1 | tee "$out/roofline.txt" | head -12
timeout 60 "$kvcalc" roofline deepseek-v3 --gpu auto --measure --tp 8 --batch 32 --context 8k \
  --format json -o "$out/roofline_measured.json" 2>&1 | tee -a "$log"
[ "${PIPESTATUS[0]}" -eq 0 ] || status=1

say "cuBLAS hidden: commands that measure nothing run, measure --backend cuda says what is missing"
loader=$(readelf -p .interp "$kvcalc" 2>/dev/null | sed -n 's/.*\] *//p' | head -1)
if [ -x "$loader" ]; then
  env -u LD_LIBRARY_PATH "$loader" --inhibit-cache --inhibit-rpath : "$kvcalc" --version 2>&1 |
    tee -a "$log"
  env -u LD_LIBRARY_PATH "$loader" --inhibit-cache --inhibit-rpath : "$kvcalc" measure \
    --backend cuda --quick 2>&1 | tee -a "$log"
  [ "${PIPESTATUS[0]}" -eq 1 ] || status=1
fi

say "summary"
python3 - "$out/measure.json" "$out/sweep.csv" <<'PY' | tee "$out/summary.txt"
import csv, json, sys
m = json.load(open(sys.argv[1]))
p = m["probes"]
bw = p["bandwidth_bytes_per_s"]
gemm = p["flops_per_s"].get("bf16") or 1e-30
print(f"device: {m['device']}  date: {m['date']}")
print(f"bandwidth: read {p['read_bytes_per_s']/1e12:.3f}  copy {p['copy_bytes_per_s']/1e12:.3f}  "
      f"triad {p['triad_bytes_per_s']/1e12:.3f} TB/s; ceiling {bw/1e12:.3f} TB/s = "
      f"{bw/4.8e12:.1%} of the 4.8 TB/s datasheet (target >= 85%)")
print("memory levels: " + ", ".join(
    f"{l['name']} {l['read_bytes_per_s']/1e12:.3f} TB/s ({l['working_set_bytes']/2**20:.0f} MiB array)"
    for l in p["memory_levels"]))
print("GEMM: " + ", ".join(f"{k} {v/1e12:.1f} TFLOP/s" for k, v in p["flops_per_s"].items() if v) +
      f"; FMA fp32 {p['fma_fp32_flops_per_s']/1e12:.1f} TFLOP/s")
for k in m["kernels"]:
    c = k["config"]
    line = (f"{k['name']:20s} h{c['heads']:<4d} b{c['batch']:<4d} t{c['context']:<6d} "
            f"{k['time_s']*1e6:10.1f} us  {k['achieved_bytes_per_s']/1e12:6.3f} TB/s "
            f"({k['achieved_bytes_per_s']/bw:5.1%} of bw)  {k['achieved_flops_per_s']/1e12:7.1f} "
            f"TFLOP/s ({k['achieved_flops_per_s']/gemm:5.1%} of GEMM)  roofline "
            f"{k['roofline_fraction']:.1%}  cos {k['cos_diff']:.1e}")
    print(line)
    ph = k.get("phases_s", {})
    if "attention" in ph:
        # FlashMLA's accounting of the attention kernel alone (its benchmark's FLOP and byte counts), combine included.
        b, h, s, t = c["batch"], c["heads"], c["query"], c["context"]
        core = ph["attention"] + ph.get("combine", 0)
        fl = 2 * s * b * t * h * (576 + 512)
        by = (b * t * 576 + b * s * h * (576 + 512)) * 2
        print(f"{'':20s} attention+combine {core*1e6:9.1f} us: {by/core/1e12:6.3f} TB/s "
              f"({by/core/bw:5.1%} of bw), {fl/core/1e12:6.1f} TFLOP/s ({fl/core/gemm:5.1%} of GEMM)"
              f"  phases: " + ", ".join(f"{n} {v*1e6:.1f}" for n, v in ph.items()))
    elif ph:
        print(f"{'':20s} phases (us): " + ", ".join(f"{n} {v*1e6:.1f}" for n, v in ph.items()))
print("sweep (absorbed, context 8k):")
for r in csv.DictReader(open(sys.argv[2])):
    if r["name"] == "mla_decode.absorbed":
        print(f"  h{r['heads']:>4} b{r['batch']:>4}  {float(r['time_s'])*1e6:9.1f} us  "
              f"{float(r['achieved_bytes_per_s'])/1e12:6.3f} TB/s  "
              f"{float(r['achieved_flops_per_s'])/1e12:6.1f} TFLOP/s")
PY
cat "$out/bench.txt" >>"$out/summary.txt"
say "exit status $status"
exit $status
