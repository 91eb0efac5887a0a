#!/usr/bin/env bash
# kvq-verify benchmark: for kvq-small-llama and kvq-small-qwen3, converts with each
# weight codec, verifies against the source on heldout-books.txt with a KV codec
# paired to it (one run gives three rows: weights alone, KV codec alone, both), and
# prints a markdown table of ΔPPL and KLD plus the time each verification took.
# usage: [MODELS=...] [PAIRS=...] [THREADS=2] tests/bench/verify_table.sh [BUILD] [WINDOWS] [OUTDIR]
#   WINDOWS: 512-token windows to use (0 = the whole book, as `make verify-full`)
set -euo pipefail
build=${1:-build}
windows=${2:-16}
out=${3:-/tmp/kvq-verify-bench}
shared=${KVQ_SHARED:-../shared}
text=$shared/data/heldout-books.txt
threads=${THREADS:-2}
mkdir -p "$out"
# weight codec | KV codec paired with it ("-" = none)
pairs=${PAIRS:-"none|- rtn:4:g128|kivi:4 rtn:3:g128|int:4 hyperquant:e8:4|octopus:3 hyperquant:e8:3|turboquant:3 hyperquant:e8:2|hqmq:s96:r4"}
# TABLE_ONLY=1: print the table from the JSON already in OUTDIR, run nothing.
[ "${TABLE_ONLY:-0}" = 1 ] && MODELS=" "
for model in ${MODELS:-kvq-small-llama kvq-small-qwen3}; do
  src=$shared/models/$model
  for pair in $pairs; do
    w=${pair%%|*}; kv=${pair##*|}
    tag=$model.${w//:/_}
    kvq=$out/$tag.kvq
    [ -f "$kvq" ] || "$build/kvq-convert" -q --weights "$w" "$src" "$kvq" >/dev/null
    kvarg=(); [ "$kv" != "-" ] && kvarg=(--kv "$kv")
    json=$out/$tag.kv_${kv//:/_}.w$windows.json
    echo "== $model $w kv=$kv windows=$windows" >&2
    /usr/bin/time -f "%e s wall, %U s user" -o "$json.time" \
      "$build/kvq-verify" -q -t "$threads" "$kvq" --source "$src" --text "$text" --windows "$windows" \
      "${kvarg[@]}" --json > "$json" || [ $? -eq 1 ]
  done
done
python3 - "$out" "$windows" <<'EOF'
import glob, json, os, sys
out, windows = sys.argv[1], sys.argv[2]
def f(v, fmt):
    return "-" if v is None else format(v, fmt)
print("| model | weights | bits/w | KV codec | KV bits/elem | run | ppl | ΔPPL | ΔPPL % | KLD mean | KLD median | KLD p99 | top-1 % | RMS Δp % |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
times, protos = [], {}
for path in sorted(glob.glob(f"{out}/*.w{windows}.json")):
    try:
        d = json.load(open(path))
    except ValueError:  # a run still in progress (or one that failed): no report yet
        continue
    model = os.path.basename(path).split(".")[0]
    lossy = [t for t in d["tensors"] if not t["lossless"]]
    w = lossy[0]["codec"] if lossy else "none"
    bpw = d["tensors_summary"]["lossy_bits_per_weight"]
    kv = d["kv"]["spec"] if d["kv"] else "-"
    kvb = d["kv"]["bits_per_element"] if d["kv"] else None
    protos[model] = (d["protocol"], d["source"]["ppl"])
    for r in d["runs"]:
        k = r["kld"]
        print(f"| {model} | {w} | {f(bpw, '.3f')} | {kv} | {f(kvb, '.3f')} | {r['label']} | {r['ppl']:.4f} | "
              f"{r['ppl_delta']:+.4f} | {100 * r['ppl_delta_rel']:+.3f} | {k['mean']:.5f} | {k['median']:.5f} | "
              f"{k['p99']:.5f} | {100 * k['top1_agreement']:.2f} | {100 * k['rms_dp']:.3f} |")
    p, s = d["protocol"], d["seconds"]
    t = open(path + ".time").read().strip() if os.path.exists(path + ".time") else "?"
    times.append(f"| {model} | {w} | {kv} | {len(d['runs']) + 1} | {p['windows']} | {p['scored_positions']} | "
                 f"{s['integrity']:.1f} | {s['tensors']:.1f} | {s['eval']:.1f} | {t} |")
print()
for m, (p, ppl) in protos.items():
    print(f"{m}: source ppl {ppl:.4f}; protocol: {p['description']}; {p['text']} sha256 {p['text_sha256'][:16]}..., "
          f"{p['tokens']} tokens, {p['windows']} windows, {p['scored_positions']} scored")
print()
print("| model | weights | KV codec | models in lockstep | windows | scored | integrity s | tensors s | eval s | /usr/bin/time |")
print("|---|---|---|---|---|---|---|---|---|---|")
print("\n".join(times))
EOF
