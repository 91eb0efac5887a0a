#!/usr/bin/env bash
# session 17 call B (main 4f30f8d+: fold default on, i12v and i20m merged): the GPU suites in full, test_cuda_verify and
# the device-vs-host scoring of kvq-verify --gpu (kvq-tiny-llama), while the 8B shape converts for call C.
set -u
TESTS= . tests/bench/gpu_env.sh
L=$OUT
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
( [ -f $src/config.json ] || $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1; [ -f $W/e8.kvq ] || nice $B/kvq-convert -q -t 12 $src $W/e8.kvq --weights hyperquant:e8:4.0; echo "conv rc $?" ) > $L/conv.log 2>&1 &
for t in test_cuda_hqx test_cuda_verify test_cuda_model test_cuda_kv; do
  timeout 280 $B/$t > $L/$t.log 2>&1; echo "== $t rc $? $(el)"
  grep -hE '^\[ +(FAILED|PASSED) +\]|FAILED|tests? (passed|failed)' $L/$t.log | head -8
done
grep -hE 'seqs|fold:|differ' $L/test_cuda_model.log $L/test_cuda_kv.log | cut -c1-220 | head -20
VMODEL=kvq-tiny-llama TEXT_BYTES=400000 bash tests/bench/gpu_verify_score.sh > $L/vscore.txt 2>&1; grep -vE '^(NVIDIA|copy)' $L/vscore.txt | cut -c1-220 | head -30
wait; cat $L/conv.log
(cd $L && tar -czf logsB.tgz *.log && rm -f *.log)
echo "== done $(el)"
