#!/usr/bin/env bash
# Converts MODEL with every shipped recipe (recipes/*.yaml) and measures each file with
# kvq-verify on the first MAX_TOKENS tokens of TEXT (the cards' protocol: 512-token windows,
# no BOS): one markdown row per recipe with conversion time, --dry-run's predicted size against
# the real one, whole-model bits/param, the KV codec's bits/element and the PPL / KLD of the file
# as users run it (weights + KV codec), plus the weights alone.
#   tests/bench/recipes_table.sh [BUILD] [MODEL] [TEXT] [MAX_TOKENS]
set -euo pipefail
build=${1:-build}
model=${2:-../shared/models/kvq-small-qwen3}
text=${3:-../shared/data/heldout-books.txt}
maxtok=${4:-4096}
out=$(mktemp -d /tmp/kvq-recipes-XXXXXX)
trap 'rm -rf "$out"' EXIT
echo "| recipe | convert s | predicted bytes | file bytes | pred. err | bits/param | quantized bits/w | KV codec | KV bits/elem | PPL src | PPL file | ΔPPL | KLD file | KLD weights only | top-1 |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for r in recipes/*.yaml; do
  name=$(basename "$r" .yaml)
  pred=$("$build"/kvq-convert --dry-run -r "$r" "$model" | sed -n 's/^predicted: \([0-9]*\) bytes.*/\1/p')
  t0=$(date +%s.%N)
  "$build"/kvq-convert -q -r "$r" "$model" "$out/$name.kvq"
  t1=$(date +%s.%N)
  "$build"/kvq-verify "$out/$name.kvq" --text "$text" --max-tokens "$maxtok" --json -q > "$out/$name.json" || true
  python3 - "$out/$name.json" "$out/$name.kvq" "$name" "$pred" "$t0" "$t1" <<'PY'
import json, os, sys
j = json.load(open(sys.argv[1])); size = os.path.getsize(sys.argv[2]); pred = int(sys.argv[4])
runs = {r["label"]: r for r in j.get("runs", [])}
w = runs.get("weights", {}); c = j["converted"]; kv = j.get("kv") or {}
ts = j["tensors_summary"]
lb = ts.get("lossy_bits_per_weight")
print(f"| {sys.argv[3]} | {float(sys.argv[6]) - float(sys.argv[5]):.1f} | {pred} | {size} | {100 * (pred - size) / size:+.2f} % | "
      f"{ts['bits_per_param']:.3f} | {'%.3f' % lb if lb is not None else '-'} | {kv.get('spec') or 'fp16 (none)'} | "
      f"{'%.3f' % kv['bits_per_element'] if kv else '16'} | {j['source']['ppl']:.3f} | {c['ppl']:.3f} ± {c['ppl_se']:.3f} | "
      f"{100 * c['ppl_delta_rel']:+.2f} % | {j['kld']['mean']:.4f} | {w.get('kld', {}).get('mean', float('nan')):.4f} | "
      f"{j['kld']['top1_agreement']:.3f} |")
PY
done
