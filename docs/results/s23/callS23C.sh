#!/usr/bin/env bash
# session 23 call C (H200): (1) the KV table's tensor-core rows that call B left out (the runtime's defaults for
# TurboQuant, qturbo, turboquant-prod, OCTOPUS) beside SDPA, and Nsight Compute on int:4 tc at 128k and on the one-token
# product (14336x4096, E8 4.0, width 4) — the H200's profiles of the two issues' bottlenecks; (2) the bf16 loader fix
# (bf16 tensors held as stored, no trip through float32: call B loaded the 8B bf16 .kvq in 116 s) and E8 4.0 (its bf16
# lm_head), load time and decode; the E8 step's timeline (KVQ_CUDA_TIMELINE=1 KVQ_CUDA_PDL=0, µs an op); (3) HF
# transformers bf16 as the outside peer if the time allows. Logs in $OUT/C_logs.tgz.
set -u
TESTS= . tests/bench/gpu_env.sh
L=/tmp/logsC; mkdir -p $L
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
( $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1; echo "synth $(el)"
  nice $B/kvq-convert -q -t 12 $src $W/bf16.kvq --weights none; echo "none $(el)"
  nice $B/kvq-convert -q -t 12 $src $W/e8.kvq --weights hyperquant:e8:4.0; echo "e8 $(el)" ) > $L/conv.log 2>&1 &
CP=$!
SDPA_BATCH=1 timeout 100 python3 tests/bench/cuda_kv_sdpa.py 4096 32768 131072 > $L/sdpa.txt 2>&1; echo "== sdpa rc $? $(el)"
grep -E "^\| [0-9]+k \| 1 " $L/sdpa.txt
ROWS="int:4 tc,int:2 tc,turboquant:4 tc,turboquant:4 tc2,turboquant:2 tc,qturbo:4 tc,qturbo:2 tc,turboquant-prod:4 tc,turboquant-prod:2 tc,octopus:4 tc,octopus:4 tc2,octopus:2 tc,octopus:4:qjl tc,int:4 tc i8,int:2 tc i8,int:4 pipe4 i8"
CUDA_KV_BATCH=1 CUDA_KV_ONLY="$ROWS" timeout 200 $B/cuda_kv_attn 4096 32768 131072 > $L/kv_b1.txt 2>&1; echo "== kv table rc $? $(el)"
grep -E "^\| (4k|32k|128k) " $L/kv_b1.txt | cut -c1-110
N=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
S="--section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats --section MemoryWorkloadAnalysis"
CUDA_KV_NO_BASE=1 CUDA_KV_BATCH=1 CUDA_KV_ONLY="int:4 tc" timeout 120 $N --clock-control none -k regex:attn_tc --launch-count 1 $S \
  $B/cuda_kv_attn 131072 > $L/ncu_int4tc_128k.txt 2>&1; echo "== ncu int:4 tc rc $? $(el)"
grep -E "^  [a-z_]+<|^  void|Duration|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per Thread|Issue Slots Busy|Warp Cycles Per Issued Instruction|No Eligible|Theoretical Occ" $L/ncu_int4tc_128k.txt | head -14 | cut -c1-150
KVQ_HQX_WIDTH=4 KVQ_HQX_CODECS=1 timeout 100 $N --clock-control none -k regex:hqx_gemv1 -s 30 -c 1 $S \
  $B/cuda_hqx 14336x4096 > $L/ncu_gemv1.txt 2>&1; echo "== ncu gemv1 rc $? $(el)"
grep -E "^  [a-z_]+<|^  void|Duration|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per Thread|Issue Slots Busy|Warp Cycles Per Issued Instruction|No Eligible|Theoretical Occ" $L/ncu_gemv1.txt | head -14 | cut -c1-150
wait $CP; cat $L/conv.log
prompt=$(head -c 560 .cu/shared/data/heldout-books.txt)
run() { # label model env...
  local l=$1 m=$2; shift 2
  env "$@" timeout 150 $B/kvq-run $m --gpu --ctx-max 1024 -p "$prompt" -n 256 --temp 0 > $L/run_$l.log 2>&1
  echo "$l: $(grep -ahoE 'loaded in [0-9.]+ s' $L/run_$l.log) | $(grep -ahE 'decode|rror' $L/run_$l.log | cut -c1-70) | $(grep -ahoE 'on the device: weights [0-9.]+ MB' $L/run_$l.log) $(el)"
}
run bf16_r1 $W/bf16.kvq
run e8_r1 $W/e8.kvq
run bf16_r2 $W/bf16.kvq
run e8_r2 $W/e8.kvq
run e8_tl $W/e8.kvq KVQ_CUDA_TIMELINE=1 KVQ_CUDA_PDL=0
grep -a "kvq cuda profile" $L/run_e8_tl.log | head -40 | cut -c1-130
for f in $L/run_*.log; do echo "$(basename $f) text $(grep -av -E "tok/s|MB|ms|kvq cuda profile" $f | md5sum | cut -c1-8)"; done
left=$(( 560 - ($(date +%s) - t0) ))
if [ $left -gt 90 ]; then timeout $left python3 tests/bench/gpu_hf_peer.py $src 128 256 > $L/peer.txt 2>&1; echo "== peer rc $? $(el)"; grep -v Warning $L/peer.txt | tail -6; fi
tar -C /tmp -czf $OUT/C_logs.tgz logsC
echo "== done $(el)"
