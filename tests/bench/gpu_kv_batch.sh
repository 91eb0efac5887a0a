#!/usr/bin/env bash
# Device call (issues 20 and 12, 2026-11-27 session 15, helper 45): several sequences with a KV codec
# cache on the GPU (kvq-run --gpu --batch N --kv SPEC: one packed cache per (sequence, layer), each
# step a CUDA graph; docs/KV.md "Several sequences with a codec cache"). TEST=1 (default) first runs
# test_cuda_model's test_kv_seqs (3 sequences decoded together = each alone, int:4, turboquant:4,
# kivi:2 window 16) and test_seqs (the attention-input launcher with several sequences). Then the Llama-3-8B shape (E8 4.0, made and converted in /tmp/w8 when missing,
# as gpu_8b_spec.sh; the call then stops there unless FORCE=1), gpu_8b_spec.sh's prompt (560 bytes
# of heldout-books), 256 greedy tokens: for each KV cache in KVS (default fp32 = no --kv, int:4,
# kivi:4, turboquant:4) batch 1 and batch BATCH (default 8) -> the kvq-run lines, in $OUT/kv_batch.txt.
# AB=1 (session 16, helper i20m): each codec's batch-BATCH run twice, KVQ_CUDA_KV_SEQS_BATCHED=0 then =1 (a
# step's attends in one set of launches: docs/KV.md), the lines labelled "seqs0"/"seqs1"; with TEST=1 and
# test_cuda_kv in the bundle, its test_seqs_plan and test_attend_seqs run first too.
# usage (dev box): BINS="kvq-run kvq-convert make_synth_llama test_cuda_model test_cuda_kv cuda_hqx" bash tests/bench/gpu_bundle.sh
#        (device, carry [".cu"]): [KVS="..."] [BATCH=8] [TEST=0] [FORCE=1] [AB=1] bash tests/bench/gpu_kv_batch.sh
set -u
TESTS= . tests/bench/gpu_env.sh # unpacks .cu, prints the GPU and its copy bandwidth, defines B and el
L=${OUT:-/tmp}
if [ "${TEST:-1}" = 1 ]; then
  for t in test_kv_seqs test_seqs; do
    KVQ_TEST_FILTER="$t" timeout 240 $B/test_cuda_model > "$L/test_cuda_model.$t.log" 2>&1; echo "== $t rc $? $(el)"
    grep -E '^\[ +(OK|FAILED|SKIPPED) +\] test_|kv seqs |as rows' "$L/test_cuda_model.$t.log" | cut -c1-300 | head -16
  done
  if [ -x $B/test_cuda_kv ]; then
    KVQ_TEST_FILTER="test_*seqs*" timeout 300 $B/test_cuda_kv > "$L/test_cuda_kv.seqs.log" 2>&1; echo "== test_cuda_kv seqs rc $? $(el)"
    grep -E '^\[ +(OK|FAILED|SKIPPED) +\] test_|seqs' "$L/test_cuda_kv.seqs.log" | cut -c1-300 | head -24
  fi
fi
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
fresh=0; [ -f $W/e8.kvq ] || fresh=1
[ -f $src/config.json ] || $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1 || echo synth failed
[ -f $W/e8.kvq ] || $B/kvq-convert -q -t 16 $src $W/e8.kvq --weights hyperquant:e8:4.0 || echo "convert failed"
echo "== model $(el)"
if [ $fresh = 1 ] && [ "${FORCE:-0}" != 1 ]; then echo "the 8B model was not on this machine (made now): call again on the warm machine (FORCE=1: now)"; exit 0; fi
prompt=$(head -c 560 .cu/shared/data/heldout-books.txt)
for kv in ${KVS:-fp32 int:4 kivi:4 turboquant:4}; do
  a=(); [ "$kv" != fp32 ] && a=(--kv "$kv")
  for n in 1 ${BATCH:-8}; do
    b=(); [ "$n" != 1 ] && b=(--batch "$n")
    ab=x; [ "${AB:-0}" = 1 ] && [ "$n" != 1 ] && [ "$kv" != fp32 ] && ab="0 1"
    for sb in $ab; do
      lab=""; [ "$sb" != x ] && lab=" seqs$sb"
      out=$( ( [ "$sb" != x ] && export KVQ_CUDA_KV_SEQS_BATCHED=$sb; timeout 200 $B/kvq-run $W/e8.kvq --gpu --ctx-max 1024 -p "$prompt" -n 256 --temp 0 "${a[@]}" "${b[@]}" ) 2>&1 >/dev/null)
      echo "$out" | grep -E -- 'KV|--batch|decode|rror|refused' | sed "s/^/$kv batch $n$lab: /" | cut -c1-260 | tee -a "$L/kv_batch.txt"
    done
  done
  echo "== $kv $(el)"
done
