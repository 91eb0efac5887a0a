#!/usr/bin/env bash
# Device call (issue 12): the GPU suites, then an A/B of two kvq-run binaries (.cu/bin/kvq-run.old
# and .cu/bin/kvq-run), alternating run by run: the 1B shape (E8 4.0, RTN 4 g128) and, with
# SIZE8=1, the Llama-3-8B shape (E8 4.0 default conversion; QEMB=1 also with
# --quantize-embeddings; BF16=1 the bf16 source once), the shape: a prompt of ~128
# tokens (the first 560 bytes of heldout-books: 182 tokens with the synthetic models'
# tokenizer), 256 greedy new tokens. (First used, 2026-11-26, with KVQ_CUDA_L2PF=0/1 inside one
# binary for a prefetch variant since reverted: docs/results/gpu_runtime.md.)
# usage (on the device): [SIZE8=1] [QEMB=1] [BF16=1] [TESTS="..."] bash tests/bench/gpu_ab_decode.sh
set -u
. tests/bench/gpu_env.sh
prompt=$(head -c 560 .cu/shared/data/heldout-books.txt)
run() { # label file binary
  out=$($B/$3 $2 --gpu --ctx-max 1024 -p "$prompt" -n 256 --temp 0 2>&1 >/dev/null)
  echo "$out" | grep -E 'on the device|prefill|decode' | sed "s/^/$1 $3: /" | cut -c1-240
}
W=/tmp/w; mkdir -p $W; src=$W/synth-1b
[ -f $src/config.json ] || $B/make_synth_llama 1b $src tests/models/kvq-tiny-llama >/dev/null 2>&1 || echo synth failed
for s in hyperquant:e8:4.0 rtn:4:g128; do
  [ -f $W/1b-${s//:/-}.kvq ] || $B/kvq-convert -q -t 16 $src $W/1b-${s//:/-}.kvq --weights $s || echo "convert $s failed"
done
echo "== 1b converted $(el)"
for s in hyperquant:e8:4.0 rtn:4:g128; do for r in 1 2; do for b in kvq-run.old kvq-run; do run "1b $s" $W/1b-${s//:/-}.kvq $b; done; done; done
run "1b bf16" $src kvq-run
echo "== 1b done $(el)"
[ "${SIZE8:-0}" = 1 ] || exit 0
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
[ -f $src/config.json ] || $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1 || echo synth failed
echo "== 8b synth $(el)"
[ -f $W/e8.kvq ] || $B/kvq-convert -q -t 16 $src $W/e8.kvq --weights hyperquant:e8:4.0 || echo "convert failed"
echo "== 8b converted $(el)"
for r in 1 2; do for b in kvq-run.old kvq-run; do run "8b e8:4.0" $W/e8.kvq $b; done; done
echo "== 8b e8 done $(el)"
[ "${QEMB:-0}" = 1 ] && { [ -f $W/e8q.kvq ] || $B/kvq-convert -q -t 16 $src $W/e8q.kvq --weights hyperquant:e8:4.0 --quantize-embeddings; for b in kvq-run.old kvq-run; do run "8b e8:4.0 qemb" $W/e8q.kvq $b; done; }
[ "${BF16:-0}" = 1 ] && run "8b bf16" $src kvq-run # the dense path: the same kernels in both binaries
echo "== done $(el)"
