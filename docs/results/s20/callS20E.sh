#!/usr/bin/env bash
# session 20 call E (main 3-way merge, binaries of call C): the split attend's merges with their factors once (this kvq-run)
# against the previous kvq-run (932e8fb), alternated on E8 4.0 (bf16 lm_head); width 4 with 16-bit and 32-bit escapes.
set -u
TESTS= . tests/bench/gpu_env.sh
L=$OUT
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
$B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1; $B/kvq-convert -q -t 16 $src $W/e8.kvq --weights hyperquant:e8:4.0; echo "conv rc $? $(el)"
prompt=$(head -c 560 .cu/shared/data/heldout-books.txt)
run() { # label bin env...
  local l=$1 b=$2; shift 2
  env "$@" timeout 100 $B/$b $W/e8.kvq --gpu --ctx-max 1024 -p "$prompt" -n 256 --temp 0 > $L/run_$l.log 2>&1
  echo "$l: $(grep -hE 'decode|rror' $L/run_$l.log | cut -c1-100) | $(grep -hoE 'on the device: weights [0-9.]+ MB' $L/run_$l.log)"
}
for r in 1 2; do
  run "new_r$r" kvq-run
  run "old_r$r" kvq-run.old
done
run "w4_e16" kvq-run KVQ_HQX_WIDTH=4
run "w4_e32" kvq-run KVQ_HQX_WIDTH=4 KVQ_CUDA_ESC16=0
for l in old_r1 new_r2 old_r2; do cmp -s <(grep -v '^kvq-run:' $L/run_new_r1.log) <(grep -v '^kvq-run:' $L/run_$l.log) && echo "text $l = new_r1" || echo "text $l DIFFERS from new_r1"; done
cmp -s <(grep -v '^kvq-run:' $L/run_w4_e16.log) <(grep -v '^kvq-run:' $L/run_w4_e32.log) && echo "text w4_e16 = w4_e32" || echo "text w4_e16 DIFFERS from w4_e32"
echo "== done $(el)"
