#!/usr/bin/env bash
# session 17 call H: E8 4.0 with the embedding and lm_head packed (--quantize-embeddings) against bf16, alternated in one
# call, with this session's defaults (the run: 182-token prompt, 256 greedy tokens, batch 1).
set -u
TESTS= . tests/bench/gpu_env.sh
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
[ -f $src/config.json ] || $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1
[ -f $W/e8q.kvq ] || $B/kvq-convert -q -t 16 $src $W/e8q.kvq --weights hyperquant:e8:4.0 --quantize-embeddings; echo "== converted $(el)"
prompt=$(head -c 560 .cu/shared/data/heldout-books.txt)
for r in 1 2; do for m in $W/e8q.kvq $src; do
  timeout 100 $B/kvq-run $m --gpu --ctx-max 1024 -p "$prompt" -n 256 --temp 0 2>&1 >/dev/null | grep -E "on the device|decode" | sed "s|^|$(basename $m): |" | cut -c1-160
done; done
echo "== done $(el)"
