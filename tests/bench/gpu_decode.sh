#!/usr/bin/env bash
# GPU decode table (issue 12) on a synthetic Llama-shaped checkpoint: kvq-run --gpu on the bf16
# source and on HyperQuant E8 4.0 / 3.0 and RTN 4 g128 conversions (prompt of ~128 tokens, N
# new tokens, greedy; median of 3 runs), GPU weight memory, the fraction of device-to-device
# copy bandwidth a decode step reaches (weights held on the GPU / step time / copy B/W), and
# HF transformers bf16 on the same checkpoint (tests/bench/gpu_hf_peer.py).
# usage: tests/bench/gpu_decode.sh BIN 1b|8b WORK [N]
#   BIN holds kvq-run, kvq-convert, make_synth_llama and cuda_hqx (built here, carried over).
set -u
B=$1; size=$2; W=$3; N=${4:-256}
mkdir -p "$W"
src=$W/synth-$size
[ -f "$src/config.json" ] || "$B/make_synth_llama" "$size" "$src" tests/models/kvq-tiny-llama >/dev/null 2>&1 || exit 1
bw=$("$B/cuda_hqx" --copy-only 2>/dev/null | sed -n 's/.*copy bandwidth \([0-9.]*\) GB\/s.*/\1/p' | head -1)
echo "device-to-device copy: ${bw:-?} GB/s"
prompt=$(printf 'Once upon a time there was a little girl who lived in a village near the forest. %.0s' 1 2 3 4 5 6 7)
run() { # label model [extra args]
  local label=$1 m=$2; shift 2
  local rates=() line mem
  for r in 1 2 3; do
    line=$("$B/kvq-run" "$m" --gpu --ctx-max 1024 -p "$prompt" -n "$N" --temp 0 "$@" 2>&1 >/dev/null)
    mem=$(echo "$line" | sed -n "s/.*on the device: weights \([0-9.]*\) MB.*/\1/p"); step=$(echo "$line" | sed -n "s/.*(\([0-9.]*\) MB of weights held).*/\1/p")
    rates+=("$(echo "$line" | sed -n 's/.*decode [0-9]* tokens \([0-9.]*\) tok\/s.*/\1/p')")
    pre=$(echo "$line" | sed -n 's/.*prefill \([0-9]*\) tokens \([0-9.]*\) tok\/s.*/\1 tokens at \2/p')
  done
  local med; med=$(printf '%s\n' "${rates[@]}" | sort -g | sed -n 2p)
  awk -v l="$label" -v d="$med" -v m="$mem" -v s="$step" -v bw="${bw:-0}" -v p="$pre" 'BEGIN {
    f = bw > 0 ? s * 1e6 * d / (bw * 1e9) : 0;
    printf "| %-26s | %8.1f | %9.1f | %7.1f | %5.1f %% | prefill %s tok/s |\n", l, d, m, s, 100 * f, p }'
}
echo "| model ($size) | decode tok/s | GPU weights MB | MB read per step | of copy B/W | |"
echo "|---|---|---|---|---|---|"
run "bf16 source" "$src"
for spec in hyperquant:e8:4.0 hyperquant:e8:3.0 rtn:4:g128; do
  f=$W/synth-$size-${spec//:/-}.kvq
  [ -f "$f" ] || "$B/kvq-convert" "$src" "$f" --weights "$spec" >/dev/null 2>&1 || { echo "convert $spec failed"; continue; }
  run "$spec int8" "$f"
  [ "$spec" = hyperquant:e8:4.0 ] && run "$spec exact" "$f" --exec exact
done
[ "${KVQ_NO_HF:-0}" = 1 ] || python3 tests/bench/gpu_hf_peer.py "$src" 128 "$N"
