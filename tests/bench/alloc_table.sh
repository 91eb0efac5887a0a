#!/usr/bin/env bash
# Allocated (--target-bpw X) against uniform HyperQuant (every matrix, embeddings and lm_head
# included, at the one rate that gives the same whole-model bits/param) at each budget X:
# kvq-verify's mean KLD / top-1 / PPL on the first WINDOWS 512-token windows of TEXT (the cards'
# protocol). One markdown row per budget. The allocated files calibrate on text the model samples
# itself (the default, no data) unless CALIB=FILE is set.
# The first budget's conversion measures the sensitivities; the others reuse them (--calib-from).
#   tests/bench/alloc_table.sh [BUILD] [MODEL] [TEXT] [WINDOWS] [BUDGET...]
set -euo pipefail
build=${1:-build}
model=${2:-../shared/models/kvq-small-llama}
text=${3:-../shared/data/heldout-books.txt}
windows=${4:-4}
shift $(( $# < 4 ? $# : 4 ))
budgets=("$@")
[ ${#budgets[@]} -gt 0 ] || budgets=(3.0 3.5 4.0 4.5)
calib=()
# FIRST=FILE.kvq: an allocated file of this model whose sensitivities every budget reuses;
# KEEP=PATH: where to keep a copy of the first budget's allocated file (to pass as FIRST later)
# PROBE=layer|full: the allocated files' sensitivity probe (kvq-convert --probe; default: its default)
# UNIFORM=0: no uniform file (its columns print "-")
first=${FIRST:-}
probe=()
[ -n "${PROBE:-}" ] && probe=(--probe "$PROBE")
uniform=${UNIFORM:-1}
[ -n "${CALIB:-}" ] && calib=(--calib "$CALIB")
out=$(mktemp -d /tmp/kvq-alloc-XXXXXX)
trap 'rm -rf "$out"' EXIT
[ -n "$first" ] && cp "$first" "$out/first.kvq"
verify() { "$build"/kvq-verify "$1" --text "$text" --windows "$windows" --json -q > "$2" || true; }
echo "| model | budget | uniform spec | uniform bits/param | uniform KLD | uniform top-1 | uniform PPL | allocated bits/param | allocated KLD | allocated top-1 | allocated PPL | KLD change | convert s (alloc) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for x in "${budgets[@]}"; do
  # uniform: the rate whose whole-model bits/param is x (norms stay bf16: a few thousandths above the rate)
  b=$("$build"/kvq-convert --dry-run --quantize-embeddings --weights "hyperquant:e8:$x" "$model" | sed -n 's/.*whole model \([0-9.]*\) bits\/param.*/\1/p')
  r=$(python3 -c "print(f'{2*$x - $b:.4f}')")
  [ "$uniform" = 0 ] || "$build"/kvq-convert -q --quantize-embeddings --weights "hyperquant:e8:$r" "$model" "$out/u.kvq"
  t0=$(date +%s.%N)
  if [ -f "$out/first.kvq" ]; then
    "$build"/kvq-convert -q --target-bpw "$x" --calib-from "$out/first.kvq" "$model" "$out/a.kvq"
  else
    "$build"/kvq-convert -q --target-bpw "$x" "${calib[@]}" "${probe[@]}" "$model" "$out/a.kvq"
    cp "$out/a.kvq" "$out/first.kvq"
    [ -z "${KEEP:-}" ] || cp "$out/a.kvq" "$KEEP"
  fi
  t1=$(date +%s.%N)
  if [ "$uniform" = 0 ]; then echo '{}' > "$out/u.json"; else verify "$out/u.kvq" "$out/u.json"; fi
  verify "$out/a.kvq" "$out/a.json"
  python3 - "$out/u.json" "$out/a.json" "$(basename "$model")" "$x" "$r" "$t0" "$t1" <<'PY'
import json, sys
u, a = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
def f(j): return j["tensors_summary"]["bits_per_param"], j["kld"]["mean"], j["kld"]["mean_se"], j["kld"]["top1_agreement"], j["converted"]["ppl"]
ab, ak, as_, at, ap = f(a)
if u:
    ub, uk, us, ut, up = f(u)
    ucols, chg = f"hyperquant:e8:{sys.argv[5]} | {ub:.4f} | {uk:.4f} ± {us:.4f} | {ut:.3f} | {up:.2f}", f"{100*(ak-uk)/uk:+.1f} %"
else:
    ucols, chg = "- | - | - | - | -", "-"
print(f"| {sys.argv[3]} | {float(sys.argv[4]):.1f} | {ucols} | "
      f"{ab:.4f} | {ak:.4f} ± {as_:.4f} | {at:.3f} | {ap:.2f} | {chg} | {float(sys.argv[7])-float(sys.argv[6]):.0f} |")
PY
done
