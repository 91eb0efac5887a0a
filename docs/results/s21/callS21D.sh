#!/usr/bin/env bash
# session 21 call D: the 16-bit escapes' accessor without its 7 predicated segment loads per escape (a uniform branch on
# the tensor's segment count): test_cuda_hqx (every product the same bits with either form) while the 8B shape converts
# (E8 4.0, lm_head packed), then at width 4 KVQ_CUDA_ESC16 = 0 / 2 / 1 alternated, two rounds; the one-token products
# alone (cuda_hqx, 4096x14336 and 14336x4096 at width 4) in each form. Logs in $OUT/D_logs.tgz.
set -u
TESTS= . tests/bench/gpu_env.sh
L=/tmp/logsD; mkdir -p $L
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
( $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1; echo "synth $(el)"
  nice $B/kvq-convert -q -t 14 $src $W/e8q.kvq --weights hyperquant:e8:4.0 --quantize-embeddings
  echo "conv done: $(ls $W/*.kvq | tr '\n' ' ') $(el)" ) > $L/conv.log 2>&1 &
CP=$!
timeout 150 $B/test_cuda_hqx > $L/hqx.log 2>&1; echo "== test_cuda_hqx rc $? $(el)"; grep -hE '^\[ +(FAILED|PASSED) +\]|FAILED|DIFFER' $L/hqx.log | head -6
KVQ_CUDA_ESC16=1 timeout 150 $B/test_cuda_hqx > $L/hqx16.log 2>&1; echo "== test_cuda_hqx ESC16=1 rc $? $(el)"; grep -hE '^\[ +(FAILED|PASSED) +\]|FAILED|DIFFER' $L/hqx16.log | head -6
wait $CP; cat $L/conv.log
for e in 0 2 1; do KVQ_HQX_WIDTH=4 KVQ_CUDA_ESC16=$e timeout 60 $B/cuda_hqx 4096x14336 14336x4096 > $L/hqx_bench_e$e.txt 2>&1; echo "== cuda_hqx ESC16=$e $(el)"; grep -E "^\| (4096|14336)" $L/hqx_bench_e$e.txt | grep -i 'e8' | cut -c1-150 | head -4; done
prompt=$(head -c 560 .cu/shared/data/heldout-books.txt)
run() { # label timeout env...
  local l=$1 to=$2; shift 2
  env "$@" timeout $to $B/kvq-run $W/e8q.kvq --gpu --ctx-max 1024 -p "$prompt" -n 256 --temp 0 > $L/run_$l.log 2>&1
  echo "$l: $(grep -hE 'decode|rror' $L/run_$l.log | cut -c1-100) | $(grep -hoE 'on the device: weights [0-9.]+ MB' $L/run_$l.log) $(el)"
}
for r in 1 2; do
  for e in 0 2 1; do run w4_e${e}_r$r 60 KVQ_HQX_WIDTH=4 KVQ_CUDA_ESC16=$e; done
done
run auto_r1 60
for f in $L/run_*.log; do echo "$(basename $f) text $(grep -av -E 'tok/s|MB|ms' $f | md5sum | cut -c1-8)"; done
tar -C /tmp -czf $OUT/D_logs.tgz logsD
echo "== done $(el)"
