#!/usr/bin/env bash
# session 17 call C (warm after B, the 8B shape converted there): several sequences with a codec cache, batch 8, the
# step's attends in one launch set (KVQ_CUDA_KV_SEQS_BATCHED=1) against one per sequence (=0), alternated by the script.
set -u
TEST=0 AB=1 KVS="int:4 turboquant:4" bash tests/bench/gpu_kv_batch.sh > $OUT/kvb.txt 2>&1
grep -vE '^$' $OUT/kvb.txt | cut -c1-220 | tail -30
NAME=step_ncu_s17 NCU_TO=240 bash tests/bench/gpu_step_ncu.sh 2>&1 | grep -E "==|decode" | tail -4
gzip -f $OUT/step_ncu_s17.csv; python3 tests/bench/step_ncu_table.py $OUT/step_ncu_s17.csv.gz 2>&1 | head -40
