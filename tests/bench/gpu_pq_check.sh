#!/usr/bin/env bash
# One device call for PQ/QET on the GPU (issue 12, kernels/cuda/pqx.cu): the GPU suite
# test_cuda_pq (random layouts against the CPU reference, pq:4 / qet:4 models GPU vs CPU),
# the kernel benchmark cuda_pq (4096x4096, 14336x4096 beside dense bf16 in the same run), then
# kvq-run --gpu on kvq-tiny-llama converted with pq:4 and qet:4: packed (the new path) against
# KVQ_CUDA_PQ_DENSE=1 (decoded to dense at upload, the old path), greedy text, decode speed
# and the memory lines. Bundle first on the dev box:
#   BINS="kvq-run kvq-convert test_cuda_pq cuda_pq cuda_hqx" bash tests/bench/gpu_bundle.sh
# then on the device (carry .cu):  bash tests/bench/gpu_pq_check.sh   (logs in $OUT)
set -u
TESTS="test_cuda_pq" . tests/bench/gpu_env.sh > $OUT/log.txt 2>&1
{
echo "== test_cuda_pq"
grep -E "^  |OK|FAILED|PASSED|rror" $OUT/test_cuda_pq.log | tail -60
echo "== cuda_pq $(el)"
$B/cuda_pq 2>&1
echo "== models $(el)"
W=/tmp/pqw; mkdir -p $W
prompt="Once upon a time there was a"
for spec in pq:4 qet:4; do
  f=$W/$(echo $spec | tr -c 'a-z0-9' _).kvq
  $B/kvq-convert -q tests/models/kvq-tiny-llama $f --weights $spec || echo "convert $spec failed"
  for dense in 0 1; do
    KVQ_CUDA_PQ_DENSE=$dense $B/kvq-run $f --gpu -p "$prompt" -n 128 --temp 0 > $OUT/text_${spec%%:*}_$dense.txt 2> $OUT/err.txt
    echo "$spec KVQ_CUDA_PQ_DENSE=$dense rc $?: $(grep -E 'memory|device|decode|rror' $OUT/err.txt | tr '\n' ' ' | cut -c1-400)"
  done
  cmp -s $OUT/text_${spec%%:*}_0.txt $OUT/text_${spec%%:*}_1.txt && echo "$spec: packed and dense texts equal" || echo "$spec: texts differ"
  $B/kvq-run $f -p "$prompt" -n 128 --temp 0 > $OUT/text_${spec%%:*}_cpu.txt 2>/dev/null
  cmp -s $OUT/text_${spec%%:*}_0.txt $OUT/text_${spec%%:*}_cpu.txt && echo "$spec: GPU packed text equals the CPU's" || echo "$spec: GPU text differs from the CPU's"
done
echo "== done $(el)"
} >> $OUT/log.txt 2>&1
cat $OUT/log.txt
