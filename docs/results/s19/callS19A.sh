#!/usr/bin/env bash
# session 19 call A (branch s19m a7a418a = main 88292f1 + i20q merged): the GPU suites in full (i20q's tests are in
# test_cuda_kv; test_cuda_model on this code at last) while the 8B shape converts; TurboQuant/qturbo prelude rows beside
# SDPA; the attend's fixed cost (tiny T, fused merge A/B, waves); the 8B decode at width 5 (auto) and 4 with timelines.
set -u
TESTS= . tests/bench/gpu_env.sh
L=$OUT
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
( $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1; nice $B/kvq-convert -q -t 10 $src $W/e8.kvq --weights hyperquant:e8:4.0; echo "conv rc $? $(el)" ) > $L/conv.log 2>&1 &
CP=$!
for t in test_cuda_kv test_cuda_model test_cuda_hqx; do
  ( timeout 330 $B/$t > $L/$t.log 2>&1; echo "== $t rc $? $(el)"; grep -hE '^\[ +(FAILED|PASSED) +\]|FAILED' $L/$t.log | head -8 ) > $L/$t.sum 2>&1 &
done
wait $(jobs -p | grep -v "^$CP$")
cat $L/*.sum
echo "== suites done $(el)"
CUDA_KV_BATCH=1 CUDA_KV_ONLY="turboquant:4 tc,turboquant:2 tc,qturbo:4 tc" timeout 120 $B/cuda_kv_attn 4096 32768 131072 > $L/A_turbo.txt 2>&1; echo "== turbo rc $? $(el)"
grep -E "^\| [0-9]+k \| 1 \|" $L/A_turbo.txt | grep -E "turbo|bf16" | cut -c1-120
SDPA_BATCH=1 timeout 120 python3 tests/bench/cuda_kv_sdpa.py 4096 32768 131072 > $L/A_sdpa.txt 2>&1; echo "== sdpa rc $? $(el)"; grep -E "^\| [0-9]+k" $L/A_sdpa.txt
CUDA_KV_BATCH=1 CUDA_KV_ONLY="bf16,int:4 tc lean" timeout 90 $B/cuda_kv_attn 256 1024 4096 32768 > $L/A_fixed.txt 2>&1; echo "== fixed rc $? $(el)"
grep -E "^\| [0-9]+k? \| 1 \|" $L/A_fixed.txt | grep -E "bf16|int:4" | cut -c1-120
CUDA_KV_FUSE_AB=1 CUDA_KV_BATCH=1 CUDA_KV_ONLY="bf16,int:4 tc lean" timeout 90 $B/cuda_kv_attn 256 4096 32768 > $L/A_fuse.txt 2>&1; echo "== fuse rc $? $(el)"
grep -E "^\| [0-9]+k? \| 1 \|" $L/A_fuse.txt | grep -E "bf16|int:4" | cut -c1-140
for wv in 0.5 2; do
  KVQ_CUDA_KV_WAVES=$wv CUDA_KV_BATCH=1 CUDA_KV_ONLY="int:4 tc lean" timeout 60 $B/cuda_kv_attn 256 4096 32768 > $L/A_waves$wv.txt 2>&1; echo "== waves $wv rc $? $(el)"
  grep -E "^\| [0-9]+k? \| 1 \|" $L/A_waves$wv.txt | grep -E "int:4" | cut -c1-120
done
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
CUDA_KV_BATCH=1 CUDA_KV_ONLY="int:4 tc lean" timeout 90 $NCU --csv --metrics gpu__time_duration.sum,sm__warps_active.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed -k regex:"attn|merge" -s 40 -c 8 $B/cuda_kv_attn 256 > $L/A_ncu256.csv 2> $L/A_ncu256.err; echo "== ncu256 rc $? $(el)"
grep -E "gpu__time|warps_active|dram__" $L/A_ncu256.csv | awk -F'","' '{print $5" | "$(NF-2)" | "$NF}' | cut -c1-150 | head -24
wait $CP; cat $L/conv.log
prompt=$(head -c 560 .cu/shared/data/heldout-books.txt)
run() { # label env...
  local l=$1; shift
  env "$@" timeout 100 $B/kvq-run $W/e8.kvq --gpu --ctx-max 1024 -p "$prompt" -n 256 --temp 0 > $L/run_$l.log 2>&1
  echo "== $l rc $? $(el)"; grep -hE 'on the device|decode' $L/run_$l.log | cut -c1-200
}
run auto
run w4 KVQ_HQX_WIDTH=4
run tl_auto KVQ_CUDA_TIMELINE=1 KVQ_CUDA_PDL=0
run tl_w4 KVQ_CUDA_TIMELINE=1 KVQ_CUDA_PDL=0 KVQ_HQX_WIDTH=4
grep -hE "matmul|packed|attend|prep" $L/run_tl_auto.log | head -12
grep -hE "matmul|packed|attend|prep" $L/run_tl_w4.log | head -12
(cd $L && tar -czf logsA.tgz *.log *.sum && rm -f *.log *.sum)
echo "== done $(el)"
