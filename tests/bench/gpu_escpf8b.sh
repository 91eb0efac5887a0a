#!/usr/bin/env bash
# Device call (issue 12, session 19: the escape prefetch of the persistent one-token product,
# KVQ_CUDA_ESC_PF, hqx_gemv1.cu): Llama-3-8B shape, E8 4.0, the decode run (prompt 182
# tokens, 256 greedy new tokens, batch 1) at the automatic 5-bit width and at nibbles with
# escapes (KVQ_HQX_WIDTH=4), each with the prefetch on (default) and off, alternating; the same
# with the embeddings and lm_head packed (--quantize-embeddings: the 0.3x memory question); the
# kernel bench on the 8B's layer shapes at both widths, on and off.
# usage (on the device): [TESTS="test_cuda_hqx"] [ROUNDS=2] bash tests/bench/gpu_escpf8b.sh
set -u
. tests/bench/gpu_env.sh
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
[ -f $src/config.json ] || $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1 || echo synth failed
[ -f $W/e8.kvq ] || $B/kvq-convert -q -t 16 $src $W/e8.kvq --weights hyperquant:e8:4.0 || echo "convert failed"
[ -f $W/e8q.kvq ] || $B/kvq-convert -q -t 16 $src $W/e8q.kvq --weights hyperquant:e8:4.0 --quantize-embeddings || echo "convert q failed"
echo "== converted $(el)"
prompt=$(head -c 560 .cu/shared/data/heldout-books.txt)
run() { # label model [env...]
  local l=$1 m=$2; shift 2
  out=$(env "$@" $B/kvq-run $m --gpu --ctx-max 1024 -p "$prompt" -n 256 --temp 0 2>&1 >/dev/null)
  echo "$out" | grep -E 'on the device|decode' | sed "s/^/$l: /" | cut -c1-200
}
for r in $(seq ${ROUNDS:-2}); do
  run "auto pf1" $W/e8.kvq KVQ_CUDA_ESC_PF=1
  run "auto pf0" $W/e8.kvq KVQ_CUDA_ESC_PF=0
  run "w4 pf1" $W/e8.kvq KVQ_HQX_WIDTH=4 KVQ_CUDA_ESC_PF=1
  run "w4 pf0" $W/e8.kvq KVQ_HQX_WIDTH=4 KVQ_CUDA_ESC_PF=0
done
echo "== A/B done $(el)"
for r in $(seq ${ROUNDS:-2}); do
  run "emb-q auto pf1" $W/e8q.kvq KVQ_CUDA_ESC_PF=1
  run "emb-q w4 pf1" $W/e8q.kvq KVQ_HQX_WIDTH=4 KVQ_CUDA_ESC_PF=1
  run "emb-q w4 pf0" $W/e8q.kvq KVQ_HQX_WIDTH=4 KVQ_CUDA_ESC_PF=0
done
echo "== packed lm_head done $(el)"
# the products alone: the 8B's layer shapes, E8 4.0 only; the fold's RMSNorm input too
for w in "" 4; do for pf in 1 0; do
  echo "-- kernel bench width ${w:-auto} pf $pf"
  KVQ_HQX_WIDTH=$w KVQ_CUDA_ESC_PF=$pf KVQ_HQX_CODECS=1 KVQ_HQX_FOLD=1 $B/cuda_hqx 4096x4096 1024x4096 14336x4096 4096x14336 2>&1 | grep -E '^\||fold'
done; done
echo "== done $(el)"
