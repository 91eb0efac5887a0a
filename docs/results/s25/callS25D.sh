#!/usr/bin/env bash
# session 25 call D (H200): Nsight Compute on one *decode* launch of the short-context attention (attend_split_k<4>,
# the 8B shape's heads: 32 query / 8 KV heads, head_dim 128; the final kernel of call C) — where its remaining 7.3 us
# go. A 2-layer 8B-shaped model (make_synth_llama 8b ... 1 2: the same tensors, two layers), E8 4.0; prompt 182
# tokens (12 prefill launches a layer), so -s 60 lands on a decode step near position 200. --set full, the SASS
# source page summarized by region (tests/bench/sass_regions.py). Logs in $OUT/D_logs.tgz.
set -u
TESTS= . tests/bench/gpu_env.sh
L=/tmp/logsD; mkdir -p $L
W=/tmp/w2; mkdir -p $W
$B/make_synth_llama 8b $W/src tests/models/kvq-tiny-llama 1 2 > $L/synth.log 2>&1; echo "synth rc $? $(el)"
$B/kvq-convert -q -t 12 $W/src $W/e8.kvq --weights hyperquant:e8:4.0 > $L/conv.log 2>&1; echo "e8 rc $? $(el)"
prompt=$(head -c 560 .cu/shared/data/heldout-books.txt)
N=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
timeout 150 $N --clock-control none -k regex:attend_split_k -s 60 -c 1 --set full --import-source no -o $L/att \
  $B/kvq-run $W/e8.kvq --gpu --ctx-max 1024 -p "$prompt" -n 40 --temp 0 > $L/ncu.log 2>&1; echo "== ncu rc $? $(el)"
$N --import $L/att.ncu-rep --page details > $L/att_details.txt 2>&1
$N --import $L/att.ncu-rep --page source --csv --print-source sass > $L/att_sass.csv 2>&1
grep -E "attend_split|Grid Size|Duration|Registers Per|Achieved Occupancy|Issued Warp Per|Warp Cycles Per Issued|DRAM Throughput|Executed Instructions  " $L/att_details.txt | head -12 | cut -c1-140
python3 tests/bench/sass_regions.py $L/att_sass.csv 20 | head -30 | cut -c1-220
gzip $L/att_sass.csv; rm -f $L/att.ncu-rep
tar -C /tmp -czf $OUT/D_logs.tgz logsD
echo "== done $(el)"
