#!/usr/bin/env bash
# session 18 call B: why the L2 prefetch slowed decode (call A: 335 -> 217 tok/s). The step's kernels under Nsight
# Compute with the bulk prefetch at 16 MiB (all sites), then one round per site and per instruction (bulk / line).
set -u
TESTS= . tests/bench/gpu_env.sh
L=$OUT
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
[ -f $src/config.json ] || $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1
[ -f $W/e8.kvq ] || $B/kvq-convert -q -t 16 $src $W/e8.kvq --weights hyperquant:e8:4.0; echo "conv rc $? $(el)"
KVQ_CUDA_L2PF=16 NCU_TO=150 NAME=step_ncu_pf16 bash tests/bench/gpu_step_ncu.sh 2>&1 | grep -vE '^(NVIDIA|copy)'
gzip -f $OUT/step_ncu_pf16.csv
TESTS= ROUNDS=1 CONFIGS="pf0|KVQ_CUDA_L2PF=0;attn|KVQ_CUDA_L2PF=16:1;prep|KVQ_CUDA_L2PF=16:2;fold|KVQ_CUDA_L2PF=16:4;line|KVQ_CUDA_L2PF=16:7:line;line_attn|KVQ_CUDA_L2PF=16:1:line;line_prep|KVQ_CUDA_L2PF=16:2:line" bash tests/bench/gpu_ab8b.sh 2>&1 | grep -vE '^(NVIDIA|copy)'
echo "== done $(el)"
