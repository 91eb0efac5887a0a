#!/usr/bin/env bash
# Issue 22 diagnostics: what per-row-block rates inside embed_tokens / lm_head would buy, measured
# end to end without a format for them. The allocation (alloc_rowsplit.py: the allocator's
# equal-slope rates over the other tensors and row blocks of the embedding and head, each block's
# share of its tensor's measured sensitivity ~ token frequency x row energy) is applied by
# encoding every block as its own HyperQuant-E8 tensor (hq_rowblocks), writing the reconstructions
# into a copy of the checkpoint, converting that copy with the other tensors' rates as rules
# (embedding and head kept: already quantized), and scoring it with kvq-verify against the
# ORIGINAL source (KVQ_VERIFY_ANY_SOURCE=1). Bits/param: the file's, with the embedding's and
# head's stored bytes replaced by the blocks' HyperQuant bytes. One markdown row.
#   tests/bench/alloc_rowsplit.sh BUILD MODEL TEXT WINDOWS FIRST.kvq COUNTS BUDGET [BLOCK_ROWS]
# FIRST.kvq: an allocated file of MODEL (its sensitivities); COUNTS: "id count" lines (tok_counts)
# or "id p" (p_bar.py).
set -euo pipefail
build=$1 model=$2 text=$3 windows=$4 first=$5 counts=$6 x=$7 br=${8:-256}
out=$(mktemp -d /tmp/kvq-rowsplit-XXXXXX)
trap 'rm -rf "$out"' EXIT
b=$("$build"/kvq-convert --dry-run --quantize-embeddings --weights "hyperquant:e8:$x" "$model" | sed -n 's/.*whole model \([0-9.]*\) bits\/param.*/\1/p')
r=$(python3 -c "print(f'{2*$x - $b:.4f}')")
"$build"/kvq-convert --dry-run --target-bpw "$x" --calib-from "$first" "$model" > "$out/dry.txt"
python3 tests/bench/alloc_rowsplit.py "$out/dry.txt" "$model" "$counts" "$r" "$br" --emit "$out/emit" >&2
blocks=0
for f in "$out"/emit/*.blocks; do
  n=$(basename "$f" .blocks)
  rows=$(tail -1 "$f" | cut -d' ' -f2)
  cols=$(( $(stat -c %s "$out/emit/$n.f32") / 4 / rows ))
  by=$("$build"/bench/hq_rowblocks "$out/emit/$n.f32" "$rows" "$cols" "$f" "$out/emit/$n.rec.f32" | sed -n 's/^total bytes \([0-9]*\).*/\1/p')
  blocks=$((blocks + by))
done
python3 tests/bench/alloc_rowsplit_ckpt.py "$model" "$out/ckpt" "$out/emit" >&2
rules=$(python3 -c "
import sys
print('[' + ', '.join(f'{{match: \"{n}\", bits: {float(r):.4f}}}' for n, r in (l.split() for l in open('$out/emit/rules.txt'))) + ']')")
"$build"/kvq-convert -q --weights "hyperquant:e8:$x" --set "rules=$rules" "$out/ckpt" "$out/e.kvq"
KVQ_VERIFY_ANY_SOURCE=1 "$build"/kvq-verify "$out/e.kvq" --source "$model" --text "$text" --windows "$windows" --json -q > "$out/e.json" || true
python3 - "$out/e.json" "$blocks" "$(basename "$model")" "$x" "$br" <<'PY'
import json, sys
j = json.load(open(sys.argv[1])); blocks = float(sys.argv[2])
n = sum(t['numel'] for t in j['tensors'])
bits = j['tensors_summary']['bits_per_param'] * n
for t in j['tensors']:
    if t['name'] in ('lm_head.weight', 'model.embed_tokens.weight'): bits -= t['bits_per_weight'] * t['numel']
bits += 8 * blocks
k = j['kld']
print(f"| {sys.argv[3]} | {float(sys.argv[4]):.1f} | rows of {sys.argv[5]} | {bits / n:.4f} | {k['mean']:.4f} ± {k['mean_se']:.4f} | {k['top1_agreement']:.3f} | {j['converted']['ppl']:.2f} |")
PY
