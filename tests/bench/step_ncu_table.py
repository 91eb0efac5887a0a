#!/usr/bin/env python3
"""Summarises tests/bench/gpu_step_ncu.sh's Nsight Compute CSV: the kernels of the last decode step (its
kernel count given, or found as the period of the kernel-name sequence at the end), grouped by kernel name
(template arguments dropped) with calls, total µs and share, then the step's first kernels in order.
usage: step_ncu_table.py step_ncu.csv[.gz] [kernels-per-step]"""
import csv, gzip, re, sys

if len(sys.argv) < 2:
    sys.exit("usage: step_ncu_table.py step_ncu.csv[.gz] [kernels-per-step]")
rows = []
try:
    with (gzip.open(sys.argv[1], "rt") if sys.argv[1].endswith(".gz") else open(sys.argv[1])) as f:
        lines = [l for l in f if l.startswith('"')]
except (OSError, UnicodeDecodeError, EOFError) as e:
    print(f"step_ncu_table: {sys.argv[1]}: {e}", file=sys.stderr)
    sys.exit(2)
def bad(why):
    print(f"step_ncu_table: {sys.argv[1]}: {why}", file=sys.stderr)
    sys.exit(2)


SCALE = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
for i, r in enumerate(csv.DictReader(lines)):
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    try:
        v = float(r["Metric Value"].replace(",", ""))
        unit, name, grid = r["Metric Unit"], r["Kernel Name"], r["Grid Size"]
    except (KeyError, AttributeError, ValueError) as e:
        bad(f"row {i + 1}: not an ncu --csv row ({e!r})")
    if unit not in SCALE:
        bad(f"unknown time unit {unit!r}")
    rows.append((re.sub(r"[<(].*", "", name).replace("void ", ""), v * SCALE[unit], grid))
if not rows:
    bad("no gpu__time_duration.sum rows (not an ncu --csv file of that metric)")
try:
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 0
except ValueError:
    bad(f"kernels-per-step {sys.argv[2]!r} is not an integer")
if n <= 0:  # the step: the period of the kernel-name sequence at the end
    names = [k for k, _, _ in rows]
    for p in range(50, len(names) // 2):
        if names[-p:] == names[-2 * p:-p]:
            n = p
            break
step = rows[-n:] if n else rows
tot = sum(u for _, u, _ in step)
print(f"{len(rows)} kernels profiled; the last step: {len(step)} kernels, {tot:.1f} us summed")
agg = {}
for k, u, g in step:
    a = agg.setdefault(k, [0, 0.0])
    a[0] += 1
    a[1] += u
print("| kernel | calls a step | µs a step | µs a call | share |\n|---|---|---|---|---|")
for k, (c, u) in sorted(agg.items(), key=lambda x: -x[1][1]):
    print(f"| {k} | {c} | {u:.1f} | {u / c:.2f} | {100 * u / tot:.1f} % |")
print("\nfirst kernels of the step, in order:")
for k, u, g in step[:14]:
    print(f"  {k:40s} {u:8.2f} us grid {g}")
