#!/usr/bin/env python3
"""The layer probe against the full probe (docs/ALLOCATION.md, "The layer probe").
usage: alloc_probe_compare.py DEBUG.txt|ROWS.csv
DEBUG.txt: the stderr of `KVQ_ALLOC_DEBUG=1 kvq-convert --dry-run --target-bpw X MODEL` (one
`probe-debug` line per layer tensor: its full-probe and layer-probe sensitivities), or the
rows docs/results/alloc_layer_probe_<model>.csv keeps of it. Prints Spearman and log-log Pearson
of the two, the ratio layer/full (median, min, max, per kind), and what the misses cost in the
allocator's own model: equal-slope rates at 6.02 dB a bit in [1.5, 8] (average 3 bits, equal
tensor sizes) from each set of sensitivities, the full probe's predicted KLD at those rates
against at its own (and at uniform rates). A model, not a measurement."""
import csv, math, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from alloc_pearson import pearson, ranks  # noqa: E402 (the same statistics as the brute-force validation)

def alloc(s, avg=3.0):  # r_i = c + 0.5 log2 s_i, clamped, c bisected to the average
    lo, hi = -60.0, 60.0
    for _ in range(200):
        c = (lo + hi) / 2
        r = [min(8.0, max(1.5, c + 0.5 * math.log2(x))) for x in s]
        if sum(r) / len(r) > avg: hi = c
        else: lo = c
    return r

rows = []
f = sys.argv[1]
if f.endswith(".csv"):
    for r in csv.DictReader(open(f)):
        rows.append((r["tensor"], float(r["full_probe_sensitivity"]), float(r["layer_probe_sensitivity"])))
else:
    for line in open(f):
        if line.startswith("probe-debug"):
            t = line.split()
            rows.append((t[1], float(t[5]), float(t[7])))
full = [r[1] for r in rows]; lay = [r[2] for r in rows]
q = sorted(l / f for l, f in zip(lay, full))
print(f"{len(rows)} tensors: Spearman {pearson(ranks(lay), ranks(full)):.3f}  log-log Pearson "
      f"{pearson([math.log(x) for x in lay], [math.log(x) for x in full]):.3f}  layer/full median {q[len(q) // 2]:.2f} "
      f"min {q[0]:.2f} max {q[-1]:.2f}")
kinds = sorted(set(r[0].split(".")[-2] for r in rows))
med = []
for k in kinds:
    v = sorted(r[2] / r[1] for r in rows if r[0].split(".")[-2] == k)
    med.append(f"{k} {v[len(v) // 2]:.2f}")
print("median layer/full per kind: " + ", ".join(med))
D = lambda r: sum(s * 2 ** (-2 * x) for s, x in zip(full, r))
d0 = D(alloc(full))
print(f"allocator's model, 3 bits average: layer-probe rates {D(alloc(lay)) / d0:.3f}x the full probe's KLD, "
      f"uniform rates {D([3.0] * len(full)) / d0:.3f}x")
