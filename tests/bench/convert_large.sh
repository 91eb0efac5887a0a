#!/usr/bin/env bash
# Conversion at scale (issue 14): a synthetic Llama-3-8B-shaped checkpoint (random bf16 weights
# with its names and shapes, one shard per layer, written by the project's safetensors writer:
# tests/bench/make_synth_llama.c) converted with HyperQuant and RTN, embeddings quantized too
# and not. Per run: wall time, weights per second, peak RSS (GNU time), the largest tensor's
# source bytes and the issue's memory bound 3 × largest + 256 MB.
# usage: tests/bench/convert_large.sh [BUILD] [WORK] [LAYERS] [THREADS] [SPECS] [EMBEDDINGS]
#   SPECS default "hyperquant:e8:4.0 rtn:4:g128"; EMBEDDINGS "0 1" (0 kept, 1 quantized)
#   LAYERS 5: 4.3 GB (largest tensors 1.05 GB); 32: the full 16 GB.
set -eu
build=${1:-build}; W=${2:-/tmp/kvq-large}; layers=${3:-5}; t=${4:-2}; specs=${5:-hyperquant:e8:4.0 rtn:4:g128}; embs=${6:-0 1}
src=$W/synth-8b-$layers
mkdir -p "$W"
[ -f "$src/config.json" ] || "$build/bench/make_synth_llama" 8b "$src" tests/models/kvq-tiny-llama 1 "$layers" >/dev/null
bytes=$(du -cb "$src"/*.safetensors | tail -1 | cut -f1)
params=$(( bytes / 2 ))
largest=$((128256 * 4096 * 2))
bound=$(( 3 * largest + 256 * 1024 * 1024 ))
echo "checkpoint: $src, $layers layers, $((bytes / 1000000)) MB, $params parameters, largest tensor $((largest / 1000000)) MB; bound 3 x largest + 256 MB = $((bound / 1000000)) MB; -t $t on $(nproc) cores"
echo "| weights | embeddings | wall s | M weights/s (wall) | CPU s | M weights per CPU-s | peak RSS MB | within bound | file MB | sha256 |"
echo "|---|---|---|---|---|---|---|---|---|---|"
for spec in $specs; do
  for emb in $embs; do
    out=$W/out.kvq
    rm -f "$out"
    extra=(); [ $emb = 1 ] && extra=(--quantize-embeddings)
    /usr/bin/time -f '%e %M %U %S' -o "$W/time.txt" "$build/kvq-convert" -q -t "$t" --weights "$spec" "${extra[@]}" "$src" "$out"
    read -r wall rss us ss < "$W/time.txt"
    awk -v s="$spec" -v e="$emb" -v w="$wall" -v r="$rss" -v c="$(echo "$us $ss" | awk '{print $1 + $2}')" -v p="$params" -v b="$bound" -v f="$(stat -c %s "$out")" -v h="$(sha256sum "$out" | cut -c1-12)" 'BEGIN {
      printf "| %s | %s | %.1f | %.1f | %.1f | %.1f | %.0f | %s | %.0f | %s |\n", s, e ? "quantized" : "kept (bf16, lossless)", w,
             p / w / 1e6, c, p / c / 1e6, r / 1024 * 1.048576, r * 1024 <= b ? "yes" : "NO", f / 1e6, h }'
  done
done
rm -f "$W/out.kvq"
