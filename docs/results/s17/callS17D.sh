#!/usr/bin/env bash
# session 17 call D (main 778cb89+: i20p turboquant-prod TC, i20c OCTOPUS TC, i12d SiLU fold merged): their device tests,
# test_cuda_verify with the fixed bound, the attention table rows of the new kernels beside SDPA; the 8B shape converts
# meanwhile for call E.
set -u
TESTS= . tests/bench/gpu_env.sh
L=$OUT
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
( [ -f $src/config.json ] || $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1; [ -f $W/e8.kvq ] || nice $B/kvq-convert -q -t 12 $src $W/e8.kvq --weights hyperquant:e8:4.0; echo "conv rc $?" ) > $L/conv.log 2>&1 &
t() { # name suite filter timeout
  KVQ_TEST_FILTER="$3" timeout $4 $B/$2 > $L/$1.log 2>&1; echo "== $1 rc $? $(el)"
  grep -hE '^\[ +(FAILED|PASSED) +\]' $L/$1.log | head -4
}
t verify test_cuda_verify "test_random" 60
t fold_hqx test_cuda_hqx "test_fold*" 90; grep -c "same bits yes" $L/fold_hqx.log; grep -hE "same bits no" $L/fold_hqx.log | head -3
t fold_model test_cuda_model "test_fold*" 120; grep -hE "differ|fold" $L/fold_model.log | cut -c1-200 | head -6
t kv_tc test_cuda_kv "test_attend_tc*" 200; grep -hiE "octopus|prod" $L/kv_tc.log | grep -iE "nmse|PASS|FAIL" | cut -c1-230 | head -16
t kv_oct test_cuda_kv "test_oct*" 60
t kv_tprod test_cuda_kv "test_tprod*" 60
t kv_graph test_cuda_kv "test_step_graph" 120; grep -hiE "octopus|prod" $L/kv_graph.log | cut -c1-200 | head -8
t kv_rows test_cuda_kv "test_attend_rows" 120; grep -hiE "octopus|prod" $L/kv_rows.log | cut -c1-200 | head -8
t kv_fused test_cuda_kv "test_attend_fused" 120
ROWS="int:4 tc2 lean,turboquant:4 tc lean,turboquant-prod:4,turboquant-prod:2,turboquant-prod:4 tc,turboquant-prod:4 tc2,turboquant-prod:3 tc,turboquant-prod:2 tc,turboquant-prod:2 tc2,octopus:4 tc,octopus:4 tc2,octopus:2 tc,octopus:2 tc2,octopus:4:qjl tc,octopus:2:qjl tc,hqmq:s96:r4,hqkv:e8:4"
CUDA_KV_BATCH=1 CUDA_KV_ONLY="$ROWS" timeout 200 $B/cuda_kv_attn 4096 32768 131072 > $L/kvattn.txt 2>&1; echo "== kv attn rc $? $(el)"
grep -E "^\| [0-9]+k \| 1 " $L/kvattn.txt | cut -c1-150
SDPA_BATCH=1 timeout 90 python3 tests/bench/cuda_kv_sdpa.py 4096 32768 131072 > $L/sdpa.txt 2>&1; echo "== sdpa rc $? $(el)"; grep -vE "^$" $L/sdpa.txt | tail -6
wait; cat $L/conv.log
(cd $L && tar -czf logsD.tgz *.log && rm -f *.log)
echo "== done $(el)"
