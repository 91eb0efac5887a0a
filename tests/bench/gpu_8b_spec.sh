#!/usr/bin/env bash
# Device call (issue 12): the decode table at the shape on the Llama-3-8B shape — prompt
# of ~128 tokens (the first 560 bytes of heldout-books: 182 tokens with the synthetic model's
# tokenizer), 256 greedy new tokens, batch 1 — for the bf16 source and HyperQuant E8 4.0 / 3.0
# (SPECS), with HF transformers (tests/bench/gpu_hf_peer.py, bf16 eager, batch 1 and 8, random
# prompt of 128 tokens, 256 new) in the same call. Checks the GPU suites first (TESTS).
# BATCH=N adds each model decoding N sequences of the prompt together (kvq-run --batch N: the
# tokens/s over the batch), the batch-8 row.
# usage (on the device): [SPECS="..."] [TESTS="..."] [EMBQ=1] [PEER=0] [BATCH=8] bash tests/bench/gpu_8b_spec.sh
set -u
. tests/bench/gpu_env.sh
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
[ -f $src/config.json ] || $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1 || echo synth failed
echo "== synth $(el)"
specs=${SPECS:-hyperquant:e8:4.0 hyperquant:e8:3.0}
for s in $specs; do
  [ -f $W/${s//:/-}.kvq ] || $B/kvq-convert -q -t 16 $src $W/${s//:/-}.kvq --weights $s || echo "convert $s failed"
done
# EMBQ=1: E8 4.0 with the embedding table and lm_head packed too (--quantize-embeddings)
if [ "${EMBQ:-0}" = 1 ]; then
  [ -f $W/e8q-4.0.kvq ] || $B/kvq-convert -q -t 16 $src $W/e8q-4.0.kvq --weights hyperquant:e8:4.0 --quantize-embeddings || echo "convert embq failed"
fi
echo "== converted $(el)"
prompt=$(head -c 560 .cu/shared/data/heldout-books.txt)
run() { # label model
  out=$($B/kvq-run $2 --gpu --ctx-max 1024 -p "$prompt" -n 256 --temp 0 2>&1 >/dev/null)
  echo "$out" | grep -E 'on the device|prefill|decode' | sed "s/^/$1: /" | cut -c1-240
  if [ -n "${BATCH:-}" ]; then
    out=$($B/kvq-run $2 --gpu --ctx-max 1024 -p "$prompt" -n 256 --temp 0 --batch $BATCH 2>&1 >/dev/null)
    echo "$out" | grep -E -- '--batch|rror' | sed "s/^/$1: /" | cut -c1-240
  fi
}
run bf16 $src
for s in $specs; do run $s $W/${s//:/-}.kvq; done
[ "${EMBQ:-0}" = 1 ] && run "hyperquant:e8:4.0 +emb" $W/e8q-4.0.kvq
echo "== kvq done $(el)"
[ "${PEER:-1}" = 1 ] && python3 tests/bench/gpu_hf_peer.py $src 128 256 2>&1 | grep -v Warning | tail -6 # PEER=0: skip
echo "== peer done $(el)"
for s in $specs; do run "$s (again)" $W/${s//:/-}.kvq; done
[ "${EMBQ:-0}" = 1 ] && run "hyperquant:e8:4.0 +emb (again)" $W/e8q-4.0.kvq
run "bf16 (again)" $src
echo "== done $(el)"
