#!/usr/bin/env bash
# Device call (issue 20, 2026-11-27 session 15): the Llama-3-8B shape (E8 4.0 weights) decoding at
# 128k context, batch 1, with every KV cache the device runs, without the 130k-token prefill (3-5
# device-minutes a codec): build/bench/cuda_decode_fill fills each cache's positions [0, T) with
# seeded synthetic keys and values through the codec's own device encoders (kvq_model_fill_kv,
# the kvq_gkv_append a prefill runs), then an 8-id prompt at T and N greedy tokens; its decode
# tok/s is kvq-run's "decode" figure (docs/KV.md, "Decode at long context without the prefill").
# One process (one model load) runs every codec of a list in turn, one line each.
#  1. (XCHECK=0 skips) the cross-check that justifies the method: int:4, int:2, kivi:4 at
#     T = 129,928, --ctx-max 131328 (the real runs' prompt and cache: decode 155.3, 166.7, 113.4
#     tok/s in docs/RESULTS.md, sessions 13-14) with the kernels those runs had (XENV, default
#     KVQ_CUDA_KV_TC_LEAN=0 KVQ_CUDA_PREP=0: the defaults before main e14b1e8) -> $OUT/xcheck128.txt;
#  2. (T128=0 skips) every codec in KVS at T = 131,072 (--ctx-max 131328), N=64 -> $OUT/fill128.txt;
#  3. T32=1: every codec in KVS at T = 32,575, --ctx-max 33024, N=128 (the 32.6k end-to-end table's
#     runs of gpu_kv_e2e.sh, session 13: a real row for every codec but fp16 and int:2) with that
#     session's kernels (XENV32, default XENV's + KVQ_CUDA_KV_TC_TURBO=0) -> $OUT/fill32.txt.
# Each run stops at TO (540) s or when the call's BUDGET (570) s are spent; lines already written stay.
# TEST=1 first runs test_cuda_model's test_kv_fill (GPU fill = CPU fill, decode steps as graphs).
# The 8B model is made and converted in /tmp/w8 when missing (as gpu_ab8b.sh: minutes); then the
# call stops there (FORCE=1: goes on) — call again on the warm machine.
# usage (dev box): make -j2 build/bench/cuda_decode_fill && BINS="kvq-convert make_synth_llama test_cuda_model" \
#                  bash tests/bench/gpu_bundle.sh build/bench/cuda_decode_fill
#        (device, carry [".cu"]): [KVS="..."] [XCHECK=0] [T128=0] [T32=1] [TEST=1] [N=64] [TO=540] bash tests/bench/gpu_kv_fill128.sh
set -u
TESTS= . tests/bench/gpu_env.sh # unpacks .cu, prints the GPU and its copy bandwidth, defines B and el
L=${OUT:-/tmp}
if [ "${TEST:-0}" = 1 ]; then
  KVQ_TEST_FILTER="test_kv_fill" timeout 200 $B/test_cuda_model > "$L/test_cuda_model.kv_fill.log" 2>&1; echo "== test_kv_fill rc $? $(el)"
  grep -E '^\[ +(OK|FAILED|SKIPPED) +\] test_|kv fill |refused' "$L/test_cuda_model.kv_fill.log" | head -24
fi
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
fresh=0; [ -f $W/e8.kvq ] || fresh=1
[ -f $src/config.json ] || $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1 || echo synth failed
[ -f $W/e8.kvq ] || $B/kvq-convert -q -t 16 $src $W/e8.kvq --weights hyperquant:e8:4.0 || echo "convert failed"
echo "== model $(el)"
if [ $fresh = 1 ] && [ "${FORCE:-0}" != 1 ]; then echo "the 8B model was not on this machine (made now): call again on the warm machine (FORCE=1: now)"; exit 0; fi
KVS=${KVS:-fp16 int:4 int:2 kivi:4 turboquant:4 turboquant:2 qturbo:4 turboquant-prod:4 octopus:4 hqkv:e8:4 hqmq:s96:r4}
fill() { # output-file "VAR=value ..." T ctx-max n specs...
  local f=$1 ev=$2 t=$3 c=$4 n=$5; shift 5
  local a=(); for kv in "$@"; do a+=(--kv "$kv"); done
  local left=$(( ${BUDGET:-570} - ($(date +%s) - t0) )) to=${TO:-540} # the call's 600 s: rows printed so far stay
  [ $left -lt $to ] && to=$left; [ $to -lt 30 ] && { echo "== $f: skipped (${left} s left of the call)"; return; }
  env $ev timeout $to $B/cuda_decode_fill $W/e8.kvq --fill $t --ctx-max $c -n $n "${a[@]}" > "$L/$f" 2> "$L/$f.err"
  echo "== $f rc $? $(el)"; cut -c1-250 "$L/$f"; grep -v '^$' "$L/$f.err" | cut -c1-250
}
[ "${XCHECK:-1}" = 1 ] && fill xcheck128.txt "${XENV-KVQ_CUDA_KV_TC_LEAN=0 KVQ_CUDA_PREP=0}" 129928 131328 ${N:-64} int:4 int:2 kivi:4
[ "${T128:-1}" = 1 ] && fill fill128.txt "" 131072 131328 ${N:-64} $KVS
[ "${T32:-0}" = 1 ] && fill fill32.txt "${XENV32-KVQ_CUDA_KV_TC_LEAN=0 KVQ_CUDA_PREP=0 KVQ_CUDA_KV_TC_TURBO=0}" 32575 33024 128 $KVS
echo "== done $(el)"
