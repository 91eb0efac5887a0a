#!/usr/bin/env python3
"""What the allocator's own model predicts an allocation buys over uniform HyperQuant E8:
sum over the allocated tensors of sensitivity x 10^(-SNR(rate - side)/10) at the dry run's
rates against the same at one uniform rate (SNR from libconv's E8 rate-SNR table, side = the
non-code bits ~ 10/128 + 0.002 per weight). Run from the repository root.
usage: alloc_predgain.py DRYRUN.txt UNIFORM_RATE
DRYRUN.txt: kvq-convert --dry-run --target-bpw X [--calib-from FILE.kvq] SRC; UNIFORM_RATE: the
E8 rate whose whole-model bits/param is X (tests/bench/alloc_table.sh prints it)."""
import os, sys
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e8_rate_snr import snr, SIDE
rows=[]
for line in open(sys.argv[1]):
    f=line.split()
    if len(f)>=7 and f[-1]=='target_bpw': rows.append((f[0], float(f[3]), int(f[4]), float(f[-2])))
ru=float(sys.argv[2])
side=SIDE
da=sum(s*10**(-snr(r-side)/10) for _,r,_,s in rows)
du=sum(s*10**(-snr(ru-side)/10) for _,r,_,s in rows)
print(f"predicted Σ KLD: allocated {da:.4f} uniform@{ru} {du:.4f} change {100*(da-du)/du:+.1f} %")
