#!/usr/bin/env bash
# Device call (issue 20, session 14): the attention table's missing columns (16k at batch 1; 4k, 16k, 128k at batch 8) for
# every codec beside SDPA bf16, then the 8B shape's 128k end-to-end row for kivi:4 (rows mode), model made here.
# usage (dev box): BINS="kvq-run kvq-convert make_synth_llama cuda_hqx cuda_kv_attn" bash tests/bench/gpu_bundle.sh; (device, carry [".cu"]) bash tests/bench/gpu_kv_table_more.sh
# (the SDPA rows go to $OUT/sdpa_b*.txt as well: in session 14 they scrolled out of the returned output and were rerun alone)
set -u
TESTS= . tests/bench/gpu_env.sh
ROWS="int:4 tc2,int:3,int:2 tc,kivi:4 tc2,kivi:3,kivi:2 tc,turboquant:4,turboquant:3,turboquant:2,qturbo:4,qturbo:3,qturbo:2,turboquant-prod:4,turboquant-prod:3,turboquant-prod:2,octopus:4,octopus:3,octopus:2,octopus:4:qjl,hqmq:s192:r6,hqmq:s96:r4,hqmq:s24:r3,hqkv:e8:4,hqkv:e8:3,hqkv:e8:2"
SDPA_BATCH=1 python3 tests/bench/cuda_kv_sdpa.py 16384 2>&1 | tee $OUT/sdpa_b1.txt | tail -3
SDPA_BATCH=8 python3 tests/bench/cuda_kv_sdpa.py 4096 16384 131072 2>&1 | tee $OUT/sdpa_b8.txt | tail -5
echo "== sdpa $(el)"
CUDA_KV_ENC_ONLY=0 CUDA_KV_BATCH=1 CUDA_KV_ONLY="$ROWS" timeout 120 $B/cuda_kv_attn 16384 2>&1 | grep -E '^\| (T_kv|[0-9]+k) ' > $OUT/tab16k_b1.txt; echo "== b1 16k rc $? $(el)"
CUDA_KV_ENC_ONLY=0 CUDA_KV_BATCH=8 CUDA_KV_ONLY="$ROWS" timeout 150 $B/cuda_kv_attn 4096 16384 2>&1 | grep -E '^\| (T_kv|[0-9]+k) ' > $OUT/tab_b8.txt; echo "== b8 4k 16k rc $? $(el)"
CUDA_KV_ENC_ONLY=0 CUDA_KV_BATCH=8 CUDA_KV_ONLY="$ROWS" timeout 150 $B/cuda_kv_attn 131072 2>&1 | grep -E '^\| (T_kv|[0-9]+k) ' > $OUT/tab_b8_128k.txt; echo "== b8 128k rc $? $(el)"
cat $OUT/tab16k_b1.txt $OUT/tab_b8.txt $OUT/tab_b8_128k.txt | cut -c1-150
KVS128="kivi:4" E2E128=1 FORCE128=1 TO128=330 bash tests/bench/gpu_kv_prefill.sh 2>&1 | grep -v "^NVIDIA\|^copy band"
