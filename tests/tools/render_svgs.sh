#!/usr/bin/env bash
# Every kind of SVG kvcalc draws, written and rendered to PNG in headless Chromium, for people to
# look at as a user would: tests/tools/render_svgs.sh [KVCALC [OUT_DIR]]. Needs Debian's
# `chromium`; writes OUT_DIR/<kind>.svg and OUT_DIR/<kind>.png and lists them.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
kvcalc=${1:-$root/build/dev/src/kvcalc}
out=${2:-$root/build/svg-renders}
mkdir -p "$out"
command -v chromium >/dev/null || { echo "render_svgs: needs chromium (apt-get install chromium)" >&2; exit 77; }
profile=$root/tests/data/profiles/h200-example.yaml

plot() { # plot KIND ARGS...: kvcalc ARGS --plot OUT/KIND.svg
  local kind=$1
  shift
  "$kvcalc" "$@" --plot "$out/$kind.svg" >/dev/null 2>"$out/$kind.log" || {
    local rc=$?
    [ "$rc" = 4 ] || { cat "$out/$kind.log" >&2; exit 1; }
  }
}

plot roofline_one roofline deepseek-v3 --gpu h200 --tp 8 --batch 128
plot roofline_mla_modes roofline deepseek-v3 --gpu h200 --tp 8 --batch 128 --mla absorbed,naive
plot roofline_gqa roofline llama-3.1-70b --gpu h200 --tp 4 --batch 64 --context 8k
plot roofline_sweep roofline llama-3.1-8b deepseek-v3 --gpu h200 --tp 8 --batch 1,16,128 --context 4k,32k
plot roofline_profile roofline llama-3.1-8b --gpu h200 --device-profile "$profile" --batch 1,8,64
plot roofline_crossover roofline deepseek-v3 --gpu h200 --tp 8 --mla-crossover --context 4k,32k,128k
plot capacity_contexts capacity llama-3.1-70b deepseek-v3 qwen3-235b-a22b --gpu h200 --gpus 8 --tp 8 --context 4k,32k,128k
plot simulate_one simulate deepseek-v3 --gpu h200 --gpus 8 --tp 8 --workload "$root/docs/examples/chat.yaml" --duration 60
plot simulate_rates simulate deepseek-v3 --gpu h200 --gpus 8 --tp 8 --rate 5,10,20 --prompt-tokens lognormal:2000,0.8 --output-tokens 500 --duration 60
plot simulate_models simulate llama-3.1-70b deepseek-v3 --gpu h200 --gpus 8 --tp 8 --rate 10 --duration 60

for svg in "$out"/*.svg; do
  png=${svg%.svg}.png
  height=$(grep -o 'height="[0-9.]*"' "$svg" | head -1 | tr -dc '0-9.')
  chromium --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --window-size=960,"${height%.*}" --screenshot="$png" "file://$svg" >/dev/null 2>&1
  echo "$png"
done
