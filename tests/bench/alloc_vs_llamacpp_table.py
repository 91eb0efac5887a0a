#!/usr/bin/env python3
# The side-by-side table of docs/RESULTS.md from tests/bench/alloc_vs_llamacpp.sh's rows: for each
# llama.cpp mix, the largest kvq file that is no larger (whole-file bits/param), both texts' KLD,
# the change in KLD, same top-1 and PPL ratio. Rows of several runs may be concatenated (the
# script's markdown rows; other lines are ignored); a text or mix missing from the rows is "-".
#   tests/bench/alloc_vs_llamacpp_table.py ROWS.md [ROWS.md ...]
# PAIR="Q2_K=3.7 Q4_K_M=5.3" names the kvq budget that faces a mix instead of the largest file no
# larger; DEFAULT=5.0 adds a row for the default conversion (the budget kept as MODEL-a5.0.kvq)
# against Q4_K_M (or marks that budget's row, where it is the one facing Q4_K_M).
import os, re, sys

rows = {}  # (label, text) -> (bits, kld, kld_se, top1, ppl)
for path in sys.argv[1:]:
    for line in open(path, encoding="utf-8"):
        c = [x.strip() for x in line.strip().strip("|").split("|")]
        if len(c) != 7 or c[4] in ("failed", "KLD") or not c[3][:1].isdigit():
            continue
        k = re.match(r"([0-9.]+) ± ([0-9.]+)", c[4])
        rows[(c[2], c[1])] = (float(c[3]), float(k.group(1)), float(k.group(2)), c[5], c[6])
texts = sorted({t for _, t in rows}, key=lambda t: (not t.startswith("heldout"), t))
mixes = ["Q2_K", "Q3_K_M", "Q4_K_M", "Q5_K_M", "Q6_K"]
budgets = {}  # budget -> bits/param of its file
for (label, _), r in rows.items():
    m = re.match(r"kvq --target-bpw ([0-9.]+) \(allocated\)", label)
    if m:
        budgets[m.group(1)] = r[0]
pair = dict(p.split("=") for p in os.environ.get("PAIR", "").split())


def cell(label, t, i):
    r = rows.get((label, t))
    if r is None:
        return "-"
    return f"{r[1]:.4f} ± {r[2]:.4f}" if i == 1 else r[i]


def line(mix, x, name):
    lab, kl = f"llama.cpp {mix}", f"kvq --target-bpw {x} (allocated)"
    lb = next((rows[(lab, t)][0] for t in texts if (lab, t) in rows), None)
    ch = []
    for t in texts:
        a, b = rows.get((lab, t)), rows.get((kl, t))
        ch.append(f"{(b[1] / a[1] - 1) * 100:+.0f} %" if a and b and a[1] > 0 else "-")
    print(f"| {mix} ({lb:.3f}) | " + " | ".join(cell(lab, t, 1) for t in texts) +
          f" | {name} ({budgets[x]:.3f}) | " + " | ".join(cell(kl, t, 1) for t in texts) +
          " | " + " / ".join(ch).replace("-", "−") + " | " +
          " / ".join(f"{cell(lab, t, 3)[:-2]} → {cell(kl, t, 3)}" for t in texts) + " | " +
          " / ".join(f"{cell(lab, t, 4)} → {cell(kl, t, 4)}" for t in texts) + " |")


short = {"heldout-books": "books", "wikitext-2-test": "WikiText-2"}
tn = [short.get(t, t) for t in texts]
heads = " | ".join(f"KLD {t}" for t in tn)
print(f"| llama.cpp mix (bits/param) | {heads} | kvq file no larger (bits/param) | {heads} | change | "
      f"same top-1 {' / '.join(tn)}: llama.cpp → kvq | PPL ratio {' / '.join(tn)}: llama.cpp → kvq |")
print("|" + "---|" * (5 + 2 * len(texts)))
d, shown = os.environ.get("DEFAULT"), set()
for mix in mixes:
    lab = f"llama.cpp {mix}"
    lb = next((rows[(lab, t)][0] for t in texts if (lab, t) in rows), None)
    if lb is None:
        continue
    x = pair.get(mix) or max((b for b, v in budgets.items() if v <= lb), key=lambda b: budgets[b], default=None)
    if x is None:
        print(f"| {mix} ({lb:.3f}) | no kvq file no larger |")
        continue
    line(mix, x, f"**default** (no flag; {x})" if x == d else f"--target-bpw {x}")
    shown.add((mix, x))
if d in budgets and ("Q4_K_M", d) not in shown:
    line("Q4_K_M", d, f"**default** (no flag; {d})")
