#!/usr/bin/env bash
# session 21 call F: the 16-bit escapes' batch loads issued before the decodes (kvq_hqx_esc_raw / kvq_hqx_esc_of; same
# bits): test_cuda_hqx with either form, the tensor-core KV tests and test_cuda_model's KV cases (int8 scores as explicit
# cases, opt-in again) while the 8B shape converts (E8 4.0, lm_head packed); then width 4 with KVQ_CUDA_ESC16 = 0 / 2 / 1
# alternated. Logs in $OUT/F_logs.tgz.
set -u
TESTS= . tests/bench/gpu_env.sh
L=/tmp/logsF; mkdir -p $L
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
( $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1; echo "synth $(el)"
  nice $B/kvq-convert -q -t 12 $src $W/e8q.kvq --weights hyperquant:e8:4.0 --quantize-embeddings
  echo "conv done: $(ls $W/*.kvq | tr '\n' ' ') $(el)" ) > $L/conv.log 2>&1 &
CP=$!
t() { # name suite filter timeout [env]
  local n=$1 s=$2 f=$3 to=$4; shift 4
  env KVQ_TEST_FILTER="$f" "$@" timeout $to $B/$s > $L/$n.log 2>&1; echo "== $n rc $? $(el)"
  grep -hE '^\[ +(FAILED|PASSED) +\]|FAILED' $L/$n.log | head -6
}
t hqx test_cuda_hqx "*" 60
t hqx16 test_cuda_hqx "*" 60 KVQ_CUDA_ESC16=1
t kvtc test_cuda_kv "test_attend_tc*" 90
grep -hE "Q8 tensor-core|pipelined tensor-core" $L/kvtc.log | cut -c1-220
t model test_cuda_model "test_kv_*" 150
grep -hE "kv (fill )?(int:[24])|FAIL" $L/model.log | cut -c1-170 | head -24
wait $CP; cat $L/conv.log
prompt=$(head -c 560 .cu/shared/data/heldout-books.txt)
run() { # label env...
  local l=$1; shift
  env "$@" timeout 40 $B/kvq-run $W/e8q.kvq --gpu --ctx-max 1024 -p "$prompt" -n 256 --temp 0 > $L/run_$l.log 2>&1
  echo "$l: $(grep -hE 'decode|rror' $L/run_$l.log | cut -c1-60) | $(grep -hoE 'on the device: weights [0-9.]+ MB' $L/run_$l.log) $(el)"
}
for x in e0_r1:0 e2_r1:2 e1_r1:1 e0_r2:0 e2_r2:2; do run w4_${x%%:*} KVQ_HQX_WIDTH=4 KVQ_CUDA_ESC16=${x##*:}; done
for f in $L/run_*.log; do echo "$(basename $f) text $(grep -av -E 'tok/s|MB|ms' $f | md5sum | cut -c1-8)"; done
tar -C /tmp -czf $OUT/F_logs.tgz logsF
echo "== done $(el)"
