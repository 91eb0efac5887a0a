#!/usr/bin/env bash
# session 17 call A: the RMSNorm fold's decision on the 8B shape (E8 4.0, bf16 lm_head) with bf16 in the same rounds.
set -u
TESTS= . tests/bench/gpu_env.sh
L=$OUT
TESTS= ROUNDS=3 CONFIGS="old|KVQ_CUDA_FOLD=0;fold|KVQ_CUDA_FOLD=1;bf16|M=/tmp/w8/synth-8b" bash tests/bench/gpu_ab8b.sh > $L/ab.txt 2>&1
grep -E "decode|device|==|rror" $L/ab.txt | cut -c1-220
echo "== done $(el)"
