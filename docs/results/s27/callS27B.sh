#!/usr/bin/env bash
# session 27 call B (H200): the lean one-token product's rolling prefetch (KVQ_CUDA_G1NEXT=n: at each row's start a
# warp asks L2 for its row n rows ahead; kernels/cuda/hqx_gemv1.cu) — the GPU suites (test_cuda_hqx's same-bits modes
# int8/nx and the fold's cases 1-2; test_cuda_model with the one-token bf16 kernel dense1_k<2,2> now the default),
# then the 8B E8 4.0 decode with n = 0, 1, 2 alternated, the step's timeline for 0 and 1, and E8 4.0 with the lm_head
# packed. Logs packed into $OUT/B_logs.tgz as the call goes.
set -u
TESTS= . tests/bench/gpu_env.sh
W=/tmp/w8; L=/tmp/logsB; mkdir -p $W $L
gpu_convert8b e8="--weights hyperquant:e8:4.0" e8q="--weights hyperquant:e8:4.0 --quantize-embeddings"
gpu_suite hqx test_cuda_hqx "*" 200
grep -a "int8/nx" $L/hqx.log | head -3
grep -a "fold case" $L/hqx.log | grep -c "same bits yes" | sed 's/^/fold cases with the same bits: /'
gpu_suite model test_cuda_model "*" 200
grep -a "one-token kernel" $L/model.log | awk '{print $3, $4, $5}' | sort | uniq -c
gpu_pack B_logs
gpu_wait e8
for i in 1 2 3; do
  for n in 0 1 2; do gpu_decode e8_nx${n}_$i kvq-run $W/e8.kvq KVQ_CUDA_G1NEXT=$n; done
done
gpu_pack B_logs
for n in 0 1; do
  gpu_decode tl_nx$n kvq-run $W/e8.kvq KVQ_CUDA_TIMELINE=1 KVQ_CUDA_PDL=0 KVQ_CUDA_G1NEXT=$n
  grep -ahiE "timeline|matmul|attend|attention|lm_head" $L/run_tl_nx$n.log | head -12 | cut -c1-160
done
gpu_wait e8q
for i in 1 2; do for n in 0 1; do gpu_decode e8q_nx${n}_$i kvq-run $W/e8q.kvq KVQ_CUDA_G1NEXT=$n; done; done
grep -ah "MB" $L/run_e8q_nx0_1.log | head -2 | cut -c1-160
for f in $L/run_*.log; do echo "$(basename $f) text $(grep -av -E 'tok/s|MB|ms|timeline|matmul|att' $f | md5sum | cut -c1-8)"; done
gpu_pack B_logs
echo "== done $(el)"
