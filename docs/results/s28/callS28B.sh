#!/usr/bin/env bash
# Session 28 call B: the lean one-token product with the row's step count known at compile time (hqx_gemv1s_k's SC = 4
# for rows of 4096 columns: q/k/v, o, gate/up on the 8B shape) and the fold's part found once a block. Bundle: OLD=main's
# build/kvq-run (86349c1) BINS="kvq-run kvq-convert make_synth_llama test_cuda_hqx test_cuda_model" MODELS=1
# bash tests/bench/gpu_bundle.sh. (1) the suites (same bits: compare() mode 10 and the fold test's case 6 against the run-time
# count; the knob's refusal in test_cuda_model); (2) kvq-tiny-llama's logits and text equal to main's; (3) Nsight Compute
# on the four lean launches of one step of a 2-layer 8B-shaped model, main and new (instructions, duration);
# (4) the 8B E8 4.0 decode: main, new, new with KVQ_CUDA_G1SC=0, alternated 3 times.
set -u
TESTS= . tests/bench/gpu_env.sh
W=/tmp/w8; L=/tmp/logsB; mkdir -p $W $L
gpu_convert8b e8="--weights hyperquant:e8:4.0"
gpu_suite hqx test_cuda_hqx "*" 200
grep -E "int8/rs|fold case 1 .*fold 1 offset 0" $L/hqx.log | head -8 | cut -c1-160
gpu_suite model test_cuda_model "*" 300
gpu_tiny old kvq-run.old; gpu_tiny new kvq-run; gpu_tiny new_nosc kvq-run KVQ_CUDA_G1SC=0
gpu_pack B_logs
W2=/tmp/w2; mkdir -p $W2
$B/make_synth_llama 8b $W2/src tests/models/kvq-tiny-llama 1 2 > $L/synth2.log 2>&1
$B/kvq-convert -q -t 4 $W2/src $W2/e8.kvq --weights hyperquant:e8:4.0 > $L/conv2.log 2>&1; echo "2-layer e8 rc $? $(el)"
N=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
prompt=$(head -c 560 .cu/shared/data/heldout-books.txt)
for b in old new; do
  bin=kvq-run; [ $b = old ] && bin=kvq-run.old
  timeout 150 $N --clock-control none -k regex:hqx_gemv1s_k -s 8 -c 4 --section SpeedOfLight --section LaunchStats --section Occupancy \
    --section WarpStateStats --section SchedulerStats --section InstructionStats -o $L/n_$b $B/$bin $W2/e8.kvq --gpu --ctx-max 1024 -p "$prompt" \
    -n 8 --temp 0 > $L/ncu_$b.log 2>&1; echo "== ncu $b rc $? $(el)"
  $N --import $L/n_$b.ncu-rep --page details > $L/n_${b}_details.txt 2>&1; rm -f $L/n_$b.ncu-rep
  grep -E "hqx_gemv1s|Duration|Registers Per|Issued Warp Per|Warp Cycles Per Issued|DRAM Throughput|Executed Instructions  " $L/n_${b}_details.txt \
    | head -32 | cut -c1-120
done
gpu_pack B_logs
gpu_wait e8
for i in 1 2 3; do
  gpu_decode old_$i kvq-run.old $W/e8.kvq; gpu_decode new_$i kvq-run $W/e8.kvq; gpu_decode nosc_$i kvq-run $W/e8.kvq KVQ_CUDA_G1SC=0
done
for f in $L/run_*.log; do echo "$(basename $f) text $(grep -av -E 'tok/s|MB|ms' $f | md5sum | cut -c1-8)"; done
gpu_pack B_logs
echo "== done $(el)"
