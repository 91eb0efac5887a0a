#!/usr/bin/env bash
# Device call (issue 12, the layout's width on the GPU): Llama-3-8B shape, E8 4.0, the issue's
# decode run (prompt 182 tokens, 256 greedy new tokens, batch 1), the automatic 5-bit width
# against nibbles with ~1.3 % escapes (KVQ_HQX_WIDTH=4), new binary against the previous one
# (.cu/bin/kvq-run.old, KEEP=1 in gpu_bundle.sh), alternating; then the decode step's timeline
# (KVQ_CUDA_TIMELINE=1: per-op time inside the captured step, PDL off) for both widths; E8 4.0 with its
# embeddings and lm_head packed (--quantize-embeddings) at both widths; the bf16 source once.
# usage (on the device): [TESTS="..."] [ROUNDS=2] bash tests/bench/gpu_width8b.sh
set -u
. tests/bench/gpu_env.sh
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
[ -f $src/config.json ] || $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1 || echo synth failed
[ -f $W/e8.kvq ] || $B/kvq-convert -q -t 16 $src $W/e8.kvq --weights hyperquant:e8:4.0 || echo "convert failed"
[ -f $W/e8q.kvq ] || $B/kvq-convert -q -t 16 $src $W/e8q.kvq --weights hyperquant:e8:4.0 --quantize-embeddings || echo "convert q failed"
echo "== converted $(el)"
prompt=$(head -c 560 .cu/shared/data/heldout-books.txt)
run() { # label binary model [env...]
  local l=$1 b=$2 m=$3; shift 3
  out=$(env "$@" $b $m --gpu --ctx-max 1024 -p "$prompt" -n 256 --temp 0 2>&1 >/dev/null)
  echo "$out" | grep -E 'on the device|decode|profile' | sed "s/^/$l: /" | cut -c1-200
}
for r in $(seq ${ROUNDS:-2}); do
  run "new auto" $B/kvq-run $W/e8.kvq
  run "new w4" $B/kvq-run $W/e8.kvq KVQ_HQX_WIDTH=4
  run "old w4" $B/kvq-run.old $W/e8.kvq KVQ_HQX_WIDTH=4
  run "old auto" $B/kvq-run.old $W/e8.kvq
done
echo "== A/B done $(el)"
run "emb-q auto" $B/kvq-run $W/e8q.kvq
run "emb-q w4" $B/kvq-run $W/e8q.kvq KVQ_HQX_WIDTH=4
run "bf16" $B/kvq-run $src
echo "== timeline $(el)"
# marks are graph nodes: programmatic launches off (KVQ_CUDA_PDL=0) in the timeline runs, and
# one run without marks and without PDL to compare totals with
run "nopdl auto" $B/kvq-run $W/e8.kvq KVQ_CUDA_PDL=0
run "tl auto" $B/kvq-run $W/e8.kvq KVQ_CUDA_TIMELINE=1 KVQ_CUDA_PDL=0
run "tl w4" $B/kvq-run $W/e8.kvq KVQ_CUDA_TIMELINE=1 KVQ_CUDA_PDL=0 KVQ_HQX_WIDTH=4 | grep -E 'decode|matmul'
echo "== done $(el)"
