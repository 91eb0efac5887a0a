#!/usr/bin/env bash
# session 18 call D (branch i20r 8d0c0fb, helper-55: turboquant-prod's S·R·q prelude once per (sequence, KV head)):
# its tests, the attention rows old (tc blk) / new (tc) beside SDPA, and an Nsight Compute profile of int:4 tc at 32k
# (why it reads at ~60 % of copy bandwidth).
set -u
TESTS= . tests/bench/gpu_env.sh
L=$OUT
t() { # name suite filter timeout
  KVQ_TEST_FILTER="$3" timeout $4 $B/$2 > $L/$1.log 2>&1; echo "== $1 rc $? $(el)"
  grep -hE '^\[ +(FAILED|PASSED) +\]' $L/$1.log | head -4
}
t kv_tc test_cuda_kv "test_attend_tc*" 200; grep -hiE "prod|octopus|differ" $L/kv_tc.log | grep -iE "nmse|PASS|FAIL|differ" | cut -c1-230 | head -20
t kv_graph test_cuda_kv "test_step_graph" 150; grep -hiE "prod|prelude" $L/kv_graph.log | cut -c1-200 | head -8
t kv_seqs test_cuda_kv "test_attend_seqs" 150; grep -hiE "prod" $L/kv_seqs.log | cut -c1-200 | head -8
t kv_rows test_cuda_kv "test_attend_rows" 150; grep -hiE "prod" $L/kv_rows.log | cut -c1-200 | head -8
t kv_all test_cuda_kv "*" 300
ROWS="turboquant-prod:4 tc,turboquant-prod:4 tc blk,turboquant-prod:3 tc,turboquant-prod:3 tc blk,turboquant-prod:2 tc,turboquant-prod:2 tc blk"
CUDA_KV_BATCH=1 CUDA_KV_ONLY="$ROWS" timeout 150 $B/cuda_kv_attn 4096 32768 131072 > $L/kvattn1.txt 2>&1; echo "== kv attn b1 rc $? $(el)"
grep -E "^\| [0-9]+k \| 1 " $L/kvattn1.txt | cut -c1-150
CUDA_KV_BATCH=8 CUDA_KV_ONLY="$ROWS" timeout 120 $B/cuda_kv_attn 4096 32768 > $L/kvattn8.txt 2>&1; echo "== kv attn b8 rc $? $(el)"
grep -E "^\| [0-9]+k \| 8 " $L/kvattn8.txt | cut -c1-150
SDPA_BATCH=1 timeout 90 python3 tests/bench/cuda_kv_sdpa.py 4096 32768 131072 > $L/sdpa.txt 2>&1; echo "== sdpa rc $? $(el)"; grep -vE "^$" $L/sdpa.txt | tail -6
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
CUDA_KV_BATCH=1 CUDA_KV_ONLY="int:4 tc,int:4 tc lean" timeout 200 $NCU -k regex:attn_tc -s 20 -c 2 --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section LaunchStats $B/cuda_kv_attn 32768 > $L/ncu_int4.txt 2>&1; echo "== ncu rc $? $(el)"
grep -E "attn_tc|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per|Block Limit|Stall|Warp Cycles Per Issued|Grid Size|Waves" $L/ncu_int4.txt | head -60
cp $L/kvattn1.txt $L/kvattn8.txt $L/sdpa.txt $L/ncu_int4.txt $OUT/ 2>/dev/null
(cd $L && tar -czf logsD.tgz *.log && rm -f *.log)
echo "== done $(el)"
