#!/usr/bin/env bash
# session 18 call F (branch i12s d792f80, helper-57: the SiLU·up preparation in the gate/up product's epilogue): its
# tests (bits against today's path) and the suites while the 8B shape converts; the decode A/B epilogue on / off with
# bf16 in the same rounds; one timeline run (the epilogue fired).
set -u
TESTS= . tests/bench/gpu_env.sh
L=$OUT
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
( [ -f $src/config.json ] || $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1; [ -f $W/e8.kvq ] || nice $B/kvq-convert -q -t 12 $src $W/e8.kvq --weights hyperquant:e8:4.0; echo "conv rc $? $(el)" ) > $L/conv.log 2>&1 &
t() { # name suite filter timeout
  KVQ_TEST_FILTER="$3" timeout $4 $B/$2 > $L/$1.log 2>&1; echo "== $1 rc $? $(el)"
  grep -hE '^\[ +(FAILED|PASSED) +\]' $L/$1.log | head -4
}
t epi_hqx test_cuda_hqx "test_silu_epi" 60; grep -hiE "epi|differ|same" $L/epi_hqx.log | cut -c1-200 | head -12
t epi_model test_cuda_model "test_silu_epi_model" 90; grep -hiE "epi|differ|same" $L/epi_model.log | cut -c1-200 | head -6
t hqx_all test_cuda_hqx "*" 120
t model_all test_cuda_model "*" 200
wait; cat $L/conv.log
prompt=$(head -c 560 .cu/shared/data/heldout-books.txt)
KVQ_CUDA_TIMELINE=1 KVQ_CUDA_PDL=0 timeout 120 $B/kvq-run $W/e8.kvq --gpu --ctx-max 1024 -p "$prompt" -n 32 --temp 0 > $L/timeline.log 2>&1; echo "== timeline rc $? $(el)"
grep -hE "silu|packed" $L/timeline.log | head -8
TESTS= ROUNDS=2 CONFIGS="epi1|KVQ_CUDA_SILU_EPI=1;epi0|KVQ_CUDA_SILU_EPI=0;bf16|M=/tmp/w8/synth-8b" bash tests/bench/gpu_ab8b.sh 2>&1 | grep -vE '^(NVIDIA|copy)'
(cd $L && tar -czf logsF.tgz *.log && rm -f *.log)
echo "== done $(el)"
