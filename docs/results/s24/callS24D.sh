#!/usr/bin/env bash
# session 24 call D (H200): the decode table's HyperQuant rows with the lean kernel (the final binaries): our bf16,
# E8 4.0 (bf16 lm_head, automatic width), E8 4.0 with the lm_head packed (--quantize-embeddings) at its automatic
# width and at width 4 with 16-bit escapes (the <= 0.3x memory row), alternated; test_cuda_hqx once more; Nsight
# Compute on the short-context attention kernel of a decode step (attend_split_k, T ~ 185: the step's largest cost
# that is not a product). Logs in $OUT/D_logs.tgz.
set -u
TESTS= . tests/bench/gpu_env.sh
L=/tmp/logsD; mkdir -p $L
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
( $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1; echo "synth $(el)"
  nice $B/kvq-convert -q -t 12 $src $W/e8.kvq --weights hyperquant:e8:4.0; echo "e8 $(el)"
  nice $B/kvq-convert -q -t 12 $src $W/e8q.kvq --weights hyperquant:e8:4.0 --quantize-embeddings; echo "e8q $(el)"
  nice $B/kvq-convert -q -t 12 $src $W/bf16.kvq --weights none; echo "none $(el)" ) > $L/conv.log 2>&1 &
CP=$!
KVQ_TEST_FILTER="*" timeout 60 $B/test_cuda_hqx > $L/hqx.log 2>&1; echo "== hqx rc $? $(el)"; grep -hE '^\[ +(FAILED|PASSED) +\]' $L/hqx.log
waitfor() { while ! grep -q "^$1 " $L/conv.log; do sleep 2; done; echo "$1 ready $(el)"; }
prompt=$(head -c 560 .cu/shared/data/heldout-books.txt)
run() { # label model env...
  local l=$1 m=$2; shift 2
  env "$@" timeout 100 $B/kvq-run $m --gpu --ctx-max 1024 -p "$prompt" -n 256 --temp 0 > $L/run_$l.log 2>&1
  echo "$l: $(grep -ahoE 'loaded in [0-9.]+ s' $L/run_$l.log) | $(grep -ahE 'decode|rror' $L/run_$l.log | cut -c1-70) | $(grep -ahoE 'on the device: weights [0-9.]+ MB' $L/run_$l.log) $(el)"
}
waitfor e8
N=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
S="--section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats --section InstructionStats --section MemoryWorkloadAnalysis"
timeout 90 $N --clock-control none -k regex:attend_split_k -s 70 -c 1 $S $B/kvq-run $W/e8.kvq --gpu --ctx-max 1024 -p "$prompt" -n 4 --temp 0 \
  > $L/ncu_attn.txt 2>&1; echo "== ncu attend rc $? $(el)"
grep -E "^  void|^  attend|Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Executed Instructions  |Issued Warp Per|Warp Cycles Per Issued|Grid Size|Block Size" $L/ncu_attn.txt | head -12 | cut -c1-150
waitfor e8q
round() { run e8_r$1 $W/e8.kvq; run e8q_r$1 $W/e8q.kvq; run e8q_w4e16_r$1 $W/e8q.kvq KVQ_HQX_WIDTH=4 KVQ_CUDA_ESC16=1; }
round 1
waitfor none
run bf16_r1 $W/bf16.kvq
round 2
run bf16_r2 $W/bf16.kvq
for f in $L/run_*.log; do echo "$(basename $f) text $(grep -av -E 'tok/s|MB|ms' $f | md5sum | cut -c1-8)"; done
tar -C /tmp -czf $OUT/D_logs.tgz logsD
echo "== done $(el)"
