#!/usr/bin/env bash
# session 17 call E (warm after D, the 8B shape converted there): the SiLU fold per product, then its 8B A/B.
set -u
TESTS= . tests/bench/gpu_env.sh
KVQ_HQX_FOLD=1 KVQ_HQX_CODECS=1 timeout 60 $B/cuda_hqx 4096x14336 > $OUT/hqx_fold.txt 2>&1; echo "== cuda_hqx rc $? $(el)"
grep -iE "silu|fold|rmsnorm" $OUT/hqx_fold.txt | cut -c1-220 | head -12
TESTS= ROUNDS=2 CONFIGS="old|KVQ_CUDA_FOLD_DOWN=0;new|KVQ_CUDA_FOLD_DOWN=1;clu|KVQ_CUDA_FOLD_DOWN=1 KVQ_CUDA_FOLD_DOWN_CLUSTER=${CLU:-4}" bash tests/bench/gpu_ab8b.sh > $OUT/abE.txt 2>&1
grep -E "decode|==|rror" $OUT/abE.txt | cut -c1-200
