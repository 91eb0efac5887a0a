#!/usr/bin/env bash
# session 18 call E (main + KVQ_CUDA_G1P_SHORT): test_cuda_hqx (the ring of 4 for short rows: same bits) while the
# 8B shape converts; the step inside its graph under Nsight Systems (per-kernel start and duration: the overlap and
# the idle gaps); then the decode A/B: short rows on the ring of 4 / off, bf16 in the same rounds.
set -u
TESTS= . tests/bench/gpu_env.sh
L=$OUT
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
( [ -f $src/config.json ] || $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1; [ -f $W/e8.kvq ] || nice $B/kvq-convert -q -t 12 $src $W/e8.kvq --weights hyperquant:e8:4.0; echo "conv rc $? $(el)" ) > $L/conv.log 2>&1 &
timeout 120 $B/test_cuda_hqx > $L/test_cuda_hqx.log 2>&1; echo "== test_cuda_hqx rc $? $(el)"
grep -hE '^\[ +(FAILED|PASSED) +\]' $L/test_cuda_hqx.log; grep -c "int8/s4" $L/test_cuda_hqx.log
wait; cat $L/conv.log
NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1); echo "nsys: $NSYS"
prompt=$(head -c 560 .cu/shared/data/heldout-books.txt)
for cf in "def|KVQ_CUDA_G1P_SHORT=0"; do
  n=${cf%%|*}; env ${cf#*|} timeout 150 $NSYS profile --cuda-graph-trace=node -t cuda --sample=none --cpuctxsw=none -o $L/step_$n -f true \
    $B/kvq-run $W/e8.kvq --gpu --ctx-max 1024 -p "$prompt" -n 24 --temp 0 > $L/nsys_$n.log 2>&1; echo "== nsys $n rc $? $(el)"
  timeout 120 $NSYS stats --report cuda_gpu_trace --format csv -o $L/trace_$n $L/step_$n.nsys-rep > /dev/null 2>&1; echo "== stats rc $? $(el)"
  f=$(ls $L/trace_$n*.csv 2>/dev/null | head -1); [ -n "$f" ] && gzip -c "$f" > $OUT/nsys_trace_$n.csv.gz
  [ -n "$f" ] && python3 tests/bench/step_nsys_table.py "$f" 1 2>&1 | head -40
done
TESTS= ROUNDS=2 CONFIGS="s0|KVQ_CUDA_G1P_SHORT=0;s4|KVQ_CUDA_G1P_SHORT=4;bf16|M=/tmp/w8/synth-8b" bash tests/bench/gpu_ab8b.sh 2>&1 | grep -vE '^(NVIDIA|copy)'
(cd $L && tar -czf logsE.tgz *.log && rm -f *.log)
echo "== done $(el)"
