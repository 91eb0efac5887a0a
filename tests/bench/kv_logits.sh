#!/usr/bin/env bash
# Model-level agreement of two kvq-run binaries (e.g. before and after a change to the KV-codec
# cache): for each --kv spec, the logits of one token sequence (IDS, int32 LE; default the
# model's reference tokens repeated to 512 positions) and the perplexity of a text slice
# (--ppl TEXT --max-tokens 1024, ctx 512). Prints max|Δlogit| / max|logit|, the positions
# whose argmax differs, and both perplexities.
# usage: tests/bench/kv_logits.sh FILE.kvq OLD_KVQ_RUN NEW_KVQ_RUN MODEL_DIR TEXT [SPEC ...]
set -euo pipefail
file=${1:?usage: kv_logits.sh FILE.kvq OLD NEW MODEL_DIR TEXT [SPEC ...]}
old=${2:?}
new=${3:?}
model=${4:?}
text=${5:?}
shift 5
specs=${*:-int:4 kivi:2 octopus:4 octopus:3 turboquant:4 turboquant-prod:4 qturbo:4 hqmq:s96:r4 hqkv:e8:3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
ids=${IDS:-$tmp/ids.bin}
if [ -z "${IDS:-}" ]; then for i in 1 2 3 4 5 6 7 8; do cat "$model/reference/tokens_i32.bin"; done >"$ids"; fi
vocab=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['vocab_size'])" "$model/config.json")

echo "| KV cache | max abs Δlogit / max abs logit | argmax differs (of T) | ppl old | ppl new |"
echo "|---|---|---|---|---|"
for spec in $specs; do
  for b in old new; do
    bin=$old; [ $b = new ] && bin=$new
    "$bin" "$file" --kv "$spec" -t 1 --tokens "$ids" --logits "$tmp/$b.bin" 2>/dev/null
    "$bin" "$file" --kv "$spec" -t 1 --ppl "$text" --max-tokens 1024 --ctx 512 >"$tmp/$b.ppl" 2>&1
  done
  cmpl=$(python3 - "$tmp/old.bin" "$tmp/new.bin" "$vocab" <<'EOF'
import struct, sys
v = int(sys.argv[3])
a = open(sys.argv[1], 'rb').read(); b = open(sys.argv[2], 'rb').read()
n = len(a) // 4
x = struct.unpack('<%df' % n, a); y = struct.unpack('<%df' % n, b)
d = max(abs(p - q) for p, q in zip(x, y)); m = max(abs(p) for p in x)
T = n // v
am = sum(1 for t in range(T) if max(range(v), key=lambda i: x[t*v+i]) != max(range(v), key=lambda i: y[t*v+i]))
print("%.2e | %d of %d" % (d / m, am, T))
EOF
)
  po=$(grep -io 'ppl[ =:]*[0-9.]*' "$tmp/old.ppl" | head -1 | grep -o '[0-9.]*$')
  pn=$(grep -io 'ppl[ =:]*[0-9.]*' "$tmp/new.ppl" | head -1 | grep -o '[0-9.]*$')
  echo "| $spec | $cmpl | $po | $pn |"
done
