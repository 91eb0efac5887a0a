#!/usr/bin/env bash
# session 17 call F: the 8B shape (E8 4.0) decoding after a ~32.6k-token prompt with the two codecs that moved onto the
# tensor cores this session (octopus:4, turboquant-prod:4), each with its tensor-core kernel off and on, beside fp32.
set -u
TESTS= . tests/bench/gpu_env.sh
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
[ -f $src/config.json ] || $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1
[ -f $W/e8.kvq ] || $B/kvq-convert -q -t 16 $src $W/e8.kvq --weights hyperquant:e8:4.0; echo "== converted $(el)"
for cfg in "fp32|X=1" "octopus:4|KVQ_CUDA_KV_TC_OCT=0" "octopus:4|KVQ_CUDA_KV_TC_OCT=1" "turboquant-prod:4|KVQ_CUDA_KV_TC_TPROD=0" "turboquant-prod:4|KVQ_CUDA_KV_TC_TPROD=1"; do
  kv=${cfg%%|*}; e=${cfg#*|}; a=(); [ "$kv" != fp32 ] && a=(--kv "$kv")
  env $e timeout 150 $B/kvq-run $W/e8.kvq --gpu --ctx-max 33024 --prompt-file .cu/long.txt -n 128 --temp 0 "${a[@]}" 2>&1 >/dev/null \
    | grep -E "KV cache|prefill|rror" | sed "s/^/$kv $e: /" | cut -c1-230
  echo "== $kv $e $(el)"
done
