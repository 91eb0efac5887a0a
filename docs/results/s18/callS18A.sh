#!/usr/bin/env bash
# session 18 call A (main + L2 prefetch, KVQ_CUDA_L2PF): the GPU suites with the prefetch on (24 MiB) while the 8B
# shape converts, then the decode A/B: prefetch off / 16 / 32 MiB and bf16 in the same rounds.
set -u
TESTS= . tests/bench/gpu_env.sh
L=$OUT
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
( [ -f $src/config.json ] || $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1; [ -f $W/e8.kvq ] || nice $B/kvq-convert -q -t 12 $src $W/e8.kvq --weights hyperquant:e8:4.0; echo "conv rc $? $(el)" ) > $L/conv.log 2>&1 &
for t in test_cuda_hqx test_cuda_model; do
  KVQ_CUDA_L2PF=24 timeout 200 $B/$t > $L/$t.log 2>&1; echo "== $t (L2PF=24) rc $? $(el)"
  grep -hE '^\[ +(FAILED|PASSED) +\]|FAILED|tests? (passed|failed)' $L/$t.log | head -8
done
wait; cat $L/conv.log
TESTS= ROUNDS=2 CONFIGS="pf0|KVQ_CUDA_L2PF=0;pf16|KVQ_CUDA_L2PF=16;pf32|KVQ_CUDA_L2PF=32;bf16|M=/tmp/w8/synth-8b" bash tests/bench/gpu_ab8b.sh 2>&1 | grep -vE '^(NVIDIA|copy)'
(cd $L && tar -czf logsA.tgz *.log && rm -f *.log)
echo "== done $(el)"
