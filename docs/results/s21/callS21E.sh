#!/usr/bin/env bash
# session 21 call E: where the 16-bit escapes' remaining ~9 % goes in a one-segment product (14336x4096, E8 4.0, width 4:
# streamed 0.0240 ms against 0.0220 with 32-bit escapes, call D): Nsight Compute, full set with the SASS source page, on
# one launch of the one-token product (hqx_gemv1) with KVQ_CUDA_ESC16=0 and =2; summarized by tests/bench/sass_regions.py.
set -u
TESTS= . tests/bench/gpu_env.sh
L=/tmp/logsE; mkdir -p $L
N=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
for e in 0 2; do
  KVQ_HQX_WIDTH=4 KVQ_HQX_CODECS=1 KVQ_CUDA_ESC16=$e timeout 100 $N -k regex:hqx_gemv1 -s 30 -c 1 --set full --import-source no -o $L/g1_e$e \
    $B/cuda_hqx 14336x4096 > $L/ncu_e$e.log 2>&1; echo "== ncu ESC16=$e rc $? $(el)"
  $N --import $L/g1_e$e.ncu-rep --page details > $L/g1_e${e}_details.txt 2>&1
  $N --import $L/g1_e$e.ncu-rep --page source --csv --print-source sass > $L/g1_e${e}_sass.csv 2>&1
  grep -E "^    (Duration|Memory Throughput|DRAM Throughput|Registers Per Thread|Achieved Occupancy|Executed Instructions |Issue Slots Busy)" $L/g1_e${e}_details.txt | head -8
  python3 tests/bench/sass_regions.py $L/g1_e${e}_sass.csv 40 | head -14
done
gzip $L/*_sass.csv; rm -f $L/*.ncu-rep
tar -C /tmp -czf $OUT/E_logs.tgz logsE
echo "== done $(el)"
