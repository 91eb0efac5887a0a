#!/usr/bin/env bash
# session 24 call A (H200): the lean one-token kernel (hqx_gemv1s_k, kernels/cuda/hqx_gemv1.cu; KVQ_CUDA_G1S=0 keeps
# hqx_gemv1p_k). (1) the GPU suites that hold it to the CPU and to hqx_gemv1p_k bit for bit (test_cuda_hqx with either
# escape form, test_cuda_model) while the 8B shape converts to E8 4.0; (2) the one-token products alone (cuda_hqx,
# the 8B shapes at width 4), lean on/off alternated; Nsight Compute on both kernels at 14336x4096; (3) the 8B decode,
# E8 4.0 (bf16 lm_head), lean on/off alternated. Logs in $OUT/A_logs.tgz.
set -u
TESTS= . tests/bench/gpu_env.sh
L=/tmp/logsA; mkdir -p $L
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
( $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1; echo "synth $(el)"
  nice $B/kvq-convert -q -t 12 $src $W/e8.kvq --weights hyperquant:e8:4.0; echo "e8 $(el)" ) > $L/conv.log 2>&1 &
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
grep -hE "lean|int8/p2|fold case 0 .* fold 1 offset 0" $L/hqx.log | head -4 | cut -c1-160
wait $MP; cat $L/model_summary.txt
for r in 1 2; do for g in 1 0; do
  KVQ_HQX_WIDTH=4 KVQ_HQX_CODECS=1 KVQ_CUDA_G1S=$g timeout 60 $B/cuda_hqx 6144x4096 4096x4096 28672x4096 4096x14336 > $L/bench_g${g}_r$r.txt 2>&1
  echo "== cuda_hqx G1S=$g r$r $(el)"; grep -E "^\| [0-9]+x" $L/bench_g${g}_r$r.txt | cut -d'|' -f2,3,6,7,8,9,10,11,12 | head -4
  KVQ_HQX_FOLD=1 KVQ_HQX_WIDTH=4 KVQ_HQX_CODECS=1 KVQ_CUDA_G1S=$g timeout 60 $B/cuda_hqx 6144x4096 28672x4096 > $L/fold_g${g}_r$r.txt 2>&1
  echo "== cuda_hqx fold G1S=$g r$r $(el)"; grep -E "^\| [0-9]+x" $L/fold_g${g}_r$r.txt | cut -d'|' -f2,3,6,7,8,9,10,11,12 | head -2
done; done
N=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
S="--section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats --section InstructionStats"
for g in 1 0; do
  KVQ_HQX_WIDTH=4 KVQ_HQX_CODECS=1 KVQ_CUDA_G1S=$g timeout 100 $N --clock-control none -k regex:hqx_gemv1 -s 30 -c 1 $S \
    $B/cuda_hqx 14336x4096 > $L/ncu_g$g.txt 2>&1; echo "== ncu G1S=$g rc $? $(el)"
  grep -E "^  void|Duration|DRAM Throughput|Achieved Occupancy|Registers Per Thread|Executed Instructions  |Issued Warp Per|Warp Cycles Per Issued" $L/ncu_g$g.txt | head -10 | cut -c1-150
done
wait $CP; cat $L/conv.log
prompt=$(head -c 560 .cu/shared/data/heldout-books.txt)
run() { # label model env...
  local l=$1 m=$2; shift 2
  env "$@" timeout 60 $B/kvq-run $m --gpu --ctx-max 1024 -p "$prompt" -n 256 --temp 0 > $L/run_$l.log 2>&1
  echo "$l: $(grep -ahE 'decode|rror' $L/run_$l.log | cut -c1-70) | $(grep -ahoE 'on the device: weights [0-9.]+ MB' $L/run_$l.log) $(el)"
}
for r in 1 2 3; do
  run e8_g1_r$r $W/e8.kvq KVQ_CUDA_G1S=1
  run e8_g0_r$r $W/e8.kvq KVQ_CUDA_G1S=0
done
for f in $L/run_*.log; do echo "$(basename $f) text $(grep -av -E 'tok/s|MB|ms' $f | md5sum | cut -c1-8)"; done
tar -C /tmp -czf $OUT/A_logs.tgz logsA
echo "== done $(el)"
