#!/usr/bin/env python3
"""Summarises tests/bench/gpu_step_ncu.sh's Nsight Compute CSV: the kernels of the last decode step (its
kernel count given, or found as the period of the kernel-name sequence at the end), grouped by kernel name
(template arguments dropped) with calls, total µs and share, then the step's first kernels in order.
usage: step_ncu_table.py step_ncu.csv[.gz] [kernels-per-step]"""
import csv, gzip, re, sys

rows = []
with (gzip.open(sys.argv[1], "rt") if sys.argv[1].endswith(".gz") else open(sys.argv[1])) as f:
    lines = [l for l in f if l.startswith('"')]
for r in csv.DictReader(lines):
    if r.get("Metric Name") != "gpu__time_duration.sum":
        continue
    v = float(r["Metric Value"].replace(",", ""))
    unit = r["Metric Unit"]
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
    if unit not in scale:
        sys.exit(f"step_ncu_table: {sys.argv[1]}: unknown time unit {unit!r}")
    us = v * scale[unit]
    rows.append((re.sub(r"[<(].*", "", r["Kernel Name"]).replace("void ", ""), us, r["Grid Size"]))
n = int(sys.argv[2]) if len(sys.argv) > 2 else 0
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
