#!/usr/bin/env bash
# session 20 call B (main = 0a4556a + i20v + i12w merged): every suite the merges touch while the 8B shape converts (E8 4.0 with a
# bf16 lm_head, E8 4.0 with the lm_head packed, bf16); the int KV kernels with and without int8 scores; the 8B decode round 1:
# bf16, auto, lm_head packed auto / width 4 with 16-bit escapes / width 4 with 32-bit escapes (call C: round 2, the old binary).
set -u
TESTS= . tests/bench/gpu_env.sh
L=$OUT
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
( $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1; echo "synth $(el)"
  nice $B/kvq-convert -q -t 7 $src $W/e8.kvq --weights hyperquant:e8:4.0 &
  nice $B/kvq-convert -q -t 7 $src $W/e8q.kvq --weights hyperquant:e8:4.0 --quantize-embeddings &
  wait; echo "e8 done $(el)"; nice $B/kvq-convert -q -t 12 $src $W/bf16.kvq --weights none; echo "conv done: $(ls $W/*.kvq | tr '\n' ' ') $(el)" ) > $L/conv.log 2>&1 &
CP=$!
t() { # name suite filter timeout [env]
  local n=$1 s=$2 f=$3 to=$4; shift 4
  env KVQ_TEST_FILTER="$f" "$@" timeout $to $B/$s > $L/$n.log 2>&1; echo "== $n rc $? $(el)"
  grep -hE '^\[ +(FAILED|PASSED) +\]|FAILED' $L/$n.log | head -6
}
t hqx test_cuda_hqx "*" 150
grep -hiE "esc16|same bits" $L/hqx.log | grep -i esc16 | cut -c1-200 | head -12
t hqx_e32 test_cuda_hqx "*" 150 KVQ_CUDA_ESC16=0
t model test_cuda_model "*" 200
t kvq8 test_cuda_kv "*q8*" 120; grep -hiE "differ|bit-equal|nmse" $L/kvq8.log | cut -c1-200 | head -8
[ $(( $(date +%s) - t0 )) -lt 260 ] && t kvtc test_cuda_kv "test_attend_tc*" 120
CUDA_KV_BATCH=1 CUDA_KV_ONLY="int:4 tc,int:4 tc2,int:2 tc,int:2 tc2,int:4 tc i8,int:4 tc2 i8,int:2 tc i8,int:2 tc2 i8" timeout 100 $B/cuda_kv_attn 4096 32768 131072 > $L/kv_r1.txt 2>&1; echo "== kv bench rc $? $(el)"
grep -E "sdpa|int:" $L/kv_r1.txt | cut -c1-130 | head -30
wait $CP; cat $L/conv.log
prompt=$(head -c 560 .cu/shared/data/heldout-books.txt)
run() { # label model bin env...
  local l=$1 m=$2 b=$3; shift 3
  env "$@" timeout 100 $B/$b $W/$m.kvq --gpu --ctx-max 1024 -p "$prompt" -n 256 --temp 0 > $L/run_$l.log 2>&1
  echo "$l: $(grep -hE 'decode' $L/run_$l.log | cut -c1-100) | $(grep -hoE 'on the device: weights [0-9.]+ MB' $L/run_$l.log)"
}
r=1
run "bf16_r$r" bf16 kvq-run
run "auto_r$r" e8 kvq-run
run "q_auto_r$r" e8q kvq-run
run "q_w4_r$r" e8q kvq-run KVQ_HQX_WIDTH=4
run "q_w4e32_r$r" e8q kvq-run KVQ_HQX_WIDTH=4 KVQ_CUDA_ESC16=0
run "w4_r$r" e8 kvq-run KVQ_HQX_WIDTH=4
echo "== done $(el)"
