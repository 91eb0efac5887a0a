#!/usr/bin/env bash
# Device call (issue 20): the attention table with the current kernels for every codec at 2-4 bits
# (batch 1 at 4k/32k/128k, batch 8 at 32k) beside PyTorch SDPA bf16 in the same call, then Nsight Compute on
# each codec's packed kernel at 32k, batch 1 (full reports kept in $OUT).
# usage (on the device, binaries from tests/bench/gpu_bundle.sh): bash tests/bench/gpu_kv_table.sh   (docs/RESULTS.md, session 13)
set -u
TESTS="test_cuda_kv" . tests/bench/gpu_env.sh
ROWS="int:4 tc2,int:3,int:2 tc,kivi:4 tc2,kivi:3,kivi:2 tc,turboquant:4,turboquant:3,turboquant:2,qturbo:4,qturbo:3,qturbo:2,turboquant-prod:4,turboquant-prod:3,turboquant-prod:2,octopus:4,octopus:3,octopus:2,octopus:4:qjl,hqmq:s192:r6,hqmq:s96:r4,hqmq:s24:r3,hqkv:e8:4,hqkv:e8:3,hqkv:e8:2"
CUDA_KV_BATCH=1 CUDA_KV_ONLY="$ROWS" timeout 240 $B/cuda_kv_attn 4096 32768 131072 > $OUT/table_b1.txt 2>&1; echo "table b1 rc $? $(el)"
CUDA_KV_BATCH=8 CUDA_KV_ONLY="$ROWS" timeout 120 $B/cuda_kv_attn 32768 > $OUT/table_b8.txt 2>&1; echo "table b8 rc $? $(el)"
SDPA_BATCH=1 timeout 100 python3 tests/bench/cuda_kv_sdpa.py 4096 32768 131072 > $OUT/sdpa.txt 2>&1; echo "sdpa b1 rc $? $(el)"
SDPA_BATCH=8 timeout 60 python3 tests/bench/cuda_kv_sdpa.py 32768 >> $OUT/sdpa.txt 2>&1; echo "sdpa b8 rc $? $(el)"
cat $OUT/sdpa.txt
grep -E '^\| (4k|32k|128k) ' $OUT/table_b1.txt | head -90
grep -E '^\| 32k ' $OUT/table_b8.txt | head -30
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
S="--section SpeedOfLight --section Occupancy --section WarpStateStats --section SchedulerStats --section LaunchStats --section MemoryWorkloadAnalysis"
for r in "int:3" "kivi:3" "turboquant:4" "qturbo:4" "turboquant-prod:4" "octopus:4" "octopus:4:qjl" "hqmq:s96:r4" "hqkv:e8:4" "int:4 tc2" "kivi:4 tc2" "int:2 tc" "bf16"; do
  k=attn_split; case "$r" in *tc*) k=attn_tc;; esac
  nb=1; [ "$r" = bf16 ] && nb=0
  n=$(echo "$r" | tr ': ' '__')
  CUDA_KV_NO_BASE=$nb CUDA_KV_BATCH=1 CUDA_KV_ONLY="$r" timeout 120 $NCU --clock-control none -k regex:$k --launch-count 1 $S \
    $B/cuda_kv_attn 32768 > $OUT/ncu_$n.txt 2>&1; echo "ncu $r rc $? $(el)"
done
for f in $OUT/ncu_*.txt; do echo "== $(basename $f)"; grep -E "^  [a-z_]+<|^  void|Duration|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per Thread|Issue Slots Busy|Warp Cycles Per Issued Instruction|No Eligible" $f | head -10 | cut -c1-150; done
(cd $OUT && tar -cJf ncu.tar.xz ncu_*.txt table_b*.txt sdpa.txt && rm -f ncu_*.txt) # the device returns a few files only
echo "== done $(el)"
