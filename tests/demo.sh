#!/usr/bin/env bash
# `make demo`: the whole user path on the model bundled in the repo (no ../shared
# needed): convert kvq-tiny-llama with HyperQuant-E8 weights at 4 effective bits and
# an OCTOPUS 4-bit KV cache, inspect it, verify it against the source (perplexity, KL
# divergence, per-tensor SNR) and record the result in the file, then generate text.
set -eu
build=${1:-build}
model=tests/models/kvq-tiny-llama
text=tests/data/heldout-sample.txt
out="$build/demo/kvq-tiny-llama-e8-4.kvq"
mkdir -p "$build/demo"

# Each step echoes exactly the command it runs (runnable as pasted from the repo root), then
# runs it.
run() {
  printf '== '
  printf '%q ' "$@" | sed 's/ $//'
  echo
  "$@"
}

run "$build/kvq-convert" -q --weights hyperquant:e8:4.0 --kv octopus:4 "$model" "$out"
echo
run "$build/kvq-inspect" "$out"
echo
# Thresholds a 4-bit tiny model passes with margin; exit 1 would mean a regression.
run "$build/kvq-verify" -q "$out" --source "$model" --text "$text" --windows 8 \
    --max-ppl-delta 8% --max-kld 0.1 --min-snr 20 --record
echo
echo "== $build/kvq-inspect $out | sed -n '/^verification/,\$p'"
"$build/kvq-inspect" "$out" | sed -n '/^verification/,$p'
echo
run "$build/kvq-run" "$out" -p "It was a dark and stormy night" -n 48 --temp 0
echo
