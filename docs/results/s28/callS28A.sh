#!/usr/bin/env bash
# Session 28 call A (prepared in session 27 as docs/results/s27/callS28A.sh, which this replaces; run with two additions:
# the new build's sections below and the raw page). Bundle from branch s27-chain's hqx_gemv1.cu with main's kvq-run as the
# baseline: OLD=<main's build/kvq-run> BINS="kvq-run kvq-convert make_synth_llama test_cuda_hqx" MODELS=1
# bash tests/bench/gpu_bundle.sh; then copy .cu into /work/main (the device tool carries main's tree).
# (1) s27-chain's g1s_step: width 5's eight dependent dp4a as two chains of four, and the terms that do not depend on the
#     weights (−moff·Σ v, the coset bits' dp2a) off the chain — the same integer sums, so the same bits: test_cuda_hqx,
#     kvq-tiny-llama's logits equal to main's, the 8B E8 4.0 decode main / branch alternated ×3.
# (2) Nsight Compute on the lean product's four launches of one decode step (q/k/v and gate/up folded, o and down not)
#     in a 2-layer 8B-shaped model: where the warps stall (--set full; the SASS page by region, sass_regions.py) — the
#     profile that says why the products reach 55-76 % of copy bandwidth while the bf16 kernel reaches 97-107 %.
set -u
TESTS= . tests/bench/gpu_env.sh
W=/tmp/w8; L=/tmp/logsA; mkdir -p $W $L
gpu_convert8b e8="--weights hyperquant:e8:4.0"
gpu_suite hqx test_cuda_hqx "*" 120
gpu_tiny old kvq-run.old; gpu_tiny new kvq-run
W2=/tmp/w2; mkdir -p $W2
$B/make_synth_llama 8b $W2/src tests/models/kvq-tiny-llama 1 2 > $L/synth2.log 2>&1
$B/kvq-convert -q -t 4 $W2/src $W2/e8.kvq --weights hyperquant:e8:4.0 > $L/conv2.log 2>&1; echo "2-layer e8 rc $? $(el)"
N=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
prompt=$(head -c 560 .cu/shared/data/heldout-books.txt)
timeout 200 $N --clock-control none -k regex:hqx_gemv1s_k -s 8 -c 4 --set full --import-source no -o $L/g1 \
  $B/kvq-run.old $W2/e8.kvq --gpu --ctx-max 1024 -p "$prompt" -n 8 --temp 0 > $L/ncu.log 2>&1; echo "== ncu rc $? $(el)"
$N --import $L/g1.ncu-rep --page details > $L/g1_details.txt 2>&1
grep -E "hqx_gemv1s|Grid Size|Duration|Registers Per|Achieved Occupancy|Issued Warp Per|Warp Cycles Per Issued|DRAM Throughput|L1/TEX Hit|Executed Instructions  " $L/g1_details.txt | head -44 | cut -c1-140
for k in 0 1 2 3; do
  $N --import $L/g1.ncu-rep --page source --csv --print-source sass --launch-skip $k --launch-count 1 > $L/g1_sass$k.csv 2>&1
  python3 tests/bench/sass_regions.py $L/g1_sass$k.csv 20 | head -16 | cut -c1-200; gzip $L/g1_sass$k.csv
done
timeout 120 $N --clock-control none -k regex:hqx_gemv1s_k -s 8 -c 4 --section WarpStateStats --section SchedulerStats --section SpeedOfLight --section Occupancy --section LaunchStats -o $L/g1new $B/kvq-run $W2/e8.kvq --gpu --ctx-max 1024 -p "$prompt" -n 8 --temp 0 > $L/ncu_new.log 2>&1; echo "== ncu new rc $? $(el)"
$N --import $L/g1new.ncu-rep --page details > $L/g1new_details.txt 2>&1; rm -f $L/g1new.ncu-rep
$N --import $L/g1.ncu-rep --page raw --csv > $L/g1_raw.csv 2>&1; gzip $L/g1_raw.csv
[ $(zcat $L/g1_sass0.csv.gz | wc -l) -gt 20 ] || { $N --import $L/g1.ncu-rep --page source --csv --print-source sass > $L/g1_sass_all.csv 2>&1; gzip $L/g1_sass_all.csv; }
rm -f $L/g1.ncu-rep; gpu_pack A_logs
gpu_wait e8
for i in 1 2 3; do gpu_decode old_$i kvq-run.old $W/e8.kvq; gpu_decode new_$i kvq-run $W/e8.kvq; done
for f in $L/run_*.log; do echo "$(basename $f) text $(grep -av -E 'tok/s|MB|ms' $f | md5sum | cut -c1-8)"; done
gpu_pack A_logs
echo "== done $(el)"
