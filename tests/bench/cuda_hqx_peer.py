#!/usr/bin/env python3
"""torch bf16 GEMV (y = W @ x, batch 1) on the shapes of tests/bench/cuda_hqx.c, median of 50
CUDA-event timings each: the outside baseline the packed products are compared with.
usage: cuda_hqx_peer.py [ROWSxCOLS ...]"""
import sys
import torch

shapes = sys.argv[1:] or ["4096x4096", "1024x4096", "14336x4096", "4096x14336", "8192x8192", "16384x16384"]
print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
print("| shape | torch bf16 ms | GB/s |\n|---|---|---|")
for sh in shapes:
    r, c = (int(v) for v in sh.split("x"))
    w = torch.randn(r, c, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(c, device="cuda", dtype=torch.bfloat16)
    for _ in range(5):
        torch.mv(w, x)
    ts = []
    for _ in range(50):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); torch.mv(w, x); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    ms = ts[len(ts) // 2]
    print(f"| {sh} | {ms:.4f} | {2 * r * c / (ms * 1e-3) / 1e9:.0f} |")
