#!/usr/bin/env bash
# session 24 call B (H200): the lean one-token kernel at widths 4 and 5. (1) test_cuda_hqx (both escape forms) and
# test_cuda_model again (width 5 now takes it) while the 8B shape converts (bf16 `none`, E8 4.0); (2) the products
# alone at width 5 (the automatic width of E8 4.0) lean on/off and width 4 lean, alternated; Nsight Compute on the
# width-5 kernels; (3) the 8B decode, alternated: our bf16, E8 4.0 at its automatic width lean on / off, E8 4.0 at
# width 4 (KVQ_HQX_WIDTH=4) lean on. Logs in $OUT/B_logs.tgz.
set -u
TESTS= . tests/bench/gpu_env.sh
L=/tmp/logsB; mkdir -p $L
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
( t model test_cuda_model "*" 200 ) > $L/model_summary.txt 2>&1 &
MP=$!
t hqx test_cuda_hqx "*" 120
t hqx16 test_cuda_hqx "*" 120 KVQ_CUDA_ESC16=1
wait $MP; cat $L/model_summary.txt
for r in 1 2; do for c in "5 1" "5 0" "4 1"; do set -- $c
  KVQ_HQX_WIDTH=$1 KVQ_HQX_CODECS=1 KVQ_CUDA_G1S=$2 timeout 60 $B/cuda_hqx 6144x4096 4096x4096 28672x4096 4096x14336 > $L/bench_w$1_g$2_r$r.txt 2>&1
  echo "== cuda_hqx width $1 G1S=$2 r$r $(el)"; grep -E "^\| [0-9]+x" $L/bench_w$1_g$2_r$r.txt | cut -d'|' -f2,5,6,7,8,9,10,11,12 | head -4
done; done
N=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
S="--section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats --section InstructionStats"
for g in 1 0; do
  KVQ_HQX_WIDTH=5 KVQ_HQX_CODECS=1 KVQ_CUDA_G1S=$g timeout 100 $N --clock-control none -k regex:hqx_gemv1 -s 30 -c 1 $S \
    $B/cuda_hqx 14336x4096 > $L/ncu_w5_g$g.txt 2>&1; echo "== ncu width 5 G1S=$g rc $? $(el)"
  grep -E "^  void|Duration|DRAM Throughput|Achieved Occupancy|Executed Instructions  |Issued Warp Per" $L/ncu_w5_g$g.txt | head -8 | cut -c1-150
done
wait $CP; cat $L/conv.log
prompt=$(head -c 560 .cu/shared/data/heldout-books.txt)
run() { # label model env...
  local l=$1 m=$2; shift 2
  env "$@" timeout 100 $B/kvq-run $m --gpu --ctx-max 1024 -p "$prompt" -n 256 --temp 0 > $L/run_$l.log 2>&1
  echo "$l: $(grep -ahoE 'loaded in [0-9.]+ s' $L/run_$l.log) | $(grep -ahE 'decode|rror' $L/run_$l.log | cut -c1-70) | $(grep -ahoE 'on the device: weights [0-9.]+ MB' $L/run_$l.log) $(el)"
}
for r in 1 2; do
  run bf16_r$r $W/bf16.kvq
  run e8_g1_r$r $W/e8.kvq KVQ_CUDA_G1S=1
  run e8_g0_r$r $W/e8.kvq KVQ_CUDA_G1S=0
  run e8w4_g1_r$r $W/e8.kvq KVQ_CUDA_G1S=1 KVQ_HQX_WIDTH=4
done
for f in $L/run_*.log; do echo "$(basename $f) text $(grep -av -E 'tok/s|MB|ms' $f | md5sum | cut -c1-8)"; done
tar -C /tmp -czf $OUT/B_logs.tgz logsB
echo "== done $(el)"
