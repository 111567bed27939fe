#!/usr/bin/env bash
# The zsh and fish completions kvcalc generates: each parses in its shell, and fish completes
# commands, option values, GPUs and models from them. Exit 77 (skipped) where neither shell is
# installed.
set -euo pipefail
kvcalc=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
checked=0
if command -v zsh >/dev/null; then
  "$kvcalc" completion zsh -o "$work/_kvcalc"
  zsh -n "$work/_kvcalc"
  grep -q "^#compdef kvcalc" "$work/_kvcalc"
  checked=1
fi
if command -v fish >/dev/null; then
  "$kvcalc" completion fish -o "$work/kvcalc.fish"
  fish --no-execute "$work/kvcalc.fish"
  expect() { # expect LINE "COMPLETION": fish completes LINE with COMPLETION among its answers
    local got
    got=$(fish -c "source $work/kvcalc.fish; complete -C '$1'" | cut -f1)
    grep -qx -- "$2" <<<"$got" || { echo "fish: '$1' does not offer '$2'; it offers: $got" >&2; exit 1; }
  }
  expect "kvcalc capa" capacity
  expect "kvcalc capacity --engine " sglang
  expect "kvcalc simulate --gpu " h200
  expect "kvcalc capacity --max-mod" --max-model-len
  expect "kvcalc footprint deepseek-v" deepseek-v3
  checked=1
fi
[ "$checked" = 1 ] || exit 77
