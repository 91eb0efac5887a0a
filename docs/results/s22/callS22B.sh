#!/usr/bin/env bash
# session 22 call B: test_cuda_model whole, alone (call A's run beside test_cuda_kv and two converts hit its 200 s limit),
# test_cuda_pq whole (its two QET checks fixed: the default kernel is smem2 since session 16), test_cuda_verify and
# test_cuda_hq; then Nsight Compute on one launch of the one-token product (14336x4096, E8 4.0, width 4) with 32-bit and
# 16-bit escapes (call A: 0.0221 against 0.0236 ms streamed with the batch decoding (col, delta) straight from the
# entries), as session 21's call E. Logs in $OUT/B_logs.tgz.
set -u
TESTS= . tests/bench/gpu_env.sh
L=/tmp/logsB; mkdir -p $L
t() { # name suite filter timeout [env]
  local n=$1 s=$2 f=$3 to=$4; shift 4
  env KVQ_TEST_FILTER="$f" "$@" timeout $to $B/$s > $L/$n.log 2>&1; echo "== $n rc $? $(el)"
  grep -hE '^\[ +(FAILED|PASSED) +\]|FAILED' $L/$n.log | head -6
}
t model test_cuda_model "*" 330
t pq test_cuda_pq "*" 90
t verify test_cuda_verify "*" 90
t hq test_cuda_hq "*" 60
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
tar -C /tmp -czf $OUT/B_logs.tgz logsB
echo "== done $(el)"
