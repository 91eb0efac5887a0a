#!/usr/bin/env bash
# session 19 call D (main d9f47b7: i12e and i12a merged): the escape prefetch (KVQ_CUDA_ESC_PF) and the rows-mode scratch
# fix on the device: suites while the 8B shape converts; then the 8B decode A/B — auto (5 bits) vs width 4, prefetch
# on / off, alternated; the model attention's split rule (KVQ_CUDA_ATTN_CMIN, if built); one timeline at width 4.
set -u
TESTS= . tests/bench/gpu_env.sh
L=$OUT
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
( $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1; nice $B/kvq-convert -q -t 12 $src $W/e8.kvq --weights hyperquant:e8:4.0; echo "conv rc $? $(el)" ) > $L/conv.log 2>&1 &
CP=$!
t() { # name suite filter timeout [env]
  local n=$1 s=$2 f=$3 to=$4; shift 4
  env KVQ_TEST_FILTER="$f" "$@" timeout $to $B/$s > $L/$n.log 2>&1; echo "== $n rc $? $(el)"
  grep -hE '^\[ +(FAILED|PASSED) +\]|FAILED' $L/$n.log | head -6
}
( t hqx test_cuda_hqx "*" 150; grep -hiE "esc.prefetch|escape" $L/hqx.log | cut -c1-220 | head -12
  t hqx_pf0 test_cuda_hqx "*" 150 KVQ_CUDA_ESC_PF=0
  t kv_rows test_cuda_kv "test_attend_rows*" 200 ) > $L/s1.sum 2>&1 &
S1=$!
( t model test_cuda_model "*" 300 ) > $L/s2.sum 2>&1 &
S2=$!
wait $S1 $S2; cat $L/s1.sum $L/s2.sum
wait $CP; cat $L/conv.log
prompt=$(head -c 560 .cu/shared/data/heldout-books.txt)
run() { # label env...
  local l=$1; shift
  env "$@" timeout 100 $B/kvq-run $W/e8.kvq --gpu --ctx-max 1024 -p "$prompt" -n 256 --temp 0 > $L/run_$l.log 2>&1
  echo "$l: $(grep -hE 'decode' $L/run_$l.log | cut -c1-120) | $(grep -hoE 'weights [0-9.]+ MB' $L/run_$l.log | head -1)"
}
# (the defaults: ESC_PF 1, ATTN_CMIN 64)
run auto_pf1 KVQ_CUDA_ESC_PF=1
run w4_pf1 KVQ_HQX_WIDTH=4 KVQ_CUDA_ESC_PF=1
run w4_pf0 KVQ_HQX_WIDTH=4 KVQ_CUDA_ESC_PF=0
run auto_cmin0 KVQ_CUDA_ATTN_CMIN=0
run auto_pf0 KVQ_CUDA_ESC_PF=0
run w4_pf1b KVQ_HQX_WIDTH=4 KVQ_CUDA_ESC_PF=1
run auto_pf1b KVQ_CUDA_ESC_PF=1
run auto_cmin0b KVQ_CUDA_ATTN_CMIN=0
if [ $(( $(date +%s) - t0 )) -lt 500 ]; then
  run tl_w4 KVQ_CUDA_TIMELINE=1 KVQ_CUDA_PDL=0 KVQ_HQX_WIDTH=4
  grep -hE "profile" $L/run_tl_w4.log | cut -c1-120 | head -8
fi
(cd $L && tar -czf logsD.tgz *.log *.sum && rm -f *.log *.sum)
echo "== done $(el)"
