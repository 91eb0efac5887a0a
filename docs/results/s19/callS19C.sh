#!/usr/bin/env bash
# session 19 call C (main + the automatic chunks' floor, uncommitted at the call): test_cuda_kv in full (every attend
# test with the floor on by default, test_attend_fused also with it off and at 128); the codec attends with the floor
# (default) against KVQ_CUDA_KV_CFLOOR=0 (today's chunks), alternated, batch 1 and 8, beside SDPA.
set -u
TESTS= . tests/bench/gpu_env.sh
L=$OUT
timeout 330 $B/test_cuda_kv > $L/test_cuda_kv.log 2>&1; echo "== test_cuda_kv rc $? $(el)"
grep -hE '^\[ +(FAILED|PASSED) +\]|FAILED' $L/test_cuda_kv.log | head -8
grep -h "fused merge, and the launches" $L/test_cuda_kv.log | cut -c1-250
ROWS="int:4 tc,int:2 tc,kivi:4 tc,kivi:2 tc,turboquant:4 tc,turboquant:2 tc,qturbo:4 tc,turboquant-prod:4 tc,turboquant-prod:3 tc,turboquant-prod:2 tc,octopus:4 tc,octopus:2 tc,octopus:4:qjl tc,hqmq:s96:r4,hqkv:e8:4"
for r in 1 2; do
  CUDA_KV_ONLY="$ROWS" timeout 120 $B/cuda_kv_attn 1024 4096 16384 32768 131072 > $L/C_floor_r$r.txt 2>&1; echo "== floor r$r rc $? $(el)"
  KVQ_CUDA_KV_CFLOOR=0 CUDA_KV_ONLY="$ROWS" timeout 120 $B/cuda_kv_attn 1024 4096 16384 32768 131072 > $L/C_old_r$r.txt 2>&1; echo "== old r$r rc $? $(el)"
done
timeout 150 python3 tests/bench/cuda_kv_sdpa.py 1024 4096 16384 32768 131072 > $L/C_sdpa.txt 2>&1; echo "== sdpa rc $? $(el)"
(cd $L && tar -czf logsC.tgz *.log && rm -f *.log)
echo "== done $(el)"
