#!/usr/bin/env bash
# session 20 call D (warm after C: /tmp/w8 holds the converted models): decode round 2 of call C's configurations, and this
# code against the previous kvq-run (932e8fb: the split attend's merges as before) on E8 4.0, alternated.
set -u
TESTS= . tests/bench/gpu_env.sh
L=$OUT
W=/tmp/w8
ls $W/*.kvq || exit 1
prompt=$(head -c 560 .cu/shared/data/heldout-books.txt)
run() { # label model bin env...
  local l=$1 m=$2 b=$3; shift 3
  env "$@" timeout 100 $B/$b $W/$m.kvq --gpu --ctx-max 1024 -p "$prompt" -n 256 --temp 0 > $L/run_$l.log 2>&1
  echo "$l: $(grep -hE 'decode|rror' $L/run_$l.log | cut -c1-100) | $(grep -hoE 'on the device: weights [0-9.]+ MB' $L/run_$l.log)"
}
r=2
run "bf16_r$r" bf16 kvq-run
run "auto_r$r" e8 kvq-run
run "auto_old_r$r" e8 kvq-run.old
run "q_auto_r$r" e8q kvq-run
run "q_w4_r$r" e8q kvq-run KVQ_HQX_WIDTH=4
run "q_w4e32_r$r" e8q kvq-run KVQ_HQX_WIDTH=4 KVQ_CUDA_ESC16=0
run "auto_r3" e8 kvq-run
run "auto_old_r3" e8 kvq-run.old
run "auto_pf2_r3" e8 kvq-run KVQ_CUDA_ESC_PF=2
run "q_w4_r3" e8q kvq-run KVQ_HQX_WIDTH=4
run "q_w4e32_r3" e8q kvq-run KVQ_HQX_WIDTH=4 KVQ_CUDA_ESC16=0
for l in auto_old_r2 auto_r3 auto_pf2_r3; do cmp -s <(grep -v '^kvq-run:' $L/run_auto_r2.log) <(grep -v '^kvq-run:' $L/run_$l.log) && echo "text $l = auto_r2" || echo "text $l DIFFERS from auto_r2"; done
cmp -s <(grep -v '^kvq-run:' $L/run_q_w4_r2.log) <(grep -v '^kvq-run:' $L/run_q_w4e32_r2.log) && echo "text q_w4 = q_w4e32" || echo "text q_w4 DIFFERS from q_w4e32"
echo "== done $(el)"
