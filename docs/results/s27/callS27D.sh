#!/usr/bin/env bash
# session 27 call D (H200): the lean one-token product with a deeper ring outside the fold (KVQ_CUDA_G1DEEP=1: the
# next pair of steps loaded while a pair is multiplied, 3 blocks an SM; kernels/cuda/hqx_gemv1.cu) — test_cuda_hqx's
# same-bits mode int8/dp; the o and down shapes' products alone (build/bench/cuda_hqx, E8 4.0) with it off and on;
# the 8B E8 4.0 decode off/on alternated. Logs packed into $OUT/D_logs.tgz as the call goes.
set -u
TESTS= . tests/bench/gpu_env.sh
W=/tmp/w8; L=/tmp/logsD; mkdir -p $W $L
gpu_convert8b e8="--weights hyperquant:e8:4.0"
gpu_suite hqx test_cuda_hqx "*" 120
grep -a "int8/dp" $L/hqx.log | head -4
for d in 0 1; do
  KVQ_CUDA_G1DEEP=$d KVQ_HQX_CODECS=1 timeout 100 $B/cuda_hqx 4096x14336 4096x4096 > $L/hqx_deep$d.log 2>&1
  echo "== cuda_hqx deep $d rc $? $(el)"; grep -a "^| 4096" $L/hqx_deep$d.log | cut -d'|' -f2,3,6-11
done
gpu_pack D_logs
gpu_wait e8
for i in 1 2 3; do for d in 0 1; do gpu_decode e8_deep${d}_$i kvq-run $W/e8.kvq KVQ_CUDA_G1DEEP=$d; done; done
for f in $L/run_*.log; do echo "$(basename $f) text $(grep -av -E 'tok/s|MB|ms' $f | md5sum | cut -c1-8)"; done
gpu_pack D_logs
echo "== done $(el)"
