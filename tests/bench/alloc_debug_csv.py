#!/usr/bin/env python3
"""The `probe-debug` lines of `KVQ_ALLOC_DEBUG=1 kvq-convert --dry-run --target-bpw X MODEL` (stderr)
as the CSV rows docs/results/alloc_layer_probe*_<model>.csv keep (alloc_probe_compare.py reads both).
usage: alloc_debug_csv.py DEBUG.txt > ROWS.csv"""
import sys

cols = ["tensor", "layer", "full_probe_sensitivity", "layer_probe_sensitivity", "e_rel", "kld_layer", "e_layer",
        "kld_direct_writers", "e_direct_writers", "gamma_direct", "gamma_other", "kld_qk", "e_qk"]
keys = ["full", "sens", "e_rel", "kld_l", "e_l", "kld_w", "e_w", "gw", "gr", "kld_qk", "e_qk"]
print(",".join(cols))
for line in open(sys.argv[1]):
    if not line.startswith("probe-debug"):
        continue
    t = line.split()
    # probe-debug NAME layer L full F layer S e_rel ...: the second "layer" is the layer probe's sensitivity
    v = {"full": t[5], "sens": t[7]}
    v.update({t[i]: t[i + 1] for i in range(8, len(t) - 1, 2)})
    print(",".join([t[1], t[3]] + [v.get(k, "") for k in keys]))
