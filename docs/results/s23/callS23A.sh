#!/usr/bin/env bash
# session 23 call A: the first call on the H200 (the lent kind changed from the H100 this session). The whole GPU suites
# (test_cuda_hqx with either escape form, test_cuda_kv, test_cuda_pq, test_cuda_verify, test_cuda_hq; test_cuda_model
# alone) while the 8B shape converts (E8 4.0, E8 3.0, E8 4.0 with the lm_head packed); then, alone on the GPU, the 8B
# decode table: bf16, E8 4.0 / 3.0 (bf16 lm_head, automatic width), lm_head packed at width 4 with 32-bit and 16-bit
# escapes, alternated, and the one-token products (cuda_hqx). Logs in $OUT/A_logs.tgz.
set -u
TESTS= . tests/bench/gpu_env.sh
nvidia-smi --query-gpu=name,clocks.max.sm,clocks.max.mem --format=csv,noheader
L=/tmp/logsA; mkdir -p $L
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
( $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1; echo "synth $(el)"
  nice $B/kvq-convert -q -t 12 $src $W/e8.kvq --weights hyperquant:e8:4.0; echo "e8 $(el)"
  nice $B/kvq-convert -q -t 12 $src $W/e8q.kvq --weights hyperquant:e8:4.0 --quantize-embeddings; echo "e8q $(el)"
  nice $B/kvq-convert -q -t 12 $src $W/e83.kvq --weights hyperquant:e8:3.0; echo "e83 $(el)"
  echo "conv done: $(ls $W/*.kvq | tr '\n' ' ') $(el)" ) > $L/conv.log 2>&1 &
CP=$!
t() { # name suite filter timeout [env]
  local n=$1 s=$2 f=$3 to=$4; shift 4
  env KVQ_TEST_FILTER="$f" "$@" timeout $to $B/$s > $L/$n.log 2>&1; echo "== $n rc $? $(el)"
  grep -hE '^\[ +(FAILED|PASSED) +\]|FAILED' $L/$n.log | head -6
}
( t kv test_cuda_kv "*" 330 ) > $L/kv_summary.txt 2>&1 &
KP=$!
t hqx test_cuda_hqx "*" 90
t hqx16 test_cuda_hqx "*" 90 KVQ_CUDA_ESC16=1
t pq test_cuda_pq "*" 60
t verify test_cuda_verify "*" 60
t hq test_cuda_hq "*" 60
wait $KP; cat $L/kv_summary.txt
t model test_cuda_model "*" 150
wait $CP; cat $L/conv.log
for e in 0 2; do KVQ_HQX_WIDTH=4 KVQ_CUDA_ESC16=$e timeout 60 $B/cuda_hqx 4096x14336 14336x4096 > $L/hqx_bench_e$e.txt 2>&1; echo "== cuda_hqx ESC16=$e $(el)"; grep -E "^\| (4096|14336)" $L/hqx_bench_e$e.txt | grep -iE 'e8|bf16|copy' | cut -c1-150 | head -6; done
prompt=$(head -c 560 .cu/shared/data/heldout-books.txt)
run() { # label model env...
  local l=$1 m=$2; shift 2
  env "$@" timeout 60 $B/kvq-run $m --gpu --ctx-max 1024 -p "$prompt" -n 256 --temp 0 > $L/run_$l.log 2>&1
  echo "$l: $(grep -hE 'decode|rror' $L/run_$l.log | cut -c1-70) | $(grep -hoE 'on the device: weights [0-9.]+ MB' $L/run_$l.log) $(el)"
}
for r in 1 2; do
  run bf16_r$r $src
  run e8_r$r $W/e8.kvq
  run e83_r$r $W/e83.kvq
  run w4e0_r$r $W/e8q.kvq KVQ_HQX_WIDTH=4 KVQ_CUDA_ESC16=0
  run w4e2_r$r $W/e8q.kvq KVQ_HQX_WIDTH=4 KVQ_CUDA_ESC16=2
done
for f in $L/run_*.log; do echo "$(basename $f) text $(grep -av -E 'tok/s|MB|ms' $f | md5sum | cut -c1-8)"; done
tar -C /tmp -czf $OUT/A_logs.tgz logsA
echo "== done $(el)"
