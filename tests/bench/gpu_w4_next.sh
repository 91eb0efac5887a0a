#!/usr/bin/env bash
# Device call (issue 12, prepared in session 19 for the next): why width 4 (nibbles + ~2 % escapes) decodes at 0.91×
# the 5-bit layout on the 8B shape. (1) the suite lines of the escape modes; (2) the decode run (prompt 182,
# 256 greedy tokens, E8 4.0, bf16 lm_head) alternated over: auto, width 4 as today, width 4 with the row end's escape
# loads batched (KVQ_CUDA_ESC_PF=2), width 4 with a ring of 3 in the unfolded products (KVQ_CUDA_G1P=3), both; (3)
# Nsight Compute on the products alone (cuda_hqx, the gate/up shape folded and down) at width 4 and auto: issued
# instructions, warp stall reasons, DRAM throughput.
# usage (on the device, carry [".cu"]; bundle: BINS="kvq-run kvq-convert make_synth_llama test_cuda_hqx cuda_hqx"
# bash tests/bench/gpu_bundle.sh): [ROUNDS=2] [NCU=1] bash tests/bench/gpu_w4_next.sh
set -u
TESTS= . tests/bench/gpu_env.sh
L=${OUT:-/tmp}
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
( [ -f $src/config.json ] || $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1
  [ -f $W/e8.kvq ] || nice $B/kvq-convert -q -t 12 $src $W/e8.kvq --weights hyperquant:e8:4.0; echo "conv rc $? $(el)" ) > $L/conv.log 2>&1 &
CP=$!
KVQ_TEST_FILTER="test_esc_prefetch" timeout 120 $B/test_cuda_hqx > $L/esc.log 2>&1; echo "== test_esc_prefetch rc $? $(el)"
grep -hE '^\[ +(FAILED|PASSED) +\]|same bits|DIFFER' $L/esc.log | cut -c1-200 | head -14
wait $CP; cat $L/conv.log
prompt=$(head -c 560 .cu/shared/data/heldout-books.txt)
run() { # label env...
  local l=$1; shift
  env "$@" timeout 100 $B/kvq-run $W/e8.kvq --gpu --ctx-max 1024 -p "$prompt" -n 256 --temp 0 > $L/run_$l.log 2>&1
  echo "$l: $(grep -hE 'decode' $L/run_$l.log | cut -c1-110) | $(grep -hoE 'on the device: weights [0-9.]+ MB' $L/run_$l.log)"
}
for r in $(seq ${ROUNDS:-2}); do
  run "auto r$r"
  run "w4 r$r" KVQ_HQX_WIDTH=4
  run "w4 pf2 r$r" KVQ_HQX_WIDTH=4 KVQ_CUDA_ESC_PF=2
  run "w4 g1p3 r$r" KVQ_HQX_WIDTH=4 KVQ_CUDA_G1P=3
  run "w4 pf2 g1p3 r$r" KVQ_HQX_WIDTH=4 KVQ_CUDA_ESC_PF=2 KVQ_CUDA_G1P=3
  run "auto pf2 r$r" KVQ_CUDA_ESC_PF=2
done
echo "== decode A/B done $(el)"
if [ "${NCU:-1}" = 1 ]; then
  N=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  for w in "" 4; do
    KVQ_HQX_WIDTH=$w KVQ_HQX_CODECS=1 KVQ_HQX_FOLD=1 timeout 150 $N -k regex:hqx_gemv1p -s 6 -c 4 --section SpeedOfLight --section WarpStateStats \
      --section SchedulerStats --section LaunchStats $B/cuda_hqx 28672x4096 4096x14336 > $L/ncu_w${w:-auto}.txt 2>&1
    echo "== ncu width ${w:-auto} rc $? $(el)"
    grep -E "hqx_gemv1p|Duration|DRAM Throughput|Issued Ipc|Stall|Registers Per|Warp Cycles Per Issued" $L/ncu_w${w:-auto}.txt | cut -c1-150 | head -40
  done
fi
echo "== done $(el)"
