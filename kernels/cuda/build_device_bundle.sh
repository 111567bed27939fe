#!/usr/bin/env bash
# Builds the kvcalc binary, the device tests and the device bench for a machine that has an
# NVIDIA driver but none of the build's libraries (docs/performance.md, "`kvcalc measure` on an
# NVIDIA H200"): static libstdc++, libgcc, yaml-cpp and CUDA runtime, header-only fmt, Hopper
# code (sm_90a, so the wgmma kernel is in). Only libc is linked dynamically; cuBLAS is opened
# when a GPU is measured, and device_check.sh finds it there; libcurl when a model is fetched
# from the Hub. Output: build/device-bundle/.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=$root/build/device
bundle=$root/build/device-bundle
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVCALC_PORTABLE=ON \
  -DKVCALC_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DKVCALC_WERROR=ON >/dev/null
cmake --build "$build" --target kvcalc kvcalc_device_tests kvcalc_device_bench
rm -rf "$bundle"
mkdir -p "$bundle"
cp "$build/src/kvcalc" "$build/tests/kvcalc_device_tests" "$build/tests/kvcalc_device_bench" \
  "$bundle/"
strip "$bundle/kvcalc" "$bundle/kvcalc_device_tests" "$bundle/kvcalc_device_bench"
echo "dynamic libraries the bundle needs:"
ldd "$bundle/kvcalc" | sed 's/^/  /'
echo "newest glibc symbol version it needs:"
objdump -T "$bundle/kvcalc" "$bundle/kvcalc_device_tests" | grep -o 'GLIBC_[0-9.]*' | sort -V |
  tail -1 | sed 's/^/  /'
du -sh "$bundle"
