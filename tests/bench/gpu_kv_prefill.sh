#!/usr/bin/env bash
# Device call (issue 20, 2026-11-27 session 13): prefill attention over a KV codec cache in rows mode
# (kvq_gkv_attend_rows: a prefill chunk's tokens attend in groups of KVQ_CUDA_KV_ROWS, default 64, one
# set of launches a group) against one attend a token (KVQ_CUDA_KV_ROWS=0, the loop it replaces).
# Builds nothing: the binaries are built on the dev box and carried in .cu/ (gpu_bundle.sh with
# MODELS=1 for test_cuda_model's t128 model). Steps (logs in $OUT):
#  1. (SKIP_TESTS=1 skips) test_cuda_kv test_rows_plan + test_attend_rows (every codec, tensor cores
#     and pipelined, windows 0/40, waves 1/0.125: each row bit-equal to the token loop's attend, NMSE
#     vs the CPU cache), test_cuda_model test_kv_rows (t128 model: logits bit-equal rows on/off);
#  2. cuda_kv_attn CUDA_KV_ROWS=64 (the kernels alone: 64 rows at the end of a 4k/32k/128k packed
#     cache, rows mode against the token loop, host wall time; int:4 tc2, kivi:2 tc, turboquant:4,
#     octopus:3, and bf16);
#  3. the 8B shape (E8 4.0 weights, made and converted as gpu_kv_e2e.sh does; reused from /tmp/w8 on
#     a warm machine), a 32.6k-token prompt (the first 108,500 bytes of heldout-books), N=8 greedy tokens, for each codec in KVS
#     (default int:4, on tensor cores, and turboquant:4, not): prefill tok/s with rows mode and
#     without (the greedy text's md5 must be the same);
#  4. E2E128=1 instead of 1-3: the 128k end-to-end row: the first 425,000 bytes of
#     heldout-books (129,928 tokens), --ctx-max 131328, N=64 greedy tokens, rows mode, for each codec
#     in KVS128 (default int:4 only: one codec's prefill + decode is several minutes).
# One device command may run 10 minutes (≤ 550 s planned), so three calls: (a) E2E=0 (steps 1-2: the
# tests, 200 + 120 s at worst, and the kernel table); (b) SKIP_TESTS=1 (steps 2-3: the kernel table,
# then synth + convert of the 8B shape and 4 prefills of 32.6k with 120 s timeouts); (c) E2E128=1 on
# the still-warm machine (the model reused from /tmp/w8; one 128k run, 500 s timeout; on a fresh
# machine it only makes the model and says so: call again). More codecs at
# 128k: one call each (KVS128=turboquant:4 E2E128=1 ...).
# usage (dev box): MODELS=1 BINS="kvq-run kvq-convert test_cuda_kv test_cuda_model make_synth_llama cuda_hqx cuda_kv_attn" bash tests/bench/gpu_bundle.sh
#        (device, carry [".cu"]): E2E=0 bash tests/bench/gpu_kv_prefill.sh; SKIP_TESTS=1 bash tests/bench/gpu_kv_prefill.sh;
#        E2E128=1 bash tests/bench/gpu_kv_prefill.sh
set -u
TESTS= . tests/bench/gpu_env.sh # unpacks .cu, prints the GPU and its copy bandwidth, defines B and el
L=${OUT:-/tmp}
if [ "${E2E128:-0}" != 1 ] && [ "${SKIP_TESTS:-0}" != 1 ]; then
  KVQ_TEST_FILTER="test_rows_plan" timeout 60 $B/test_cuda_kv > "$L/test_cuda_kv.rows_plan.log" 2>&1; echo "== test_rows_plan rc $? $(el)"
  KVQ_TEST_FILTER="test_attend_rows" timeout ${TEST_S:-200} $B/test_cuda_kv > "$L/test_cuda_kv.attend_rows.log" 2>&1; echo "== test_attend_rows rc $? $(el)"
  grep -hE '^\[ +(OK|FAILED|SKIPPED|ERROR) +\] test_|rows plan:|FAIL' $L/test_cuda_kv.rows_plan.log $L/test_cuda_kv.attend_rows.log | head -30
  grep -hE '^test_cuda_kv: rows ' $L/test_cuda_kv.attend_rows.log | cut -c1-200 | head -80
  if [ -x $B/test_cuda_model ]; then
    KVQ_TEST_FILTER="test_kv_rows" timeout 120 $B/test_cuda_model > "$L/test_cuda_model.kv_rows.log" 2>&1; echo "== test_kv_rows rc $? $(el)"
    grep -E '^\[ +(OK|FAILED|SKIPPED) +\] test_|kv rows ' "$L/test_cuda_model.kv_rows.log" | head -20
  fi
fi
if [ "${E2E128:-0}" != 1 ] && [ -x $B/cuda_kv_attn ]; then # the kernels alone: 64 rows at the end of a packed cache, rows mode vs the loop
  CUDA_KV_ROWS=${ROWS:-64} CUDA_KV_ONLY="${ROWS_ONLY:-int:4 tc2,kivi:2 tc,turboquant:4,octopus:3}" CUDA_KV_ENC_ONLY=0 timeout 200 \
    $B/cuda_kv_attn 4096 32768 131072 2>&1 | grep -E '^\| (T_kv|[0-9]+k) ' | grep -v '^| encoder'
  echo "== cuda_kv_attn rows $(el)"
fi
[ "${E2E:-1}" = 0 ] && [ "${E2E128:-0}" != 1 ] && { echo "== done $(el)"; exit 0; }
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
fresh=0; [ -f $W/e8.kvq ] || fresh=1
[ -f $src/config.json ] || $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1 || echo synth failed
[ -f $W/e8.kvq ] || $B/kvq-convert -q -t 16 $src $W/e8.kvq --weights hyperquant:e8:4.0 || echo "convert failed"
echo "== model $(el)"
run() { # label timeout prompt-file ctx n kv-options...
  local l=$1 to=$2 p=$3 c=$4 n=$5; shift 5
  out=$(timeout $to $B/kvq-run $W/e8.kvq --gpu --ctx-max $c --prompt-file $p -n $n --temp 0 "$@" 2>&1 >$W/text.$l)
  echo "rc $?: $out" | grep -E 'KV cache|prefill|decode|error|cannot|exceeds|^rc [1-9]' | sed "s/^/$l: /" | cut -c1-260
  echo "$l: text md5 $(md5sum < $W/text.$l | cut -c1-12) $(el)"
}
if [ "${E2E128:-0}" = 1 ] && [ $fresh = 1 ] && [ "${FORCE128:-0}" != 1 ]; then
  echo "the 8B model was not on this machine (made now): run E2E128=1 again on the warm machine for the 128k row (FORCE128=1: now)"
elif [ "${E2E128:-0}" = 1 ]; then
  head -c 425000 .cu/shared/data/heldout-books.txt > $W/long128.txt
  for kv in ${KVS128:-int:4}; do run "128k-$kv" ${TO128:-500} $W/long128.txt 131328 ${N:-64} --kv $kv; done
else
  head -c 108500 .cu/shared/data/heldout-books.txt > $W/long.txt # = .cu/long.txt of gpu_kv_e2e.sh (32,575 tokens)
  for kv in ${KVS:-int:4 turboquant:4}; do
    run "32k-$kv-rows" 120 $W/long.txt 33024 ${N:-8} --kv $kv
    KVQ_CUDA_KV_ROWS=0 run "32k-$kv-token" 120 $W/long.txt 33024 ${N:-8} --kv $kv
  done
fi
echo "== done $(el)"
