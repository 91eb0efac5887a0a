#!/usr/bin/env bash
# Device call (issue 12, session 14): the duration of every kernel of the 8B shape's one-token decode step, E8 4.0
# (Nsight Compute, one metric, each kernel alone: no overlap with its neighbours, so the sum is an upper bound of
# the kernels' share of a step and the gap to the measured step time is launch and dependency latency). A 1-token
# prompt and 3 new tokens: the prefill is itself a one-token step; the kernels of the last step are the decode graph's.
# usage (device, carry [".cu"], the 8B model made by gpu_ab8b.sh or here): bash tests/bench/gpu_step_ncu.sh
# writes $OUT/${NAME:-step_ncu}.csv (NAME: to keep several runs, e.g. KVQ_CUDA_PREP=1 NAME=step_ncu_p1 bash ...);
# tests/bench/step_ncu_table.py summarises it (per kernel name: calls, µs, share).
# (Session 14 call E ran its ncu command by hand on a warm machine that already held the model: docs/RESULTS.md.)
set -u
TESTS= . tests/bench/gpu_env.sh
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
[ -f $src/config.json ] || $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1 || echo synth failed
[ -f $W/e8.kvq ] || $B/kvq-convert -q -t 16 $src $W/e8.kvq --weights hyperquant:e8:4.0 || echo "convert failed"
echo "== model $(el)"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
$B/kvq-run $W/e8.kvq --gpu --ctx-max 1024 -p "The" -n 64 --temp 0 2>&1 >/dev/null | grep -E "decode" | sed 's/^/no ncu: /'
timeout ${NCU_TO:-300} $NCU --csv --metrics gpu__time_duration.sum --clock-control none --cache-control none \
  $B/kvq-run $W/e8.kvq --gpu --ctx-max 1024 -p "The" -n ${STEPS:-3} --temp 0 > $OUT/${NAME:-step_ncu}.csv 2> $OUT/${NAME:-step_ncu}.err
echo "== ncu rc $? $(el) $(grep -c gpu__time_duration $OUT/${NAME:-step_ncu}.csv) kernels"
