#!/usr/bin/env bash
# session 17 call G (main 0c96a2d: i20t merged): turboquant-prod's S in fp16 once (KVQ_CUDA_KV_TPROD_S16): bits and time.
set -u
TESTS= . tests/bench/gpu_env.sh
L=$OUT
t() { KVQ_TEST_FILTER="$2" timeout $3 $B/test_cuda_kv > $L/$1.log 2>&1; echo "== $1 rc $? $(el)"; grep -hE '^\[ +(FAILED|PASSED) +\]' $L/$1.log | head -3; }
t tc "test_attend_tc*" 260; grep -hE "turboquant-prod.*(S16|S fp16|differ)|tensor cores: worst" $L/tc.log | cut -c1-220 | head -8
t graph "test_step_graph" 160; grep -hE "turboquant-prod" $L/graph.log | cut -c1-220 | head -6
t rows "test_attend_rows" 160; grep -hE "turboquant-prod" $L/rows.log | cut -c1-220 | head -6
t tprod "test_tprod*" 60
for r in 1 2; do for s in 0 1; do
  KVQ_CUDA_KV_TPROD_S16=$s CUDA_KV_BATCH=1 CUDA_KV_ONLY="turboquant-prod:4 tc,turboquant-prod:2 tc" timeout 100 $B/cuda_kv_attn 4096 32768 131072 > $L/kv_s$s.r$r.txt 2>&1
  grep -E "^\| [0-9]+k \| 1 \| turbo" $L/kv_s$s.r$r.txt | sed "s/^/S16=$s r$r: /" | cut -c1-120
done; done
(cd $L && tar -czf logsG.tgz *.log *.txt && rm -f *.log *.txt)
echo "== done $(el)"
