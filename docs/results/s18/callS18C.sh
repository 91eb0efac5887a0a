#!/usr/bin/env bash
# session 18 call C (branch i12c 96882c0, helper-56: the split attention's merge inside a thread-block cluster): the
# suites (bits: cluster vs the old merge) while the 8B shape converts, the kernel-alone bench, then the decode A/B
# cluster on / off with bf16 in the same rounds.
set -u
TESTS= . tests/bench/gpu_env.sh
L=$OUT
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
( [ -f $src/config.json ] || $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1; [ -f $W/e8.kvq ] || nice $B/kvq-convert -q -t 12 $src $W/e8.kvq --weights hyperquant:e8:4.0; echo "conv rc $? $(el)" ) > $L/conv.log 2>&1 &
for t in test_cuda_hqx test_cuda_model; do
  timeout 250 $B/$t > $L/$t.log 2>&1; echo "== $t rc $? $(el)"
  grep -hE '^\[ +(FAILED|PASSED) +\]|FAILED|tests? (passed|failed)' $L/$t.log | head -8
done
grep -hiE 'cluster|differing|skip' $L/test_cuda_model.log $L/test_cuda_hqx.log | cut -c1-200 | head -24
timeout 60 $B/cuda_attend 2>&1 | tail -12
wait; cat $L/conv.log
TESTS= ROUNDS=2 CONFIGS="cl1|KVQ_CUDA_ATTN_CLUSTER=1;cl0|KVQ_CUDA_ATTN_CLUSTER=0;bf16|M=/tmp/w8/synth-8b" bash tests/bench/gpu_ab8b.sh 2>&1 | grep -vE '^(NVIDIA|copy)'
(cd $L && tar -czf logsC.tgz *.log && rm -f *.log)
echo "== done $(el)"
