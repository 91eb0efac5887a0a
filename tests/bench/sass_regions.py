#!/usr/bin/env python3
"""Nsight Compute's SASS source page (`ncu --import R --page source --csv --print-source sass`, optionally .gz)
summarized by code region: contiguous runs of executed instructions, their warp-stall samples, the top stall
reasons and the commonest opcodes — where a latency-bound kernel's time goes. usage: sass_regions.py FILE [min_samples]
An imported report prints one section per kernel launch it holds ("Kernel Name" row, header row, instructions;
--launch-skip is not applied on --import, session 28): each section is summarized in turn."""
import collections, csv, gzip, sys

num = lambda v: int(v) if v.isdigit() else 0


def summarize(rows, min_samples):
    hdr, data = rows[1], rows[2:]
    isrc, iss, iex = hdr.index("Source"), hdr.index("Warp Stall Sampling (All Samples)"), hdr.index("Instructions Executed")
    reasons = [(k, h[6:]) for k, h in enumerate(hdr) if h.startswith('stall_') and 'Not Issued' not in h]
    regs, prev = [], -2
    for k, r in enumerate(data):
        if num(r[iex]) == 0 and num(r[iss]) == 0: continue
        if k != prev + 1: regs.append([k, k])
        regs[-1][1] = prev = k
    tot = sum(num(r[iss]) for r in data)
    print(f"{rows[0][1][:90]}\n{len(data)} instructions, {tot} stall samples")
    for a, b in regs:
        part = data[a:b + 1]
        s, e = sum(num(r[iss]) for r in part), sum(num(r[iex]) for r in part)
        if s < min_samples: continue
        c, ops = collections.Counter(), collections.Counter()
        for r in part:
            for k, n in reasons: c[n] += num(r[k])
            op = r[isrc].split()
            if op: ops[(op[1] if op[0].startswith('@') and len(op) > 1 else op[0]).split('.')[0]] += 1
        print(f"{a:5d}-{b:5d} samples {s:4d} ({100 * s / tot:4.1f} %) executed {e:7d} | "
              + " ".join(f"{n} {v}" for n, v in c.most_common(3)) + " | " + " ".join(f"{o} {v}" for o, v in ops.most_common(6)))


f = sys.argv[1]
allrows = list(csv.reader(gzip.open(f, 'rt') if f.endswith('.gz') else open(f)))
starts = [k for k, r in enumerate(allrows) if r and r[0] == "Kernel Name"] or [0]
for si, s0 in enumerate(starts):
    summarize(allrows[s0:starts[si + 1] if si + 1 < len(starts) else len(allrows)], int(sys.argv[2]) if len(sys.argv) > 2 else 5)
