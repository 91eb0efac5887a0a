#!/usr/bin/env bash
# session 27 call A (H200): (1) the one-token bf16 product's kernels (KVQ_CUDA_DENSE 0..5, kernels/cuda/dense_matmul.cu)
# streamed on the 8B shapes beside cuBLAS (build/bench/cuda_dense) and their bits in test_cuda_model's test_ops;
# (2) the 8B decode (E8 4.0 bf16 lm_head, our bf16) with the default kernel against the lm_head shape's fastest,
# alternated in the same binary; (3) batch 8 rows; (4) the stamped attention build's tail parts (kvq-run-st, d975ed2).
# Logs packed into $OUT/A_logs.tgz as the call goes.
set -u
TESTS= . tests/bench/gpu_env.sh
W=/tmp/w8; L=/tmp/logsA; mkdir -p $W $L
gpu_convert8b e8="--weights hyperquant:e8:4.0" bf16="--weights none"
$B/cuda_dense > $L/dense.log 2>&1; echo "== cuda_dense rc $? $(el)"; cat $L/dense.log
gpu_suite ops test_cuda_model "test_ops" 200
grep -a "one-token kernel" $L/ops.log | sort | uniq -c | head -12
gpu_pack A_logs
# the fastest one-token kernel on the lm_head's shape (128256x4096)
best=$(grep -a '^| 128256x4096 | variant' $L/dense.log | sort -t'|' -k4 -g | head -1 | sed 's/.*variant \([0-9]\).*/\1/')
echo "fastest on the lm_head shape: variant ${best:-none}"
best=${best:-0}
gpu_wait e8
for i in 1 2 3; do
  gpu_decode e8_v0_$i kvq-run $W/e8.kvq KVQ_CUDA_DENSE=0
  gpu_decode e8_v${best}_$i kvq-run $W/e8.kvq KVQ_CUDA_DENSE=$best
done
grep -ah "MB" $L/run_e8_v0_1.log | head -2 | cut -c1-160
gpu_decode st kvq-run-st $W/e8.kvq; grep -a "att_stamps" $L/run_st.log | cut -c1-400
gpu_batch e8_v0 kvq-run $W/e8.kvq 8 KVQ_CUDA_DENSE=0
gpu_batch e8_v$best kvq-run $W/e8.kvq 8 KVQ_CUDA_DENSE=$best
gpu_pack A_logs
gpu_wait bf16
gpu_decode bf16_v0_1 kvq-run $W/bf16.kvq KVQ_CUDA_DENSE=0; grep -ah "MB" $L/run_bf16_v0_1.log | head -2 | cut -c1-160
gpu_decode bf16_v${best}_1 kvq-run $W/bf16.kvq KVQ_CUDA_DENSE=$best
gpu_decode bf16_v0_2 kvq-run $W/bf16.kvq KVQ_CUDA_DENSE=0
gpu_decode bf16_v${best}_2 kvq-run $W/bf16.kvq KVQ_CUDA_DENSE=$best
gpu_pack A_logs
gpu_batch bf16_v$best kvq-run $W/bf16.kvq 8 KVQ_CUDA_DENSE=$best
for f in $L/run_*.log $L/b_*.log; do echo "$(basename $f) text $(grep -av -E 'tok/s|MB|ms|att_stamps' $f | md5sum | cut -c1-8)"; done
gpu_pack A_logs
echo "== done $(el)"
