#!/usr/bin/env bash
# session 24 call C (H200): each lean warp's first rows prefetched into L2 before its wait (KVQ_CUDA_G1PF=n,
# g1s_prefetch). (1) test_cuda_hqx with either escape form (the prefetch's bits); (2) the 8B decode, E8 4.0 at its
# automatic width (5), KVQ_CUDA_G1PF = 0, 1, 2, 4 alternated, twice; the step's timeline at 0 and 2
# (KVQ_CUDA_TIMELINE=1 KVQ_CUDA_PDL=0); our bf16 in the same call. Logs in $OUT/C_logs.tgz.
set -u
TESTS= . tests/bench/gpu_env.sh
L=/tmp/logsC; mkdir -p $L
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
( $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1; echo "synth $(el)"
  nice $B/kvq-convert -q -t 12 $src $W/e8.kvq --weights hyperquant:e8:4.0; echo "e8 $(el)"
  nice $B/kvq-convert -q -t 12 $src $W/bf16.kvq --weights none; echo "none $(el)" ) > $L/conv.log 2>&1 &
CP=$!
t() { # name suite filter timeout [env]
  local n=$1 s=$2 f=$3 to=$4; shift 4
  env KVQ_TEST_FILTER="$f" "$@" timeout $to $B/$s > $L/$n.log 2>&1; echo "== $n rc $? $(el)"
  grep -hE '^\[ +(FAILED|PASSED) +\]|FAILED' $L/$n.log | head -6
}
t hqx test_cuda_hqx "*" 120
t hqx16 test_cuda_hqx "*" 120 KVQ_CUDA_ESC16=1
while [ ! -s $W/e8.kvq ] || ! grep -q "^e8 " $L/conv.log; do sleep 2; done; echo "e8 ready $(el)"
prompt=$(head -c 560 .cu/shared/data/heldout-books.txt)
run() { # label model env...
  local l=$1 m=$2; shift 2
  env "$@" timeout 100 $B/kvq-run $m --gpu --ctx-max 1024 -p "$prompt" -n 256 --temp 0 > $L/run_$l.log 2>&1
  echo "$l: $(grep -ahoE 'loaded in [0-9.]+ s' $L/run_$l.log) | $(grep -ahE 'decode|rror' $L/run_$l.log | cut -c1-70) | $(grep -ahoE 'on the device: weights [0-9.]+ MB' $L/run_$l.log) $(el)"
}
for r in 1 2; do for p in 0 1 2 4; do run e8_pf${p}_r$r $W/e8.kvq KVQ_CUDA_G1PF=$p; done; done
for p in 0 2; do run e8_tl_pf$p $W/e8.kvq KVQ_CUDA_G1PF=$p KVQ_CUDA_TIMELINE=1 KVQ_CUDA_PDL=0
  grep -a "kvq cuda profile" $L/run_e8_tl_pf$p.log | head -12 | cut -c19-130; done
wait $CP; cat $L/conv.log
for r in 1 2; do run bf16_r$r $W/bf16.kvq; run e8_pf2_r$((r + 2)) $W/e8.kvq KVQ_CUDA_G1PF=2; done
for f in $L/run_*.log; do echo "$(basename $f) text $(grep -av -E 'tok/s|MB|ms|kvq cuda profile' $f | md5sum | cut -c1-8)"; done
tar -C /tmp -czf $OUT/C_logs.tgz logsC
echo "== done $(el)"
