#!/usr/bin/env bash
# Device call (issue 12, session 20, helper i12w: the GPU's escapes in 16 bits, KVQ_CUDA_ESC16,
# kernels/cpu/hqx_esc16.h): (1) test_cuda_hqx's test_esc16 (both forms, same bits, every product),
# then the whole suite with the 16-bit form (the default) and with KVQ_CUDA_ESC16=0; (2) the
# Llama-3-8B shape, E8 4.0, the decode run (prompt 182, 256 greedy tokens, batch 1) at
# width 4 with the embeddings and lm_head packed (--quantize-embeddings: the 0.3x question) and
# with the bf16 lm_head, each with the 16-bit and the 32-bit escapes, alternated: the weights'
# device MB and decode tok/s; (3) the kernel bench on the 8B's layer shapes at width 4, both forms.
# usage (on the device, carry [".cu"]; bundle: BINS="kvq-run kvq-convert make_synth_llama test_cuda_hqx
# test_cuda_model cuda_hqx" bash tests/bench/gpu_bundle.sh): [ROUNDS=2] bash tests/bench/gpu_esc16_8b.sh
set -u
TESTS= . tests/bench/gpu_env.sh
L=${OUT:-/tmp}
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
( [ -f $src/config.json ] || $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1
  [ -f $W/e8.kvq ] || nice $B/kvq-convert -q -t 12 $src $W/e8.kvq --weights hyperquant:e8:4.0
  [ -f $W/e8q.kvq ] || nice $B/kvq-convert -q -t 12 $src $W/e8q.kvq --weights hyperquant:e8:4.0 --quantize-embeddings
  echo "conv rc $? $(el)" ) > $L/conv.log 2>&1 &
CP=$!
KVQ_TEST_FILTER="test_esc16" timeout 200 $B/test_cuda_hqx > $L/esc16.log 2>&1; echo "== test_esc16 rc $? $(el)"
grep -hE '^\[ +(FAILED|PASSED) +\]|esc16 case|DIFFER' $L/esc16.log | cut -c1-260 | head -14
timeout 300 $B/test_cuda_hqx > $L/hqx16.log 2>&1; echo "== test_cuda_hqx (16-bit escapes) rc $? $(el)"
grep -hE '^\[ +(FAILED|PASSED) +\]' $L/hqx16.log | head -4
KVQ_CUDA_ESC16=0 timeout 300 $B/test_cuda_hqx > $L/hqx32.log 2>&1; echo "== test_cuda_hqx (KVQ_CUDA_ESC16=0) rc $? $(el)"
grep -hE '^\[ +(FAILED|PASSED) +\]' $L/hqx32.log | head -4
wait $CP; cat $L/conv.log
prompt=$(head -c 560 .cu/shared/data/heldout-books.txt)
run() { # label model env...
  local l=$1 m=$2; shift 2
  env "$@" timeout 100 $B/kvq-run $m --gpu --ctx-max 1024 -p "$prompt" -n 256 --temp 0 > $L/run_$l.log 2>&1
  echo "$l: $(grep -hE 'decode' $L/run_$l.log | cut -c1-110) | $(grep -hoE 'on the device: weights [0-9.]+ MB' $L/run_$l.log)"
}
for r in $(seq ${ROUNDS:-2}); do
  run "emb-q w4 esc16 r$r" $W/e8q.kvq KVQ_HQX_WIDTH=4
  run "emb-q w4 esc32 r$r" $W/e8q.kvq KVQ_HQX_WIDTH=4 KVQ_CUDA_ESC16=0
  run "w4 esc16 r$r" $W/e8.kvq KVQ_HQX_WIDTH=4
  run "w4 esc32 r$r" $W/e8.kvq KVQ_HQX_WIDTH=4 KVQ_CUDA_ESC16=0
  run "auto esc16 r$r" $W/e8.kvq
  run "auto esc32 r$r" $W/e8.kvq KVQ_CUDA_ESC16=0
done
echo "== decode A/B done $(el)"
for e in 1 0; do
  echo "-- kernel bench width 4, KVQ_CUDA_ESC16=$e"
  KVQ_HQX_WIDTH=4 KVQ_CUDA_ESC16=$e KVQ_HQX_CODECS=1 KVQ_HQX_FOLD=1 $B/cuda_hqx 4096x4096 1024x4096 14336x4096 4096x14336 2>&1 | grep -E '^\||fold'
done
timeout 400 $B/test_cuda_model > $L/model.log 2>&1; echo "== test_cuda_model rc $? $(el)"
grep -hE '^\[ +(FAILED|PASSED) +\]' $L/model.log | head -4
echo "== done $(el)"
