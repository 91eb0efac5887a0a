#!/usr/bin/env python3
"""The allocator's predictor against brute force (docs/ALLOCATION.md, "Validation").
usage: alloc_pearson.py ROWS.csv [DRYRUN.txt [OUT.csv]]
ROWS.csv: tests/bench/alloc_validate's rows (tensor, rate, realized SNR, measured KLD, the file's
prediction). With DRYRUN.txt (kvq-convert --dry-run --target-bpw ... of the same source), its
sensitivities predict instead: sensitivity x 10^(-SNR/10) at each row's realized SNR; OUT.csv
gets the rows with that prediction. Prints log-log Pearson, Spearman and predicted/measured
ratios, over all rows, per rate, and the median ratio per tensor kind."""
import csv, math, re, sys

def pearson(a, b):
    n = len(a); ma = sum(a) / n; mb = sum(b) / n
    return sum((x - ma) * (y - mb) for x, y in zip(a, b)) / math.sqrt(
        sum((x - ma) ** 2 for x in a) * sum((y - mb) ** 2 for y in b))

def ranks(a):
    r = [0] * len(a)
    for k, i in enumerate(sorted(range(len(a)), key=lambda i: a[i])): r[i] = k
    return r

def stats(label, pr, me):
    lp = [math.log(x) for x in pr]; lm = [math.log(x) for x in me]
    rat = sorted(p / m for p, m in zip(pr, me))
    w = sum(1 for x in rat if 0.8 <= x <= 1.25)
    print(f"{label}: n {len(rat)}  log-log Pearson {pearson(lp, lm):.3f}  Spearman {pearson(ranks(pr), ranks(me)):.3f}  "
          f"pred/meas min {rat[0]:.2f} median {rat[len(rat) // 2]:.2f} max {rat[-1]:.2f}  within 0.8-1.25: {w}")

def main():
    rows = list(csv.DictReader(open(sys.argv[1])))
    if len(sys.argv) > 2:
        sens = {}
        for line in open(sys.argv[2]):
            f = line.split()
            if len(f) >= 7 and f[-1] == "target_bpw": sens[f[0]] = float(f[-2])
        for r in rows: r["kld_predicted"] = str(sens[r["tensor"]] * 10 ** (-float(r["snr_db"]) / 10))
        if len(sys.argv) > 3:
            with open(sys.argv[3], "w", newline="") as fp:
                w = csv.writer(fp)
                w.writerow(["tensor", "rate", "snr_db", "kld_measured", "kld_predicted"])
                for r in rows: w.writerow([r["tensor"], r["rate"], r["snr_db"], r["kld_measured"], f"{float(r['kld_predicted']):.6g}"])
    pr = [float(r["kld_predicted"]) for r in rows]; me = [float(r["kld_measured"]) for r in rows]
    stats("all", pr, me)
    for rate in sorted({r["rate"] for r in rows}):
        idx = [i for i, r in enumerate(rows) if r["rate"] == rate]
        stats(f"rate {rate}", [pr[i] for i in idx], [me[i] for i in idx])
    kinds = {}
    for r, p, m in zip(rows, pr, me):
        kinds.setdefault(re.sub(r"model\.layers\.\d+\.", "", r["tensor"]).replace(".weight", ""), []).append(p / m)
    print("median pred/meas by kind: " + ", ".join(f"{k} {sorted(v)[len(v) // 2]:.2f}" for k, v in sorted(kinds.items())))


if __name__ == "__main__":
    main()
