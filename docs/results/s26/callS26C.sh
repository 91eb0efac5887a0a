#!/usr/bin/env bash
# session 26 call C (H200): main's binaries (24b5dbe) — the decode table's rows not yet run on the H200: RTN 4 g128
# (bf16 lm_head) and batch 8 (E8 4.0, RTN 4 g128, our bf16), beside E8 4.0 and our bf16 at batch 1 in the same call.
# The run (prompt 182 tokens, 256 greedy new tokens, --ctx-max 1024); batch 8: kvq-run --batch 8 (tokens/s
# over the batch). Logs in $OUT/C_logs.tgz.
set -u
TESTS= . tests/bench/gpu_env.sh
L=/tmp/logsC; mkdir -p $L
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
( $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1; echo "synth $(el)"
  nice $B/kvq-convert -q -t 12 $src $W/e8.kvq --weights hyperquant:e8:4.0; echo "e8 $(el)"
  nice $B/kvq-convert -q -t 12 $src $W/rtn.kvq --weights rtn:4:g128; echo "rtn $(el)"
  nice $B/kvq-convert -q -t 12 $src $W/bf16.kvq --weights none; echo "none $(el)" ) > $L/conv.log 2>&1 &
prompt=$(head -c 560 .cu/shared/data/heldout-books.txt)
b8() { # label model
  env timeout 150 $B/kvq-run $2 --gpu --ctx-max 1024 -p "$prompt" -n 256 --temp 0 --batch 8 > $L/b8_$1.log 2>&1
  echo "$1 batch 8: $(grep -ahE -- '--batch|decode|rror|MB' $L/b8_$1.log | tr '\n' ' ' | cut -c1-260) $(el)"
}
gpu_wait e8
gpu_decode e8_r1 kvq-run $W/e8.kvq; grep -ah "MB" $L/run_e8_r1.log | head -2 | cut -c1-160
b8 e8_r1 $W/e8.kvq
gpu_decode e8_r2 kvq-run $W/e8.kvq
gpu_wait rtn
gpu_decode rtn_r1 kvq-run $W/rtn.kvq; grep -ah "MB" $L/run_rtn_r1.log | head -2 | cut -c1-160
gpu_decode e8_r3 kvq-run $W/e8.kvq
gpu_decode rtn_r2 kvq-run $W/rtn.kvq
b8 rtn_r1 $W/rtn.kvq
b8 e8_r2 $W/e8.kvq
gpu_wait none
gpu_decode bf16_r1 kvq-run $W/bf16.kvq; grep -ah "MB" $L/run_bf16_r1.log | head -2 | cut -c1-160
b8 bf16_r1 $W/bf16.kvq
gpu_decode e8_r4 kvq-run $W/e8.kvq
gpu_decode bf16_r2 kvq-run $W/bf16.kvq
b8 bf16_r2 $W/bf16.kvq
for f in $L/run_*.log; do echo "$(basename $f) text $(grep -av -E 'tok/s|MB|ms' $f | md5sum | cut -c1-8)"; done
tar -C /tmp -czf $OUT/C_logs.tgz logsC
echo "== done $(el)"
