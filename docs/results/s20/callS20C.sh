#!/usr/bin/env bash
# session 20 call C (main with i20v and i12w merged, the stale attention object of call B rebuilt): the suites the merges touch
# while the 8B shape converts (E8 4.0 bf16 lm_head, E8 4.0 lm_head packed, bf16); SDPA bf16 and the int KV kernels with and
# without int8 scores, same process time base; the 8B decode round 1 (call D: round 2 and the previous binary).
set -u
TESTS= . tests/bench/gpu_env.sh
L=$OUT
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
( [ -f $src/config.json ] || $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1; echo "synth $(el)"
  [ -f $W/e8.kvq ] || nice $B/kvq-convert -q -t 7 $src $W/e8.kvq --weights hyperquant:e8:4.0 &
  [ -f $W/e8q.kvq ] || nice $B/kvq-convert -q -t 7 $src $W/e8q.kvq --weights hyperquant:e8:4.0 --quantize-embeddings &
  wait; echo "e8 done $(el)"; [ -f $W/bf16.kvq ] || nice $B/kvq-convert -q -t 12 $src $W/bf16.kvq --weights none; echo "conv done: $(ls $W/*.kvq | tr '\n' ' ') $(el)" ) > $L/conv.log 2>&1 &
CP=$!
t() { # name suite filter timeout [env]
  local n=$1 s=$2 f=$3 to=$4; shift 4
  env KVQ_TEST_FILTER="$f" "$@" timeout $to $B/$s > $L/$n.log 2>&1; echo "== $n rc $? $(el)"
  grep -hE '^\[ +(FAILED|PASSED) +\]|FAILED' $L/$n.log | head -6
}
t hqx test_cuda_hqx "*" 120
grep -hE "esc16 case|attention \+ prepared" $L/hqx.log | cut -c1-160 | head -14
t hqx_e32 test_cuda_hqx "*" 120 KVQ_CUDA_ESC16=0
t model test_cuda_model "*" 150
t kv test_cuda_kv "*" 200
timeout 100 python3 tests/bench/cuda_kv_sdpa.py 4096 32768 131072 > $L/sdpa.txt 2>&1; echo "== sdpa rc $? $(el)"; grep -E "ms|k " $L/sdpa.txt | head -8
CUDA_KV_BATCH=1 CUDA_KV_ONLY="bf16,int:4 tc,int:4 tc2,int:2 tc,int:2 tc2,int:4 tc i8,int:4 tc2 i8,int:2 tc i8,int:2 tc2 i8" timeout 100 $B/cuda_kv_attn 4096 32768 131072 > $L/kv_r1.txt 2>&1; echo "== kv bench rc $? $(el)"
grep -E "^\| " $L/kv_r1.txt | cut -c1-110 | head -30
wait $CP; cat $L/conv.log
prompt=$(head -c 560 .cu/shared/data/heldout-books.txt)
run() { # label model bin env...
  local l=$1 m=$2 b=$3; shift 3
  env "$@" timeout 100 $B/$b $W/$m.kvq --gpu --ctx-max 1024 -p "$prompt" -n 256 --temp 0 > $L/run_$l.log 2>&1
  echo "$l: $(grep -hE 'decode|rror' $L/run_$l.log | cut -c1-100) | $(grep -hoE 'on the device: weights [0-9.]+ MB' $L/run_$l.log)"
}
r=1
run "bf16_r$r" bf16 kvq-run
run "auto_r$r" e8 kvq-run
run "q_auto_r$r" e8q kvq-run
run "q_w4_r$r" e8q kvq-run KVQ_HQX_WIDTH=4
run "q_w4e32_r$r" e8q kvq-run KVQ_HQX_WIDTH=4 KVQ_CUDA_ESC16=0
echo "== done $(el)"
