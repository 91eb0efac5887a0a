#!/usr/bin/env bash
# session 18 call G (main a2edf1f, the code of this stop): the GPU suites in full.
set -u
TESTS= . tests/bench/gpu_env.sh
L=$OUT
for t in test_cuda_hqx test_cuda_model test_cuda_kv; do
  timeout 280 $B/$t > $L/$t.log 2>&1; echo "== $t rc $? $(el)"
  grep -hE '^\[ +(FAILED|PASSED) +\]|FAILED' $L/$t.log | head -6
done
(cd $L && tar -czf logsG.tgz *.log && rm -f *.log)
echo "== done $(el)"
