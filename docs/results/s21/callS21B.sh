#!/usr/bin/env bash
# session 21 call B (int8 scores and variant 1 the defaults for int keys; the CPU's KVQ_KV_SIM_Q8 model of them): the KV
# benchmarks alone first (SDPA bf16; int variants 1/2 with fp16 and int8 scores, KIVI 4-bit variants 1/2: its default),
# then the whole test_cuda_kv beside test_cuda_model (its codec cases now hold the GPU's int8 scores to the CPU's model of
# them). Logs in $OUT/B_logs.tgz (a call returns at most 8 files).
set -u
TESTS= . tests/bench/gpu_env.sh
L=/tmp/logsB; mkdir -p $L
t() { # name suite filter timeout [env]
  local n=$1 s=$2 f=$3 to=$4; shift 4
  env KVQ_TEST_FILTER="$f" "$@" timeout $to $B/$s > $L/$n.log 2>&1; echo "== $n rc $? $(el)"
  grep -hE '^\[ +(FAILED|PASSED) +\]|FAILED' $L/$n.log | head -8
}
timeout 100 python3 tests/bench/cuda_kv_sdpa.py 4096 32768 131072 > $L/sdpa.txt 2>&1; echo "== sdpa rc $? $(el)"; grep -E "^\| (4096|32768|131072) \| 1 " $L/sdpa.txt
rows="bf16,int:4 tc,int:4 tc2,int:4 tc i8,int:4 tc2 i8,int:4 pipe4 i8,int:2 tc i8,int:2 tc2 i8,kivi:4 tc,kivi:4 tc2,kivi:2 tc,kivi:2 tc2"
for r in 1 2; do
  CUDA_KV_BATCH=1 CUDA_KV_ONLY="$rows" timeout 120 $B/cuda_kv_attn 4096 32768 131072 > $L/kv_r$r.txt 2>&1; echo "== kv bench r$r rc $? $(el)"
  grep -E "^\| " $L/kv_r$r.txt | cut -d'|' -f2-6 | tr -s ' ' | paste -sd';' | sed 's/;/\n/g' | head -40
done
( t kv test_cuda_kv "*" 420 ) > $L/kv_summary.txt 2>&1 &
KP=$!
t model test_cuda_model "*" 300
grep -hE "kv (int|kivi)|KVQ_CUDA_ESC16|TC_Q8|TC_LEAN|FAIL" $L/model.log | cut -c1-190 | head -40
wait $KP; cat $L/kv_summary.txt
grep -hE "Q8 tensor-core|pipelined tensor-core" $L/kv.log | cut -c1-200
tar -C /tmp -czf $OUT/B_logs.tgz logsB
echo "== done $(el)"
