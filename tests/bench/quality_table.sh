#!/usr/bin/env bash
# Weight-codec quality table (issues 3 and 4): for each model and weight codec spec,
# converts into a temp dir, reads the effective bits from kvq-inspect --json, measures
# per-tensor SNR, perplexity and KLD against the source with kvq-verify (cards' protocol,
# first WINDOWS 512-token windows of heldout-books.txt), deletes the .kvq, and prints a
# markdown table.
# usage: [MODELS=...] [SPECS=...] [THREADS=2] [WINDOWS=4] [TABLE_ONLY=1] [PYTHON=python with numpy]
#        tests/bench/quality_table.sh [BUILD] [OUTDIR]
set -euo pipefail
build=${1:-build}
out=${2:-/tmp/kvq-quality}
shared=${KVQ_SHARED:-../shared}
text=$shared/data/heldout-books.txt
threads=${THREADS:-2}
windows=${WINDOWS:-4}
models=${MODELS:-"kvq-small-llama kvq-small-qwen3"}
# HyperQuant at 4 lattices x 4 rates; RTN at g128 (3.25/4.25/5.25 bits) and at group
# sizes that land on the HyperQuant rates (2+32/32=3.0, 3+32/64=3.5, 3+32/32=4.0,
# 4+32/32=5.0); QET at ratio 16/bits against bf16.
specs=${SPECS:-"hyperquant:e8:3 hyperquant:d4:3 hyperquant:a2:3 hyperquant:z:3 rtn:2:g32 rtn:3:g128 qet:5.333
 hyperquant:e8:4 hyperquant:d4:4 hyperquant:a2:4 hyperquant:z:4 rtn:3:g32 rtn:4:g128 qet:4
 hyperquant:e8:3.5 hyperquant:d4:3.5 hyperquant:a2:3.5 hyperquant:z:3.5 rtn:3:g64 qet:4.571
 hyperquant:e8:5 hyperquant:d4:5 hyperquant:a2:5 hyperquant:z:5 rtn:4:g32 rtn:5:g128 qet:3.2"}
mkdir -p "$out"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvq-quality.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
if [ "${TABLE_ONLY:-0}" != 1 ]; then
  for model in $models; do
    src=$shared/models/$model
    for spec in $specs; do
      tag=$model.${spec//:/_}.w$windows
      [ -s "$out/$tag.json" ] && continue        # resumable: done rows are kept
      kvq=$tmp/$tag.kvq
      echo "== $(date -u +%T) $model $spec windows=$windows" >&2
      /usr/bin/time -f "%e" -o "$out/$tag.convert_s" \
        "$build/kvq-convert" -q --weights "$spec" "$src" "$kvq" >/dev/null
      "$build/kvq-inspect" --json "$kvq" > "$out/$tag.inspect.json.tmp"
      /usr/bin/time -f "%e %U" -o "$out/$tag.verify_s" \
        "$build/kvq-verify" -q -t "$threads" "$kvq" --source "$src" --text "$text" \
        --windows "$windows" --no-kv --tensors 0 --json > "$out/$tag.json.tmp" || [ $? -eq 1 ]
      rm -f "$kvq"
      mv "$out/$tag.inspect.json.tmp" "$out/$tag.inspect.json"
      mv "$out/$tag.json.tmp" "$out/$tag.json"
    done
  done
fi
"${PYTHON:-python3}" - "$out" "$windows" "$shared" <<'EOF'
import glob, json, math, os, struct, sys
out, windows, shared = sys.argv[1], sys.argv[2], sys.argv[3]
def energy(model):
    """sum of squares of every source tensor (for pooled SNR), cached in OUTDIR; None without numpy"""
    cache = f"{out}/{model}.energy.json"
    if os.path.exists(cache):
        return json.load(open(cache))
    try:
        import numpy as np
    except ImportError:
        return None
    e, d = {}, f"{shared}/models/{model}"
    for fn in sorted(glob.glob(f"{d}/*.safetensors")):
        with open(fn, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            hdr = json.loads(f.read(n))
            base = 8 + n
            for name, t in hdr.items():
                if name == "__metadata__":
                    continue
                a, b = t["data_offsets"]
                f.seek(base + a)
                raw = f.read(b - a)
                if t["dtype"] == "BF16":
                    x = (np.frombuffer(raw, np.uint16).astype(np.uint32) << 16).view(np.float32)
                else:
                    x = np.frombuffer(raw, {"F32": np.float32, "F16": np.float16}[t["dtype"]])
                e[name] = float(np.sum(x.astype(np.float64) ** 2))
    json.dump(e, open(cache, "w"))
    return e
rows = []
for path in sorted(glob.glob(f"{out}/*.w{windows}.json")):
    if path.endswith(".inspect.json"):
        continue
    d = json.load(open(path))
    base = path[:-len(".json")]
    ins = json.load(open(base + ".inspect.json"))
    model, spec = os.path.basename(path).split(".")[0], None
    lossy = [t for t in d["tensors"] if not t["lossless"]]
    spec = lossy[0]["codec"] if lossy else "none"
    # pooled SNR = 10 log10(sum ||w||^2 / sum ||w - w^||^2) over the lossy tensors, the
    # source energies read from the safetensors (needs numpy: PYTHON=/work/venv/bin/python);
    # without numpy, each tensor's error ratio weighted by its element count instead.
    en = energy(model)
    if en:
        sig = sum(en[t["name"]] for t in lossy)
        pooled = 10 * math.log10(sig / sum(en[t["name"]] * 10 ** (-t["snr_db"] / 10) for t in lossy))
    else:
        n = sum(t["numel"] for t in lossy)
        pooled = -10 * math.log10(sum(t["numel"] * 10 ** (-t["snr_db"] / 10) for t in lossy) / n)
    mean = sum(t["snr_db"] for t in lossy) / len(lossy)
    r = [x for x in d["runs"] if x["label"] == "weights"][0]
    vs = open(base + ".verify_s").read().split()
    rows.append((model, spec, ins["totals"]["bits_per_weight"],
                 d["tensors_summary"]["lossy_bits_per_weight"], pooled, mean,
                 d["tensors_summary"]["min_snr_db"], d["source"]["ppl"], r["ppl"],
                 r["ppl_delta_rel"], r["kld"]["mean"], r["kld"]["p99"],
                 r["kld"]["top1_agreement"], float(open(base + ".convert_s").read().split()[-1]),
                 float(vs[-2]), d["protocol"]))
def key(r):
    fam = r[1].split(":")[0]
    return (r[0], round(r[3] * 2) / 2, {"hyperquant": 0, "rtn": 1, "qet": 2}.get(fam, 3), r[1])
rows.sort(key=key)
print("| model | weights | eff. bpw (inspect totals) | bpw (lossy tensors) | SNR pooled dB | SNR mean dB | SNR min dB | ppl | ΔPPL % | KLD mean | KLD p99 | top-1 % | convert s | verify s |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r[0]} | {r[1]} | {r[2]:.3f} | {r[3]:.3f} | {r[4]:.2f} | {r[5]:.2f} | {r[6]:.2f} | "
          f"{r[8]:.3f} | {100*r[9]:+.2f} | {r[10]:.4f} | {r[11]:.4f} | {100*r[12]:.2f} | {r[13]:.1f} | {r[14]:.0f} |")
for m in sorted({r[0] for r in rows}):
    r = [x for x in rows if x[0] == m][0]
    print(f"\n{m}: source ppl {r[7]:.4f}; protocol {json.dumps(r[15])}")
EOF
