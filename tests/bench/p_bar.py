#!/usr/bin/env python3
"""The model's mean predicted next-token probability per id (issue 22 diagnostics): reads fp32 logits
files [T, vocab] (kvq-run --tokens ids.bin --logits out.bin) and prints "id p_bar*T" lines, the
real-valued counts alloc_rowsplit.py takes (a dense, data-free estimate of each token's frequency
when the ids are text the model sampled itself).
usage: p_bar.py VOCAB LOGITS.bin [LOGITS.bin ...] > pbar.txt   Needs numpy."""
import sys
import numpy as np
V = int(sys.argv[1]); acc = np.zeros(V); n = 0
for fn in sys.argv[2:]:
    z = np.fromfile(fn, dtype=np.float32).reshape(-1, V).astype(np.float64)
    z -= z.max(1, keepdims=True); p = np.exp(z); p /= p.sum(1, keepdims=True)
    acc += p.sum(0); n += len(p)
for i, v in enumerate(acc): print(f"{i} {v:.6e}")
print(f"p_bar.py: {n} positions", file=sys.stderr)
