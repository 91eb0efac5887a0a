#!/usr/bin/env bash
# Full card protocol for each kvq model: perplexity of $KVQ_SHARED/data/heldout-books.txt
# in non-overlapping 512-token windows, no BOS, all but each window's first token scored,
# compared with reference/card.json (heldout_ppl_fp32, heldout_tokens_scored); 0.1 % bar.
# usage: tests/bench/ppl_cards.sh [-t THREADS] [MODEL_DIR...]   (run from the repo root after make)
set -u
threads=1
if [ "${1:-}" = "-t" ]; then threads=$2; shift 2; fi
shared=${KVQ_SHARED:-../shared}
text=$shared/data/heldout-books.txt
[ -f "$text" ] || { echo "skip: $text not found (set KVQ_SHARED)"; exit 0; }
models=("$@")
[ ${#models[@]} -eq 0 ] && models=("$shared/models/kvq-tiny-llama" "$shared/models/kvq-small-llama" "$shared/models/kvq-small-qwen3")
rc=0
for m in "${models[@]}"; do
  card=$m/reference/card.json
  want=$(python3 -c "import json,sys; c=json.load(open(sys.argv[1])); print(c['heldout_ppl_fp32'], c['heldout_tokens_scored'])" "$card")
  start=$(date +%s)
  out=$(build/kvq-run "$m" --ppl "$text" --ctx 512 --bos none --score all -t "$threads") || { echo "$m: kvq-run failed"; rc=1; continue; }
  secs=$(( $(date +%s) - start ))
  echo "$m: $out  [${secs}s, -t $threads]"
  python3 - "$m" "$want" "$out" <<'PY' || rc=1
import sys
m, want, out = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
ref, ref_n = float(want[0]), int(want[1])
ppl, n = float(out[1]), int(out[5])
rel = ppl / ref - 1
ok = abs(rel) <= 1e-3 and n == ref_n
print(f"  card {ref:.4f} ({ref_n} scored)  ours {ppl:.4f} ({n} scored)  rel {rel:+.2e}  {'PASS' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
PY
done
exit $rc
