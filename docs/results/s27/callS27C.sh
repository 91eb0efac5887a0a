#!/usr/bin/env bash
# session 27 call C (H200): the decode table's rows in one call with the final binaries (the one-token bf16 kernel
# dense1_k<2,2> the default): E8 4.0 (bf16 lm_head), E8 4.0 with the lm_head packed, E8 3.0, our bf16 — the issue's
# run (prompt 182 tokens, 256 greedy new tokens). Logs packed into $OUT/C_logs.tgz as the call goes.
set -u
TESTS= . tests/bench/gpu_env.sh
W=/tmp/w8; L=/tmp/logsC; mkdir -p $W $L
gpu_convert8b e8="--weights hyperquant:e8:4.0" e8q="--weights hyperquant:e8:4.0 --quantize-embeddings" \
  e83="--weights hyperquant:e8:3.0" bf16="--weights none"
gpu_wait e8;  gpu_decode e8_1 kvq-run $W/e8.kvq
gpu_wait e8q; gpu_decode e8q_1 kvq-run $W/e8q.kvq
gpu_wait e83; gpu_decode e83_1 kvq-run $W/e83.kvq
gpu_decode e8_2 kvq-run $W/e8.kvq; gpu_decode e8q_2 kvq-run $W/e8q.kvq; gpu_decode e83_2 kvq-run $W/e83.kvq
gpu_pack C_logs
gpu_wait bf16; gpu_decode bf16_1 kvq-run $W/bf16.kvq
gpu_decode e8_3 kvq-run $W/e8.kvq
gpu_decode bf16_2 kvq-run $W/bf16.kvq
for f in $L/run_*_1.log; do echo "$(basename $f): $(grep -ah 'weights held' $f | sed 's/.*(\(.*of weights held\)).*/\1/')"; done
for f in $L/run_*.log; do echo "$(basename $f) text $(grep -av -E 'tok/s|MB|ms' $f | md5sum | cut -c1-8)"; done
gpu_pack C_logs
echo "== done $(el)"
