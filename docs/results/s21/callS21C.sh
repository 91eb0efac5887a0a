#!/usr/bin/env bash
# session 21 call C: KVQ_CUDA_ESC16=2 (16-bit escapes only in one-segment rows: every 8B product but the FFN's down) on
# the 8B shape at width 4 with the lm_head packed, against 0 (the 32-bit default) — bytes and decode; the automatic width
# with a bf16 lm_head and the bf16 model in the same call (the ratio). While the models convert: the suites the
# session's changes touch (test_esc16 with mode 2; the tensor-core KV tests; test_cuda_model's KV cases, whose int
# keys now take int8 scores against the CPU's KVQ_KV_SIM_Q8 model). Logs in $OUT/C_logs.tgz.
set -u
TESTS= . tests/bench/gpu_env.sh
L=/tmp/logsC; mkdir -p $L
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
( $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1; echo "synth $(el)"
  nice $B/kvq-convert -q -t 5 $src $W/e8.kvq --weights hyperquant:e8:4.0 &
  nice $B/kvq-convert -q -t 5 $src $W/e8q.kvq --weights hyperquant:e8:4.0 --quantize-embeddings &
  nice $B/kvq-convert -q -t 5 $src $W/bf16.kvq --weights none &
  wait; echo "conv done: $(ls $W/*.kvq | tr '\n' ' ') $(el)" ) > $L/conv.log 2>&1 &
CP=$!
t() { # name suite filter timeout [env]
  local n=$1 s=$2 f=$3 to=$4; shift 4
  env KVQ_TEST_FILTER="$f" "$@" timeout $to $B/$s > $L/$n.log 2>&1; echo "== $n rc $? $(el)"
  grep -hE '^\[ +(FAILED|PASSED) +\]|FAILED' $L/$n.log | head -6
}
t esc16 test_cuda_hqx "test_esc16" 120
t kvtc test_cuda_kv "test_attend_tc*" 200
grep -hE "Q8 tensor-core|pipelined tensor-core" $L/kvtc.log | cut -c1-220
t model test_cuda_model "test_kv_*" 240
grep -hE "kv (fill )?(int|kivi)|ESC16|FAIL" $L/model.log | cut -c1-200 | head -24
wait $CP; cat $L/conv.log
prompt=$(head -c 560 .cu/shared/data/heldout-books.txt)
run() { # label model timeout env...
  local l=$1 m=$2 to=$3; shift 3
  env "$@" timeout $to $B/kvq-run $W/$m.kvq --gpu --ctx-max 1024 -p "$prompt" -n 256 --temp 0 > $L/run_$l.log 2>&1
  echo "$l: $(grep -hE 'decode|rror' $L/run_$l.log | cut -c1-100) | $(grep -hoE 'on the device: weights [0-9.]+ MB' $L/run_$l.log) $(el)"
}
run q_w4_e0 e8q 60 KVQ_HQX_WIDTH=4 KVQ_CUDA_ESC16=0
run q_w4_e2 e8q 60 KVQ_HQX_WIDTH=4 KVQ_CUDA_ESC16=2
run auto e8 60
run q_w4_e0b e8q 60 KVQ_HQX_WIDTH=4 KVQ_CUDA_ESC16=0
run q_w4_e2b e8q 60 KVQ_HQX_WIDTH=4 KVQ_CUDA_ESC16=2
left=$(( 585 - ($(date +%s) - t0) )); run bf16 bf16 $left
run auto_b e8 $(( 595 - ($(date +%s) - t0) ))
for f in $L/run_*.log; do md5sum < <(grep -v -E 'tok/s|MB|ms' $f) | cut -c1-8 | sed "s#^#$(basename $f) text #"; done
tar -C /tmp -czf $OUT/C_logs.tgz logsC
echo "== done $(el)"
