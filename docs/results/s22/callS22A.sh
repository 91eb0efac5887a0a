#!/usr/bin/env bash
# session 22 call A: the whole GPU suites on this session's kernels (test_cuda_hqx with either escape form, test_cuda_kv,
# test_cuda_model, test_cuda_pq, test_cuda_verify, test_cuda_hq) while the 8B shape converts (E8 4.0, lm_head packed);
# the one-token kernel's batched row end decodes 16-bit entries straight to (col, delta) and counts big entries by
# ballots (no call on the way). Then the product alone (cuda_hqx 4096x14336, 14336x4096, width 4) and the 8B decode with
# KVQ_CUDA_ESC16 = 0 / 2 / 1 alternated, alone on the GPU. Logs in $OUT/A_logs.tgz.
set -u
TESTS= . tests/bench/gpu_env.sh
L=/tmp/logsA; mkdir -p $L
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
( t kv test_cuda_kv "*" 330 ) > $L/kv_summary.txt 2>&1 &
KP=$!
t hqx test_cuda_hqx "*" 90
t hqx16 test_cuda_hqx "*" 90 KVQ_CUDA_ESC16=1
t model test_cuda_model "*" 200
t pq test_cuda_pq "*" 60
t verify test_cuda_verify "*" 60
t hq test_cuda_hq "*" 60
wait $KP; cat $L/kv_summary.txt
wait $CP; cat $L/conv.log
for e in 0 2; do KVQ_HQX_WIDTH=4 KVQ_CUDA_ESC16=$e timeout 60 $B/cuda_hqx 4096x14336 14336x4096 > $L/hqx_bench_e$e.txt 2>&1; echo "== cuda_hqx ESC16=$e $(el)"; grep -E "^\| (4096|14336)" $L/hqx_bench_e$e.txt | grep -i 'e8' | cut -c1-150 | head -4; done
prompt=$(head -c 560 .cu/shared/data/heldout-books.txt)
run() { # label env...
  local l=$1; shift
  env "$@" timeout 40 $B/kvq-run $W/e8q.kvq --gpu --ctx-max 1024 -p "$prompt" -n 256 --temp 0 > $L/run_$l.log 2>&1
  echo "$l: $(grep -hE 'decode|rror' $L/run_$l.log | cut -c1-60) | $(grep -hoE 'on the device: weights [0-9.]+ MB' $L/run_$l.log) $(el)"
}
for x in e0_r1:0 e2_r1:2 e1_r1:1 e0_r2:0 e2_r2:2 e0_r3:0 e2_r3:2; do run w4_${x%%:*} KVQ_HQX_WIDTH=4 KVQ_CUDA_ESC16=${x##*:}; done
for f in $L/run_*.log; do echo "$(basename $f) text $(grep -av -E 'tok/s|MB|ms' $f | md5sum | cut -c1-8)"; done
tar -C /tmp -czf $OUT/A_logs.tgz logsA
echo "== done $(el)"
