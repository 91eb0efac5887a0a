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

echo "== kvq-convert --weights hyperquant:e8:4.0 --kv octopus:4 $model $out"
"$build/kvq-convert" -q --weights hyperquant:e8:4.0 --kv octopus:4 "$model" "$out"
echo
echo "== kvq-inspect $out"
"$build/kvq-inspect" "$out"
echo
echo "== kvq-verify $out --source $model --text $text --windows 8 --record"
# Thresholds a 4-bit tiny model passes with margin; exit 1 would mean a regression.
"$build/kvq-verify" -q "$out" --source "$model" --text "$text" --windows 8 \
    --max-ppl-delta 8% --max-kld 0.1 --min-snr 20 --record
echo
echo "== kvq-inspect $out | verification record"
"$build/kvq-inspect" "$out" | sed -n '/^verification/,$p'
echo
echo "== kvq-run $out -p 'It was a dark and stormy night' -n 48 --temp 0"
"$build/kvq-run" "$out" -p "It was a dark and stormy night" -n 48 --temp 0
echo
