#!/usr/bin/env python3
"""torch bf16 GEMV (y = W @ x, batch 1) on the shapes of tests/bench/cuda_hqx.c, timed as that
bench times kvq's product: one call between two CUDA events (median of 50; the host's launch
latency included) and streamed (100 back to back, cycling over copies of W that together exceed
L2, mean; median of 5). GB/s counts W's bytes.
usage: cuda_hqx_peer.py [ROWSxCOLS ...]"""
import sys
import torch

shapes = sys.argv[1:] or ["4096x4096", "1024x4096", "14336x4096", "4096x14336", "8192x8192", "16384x16384"]
print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
print("| shape | torch bf16 one call ms | streamed ms | streamed GB/s |\n|---|---|---|---|")
for sh in shapes:
    r, c = (int(v) for v in sh.split("x"))
    n = max(2, min(8, int(160e6 // (2 * r * c)) + 1))
    ws = [torch.randn(r, c, device="cuda", dtype=torch.bfloat16) for _ in range(n)]
    x = torch.randn(c, device="cuda", dtype=torch.bfloat16)
    for w in ws:
        torch.mv(w, x)
    ts = []
    for _ in range(50):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); torch.mv(ws[0], x); b.record(); b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    ms = ts[len(ts) // 2]
    st = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for i in range(100):
            torch.mv(ws[i % n], x)
        b.record(); b.synchronize()
        st.append(a.elapsed_time(b) / 100)
    st.sort()
    mss = st[len(st) // 2]
    print(f"| {sh} | {ms:.4f} | {mss:.4f} | {2 * r * c / (mss * 1e-3) / 1e9:.0f} |")
    del ws
