#!/usr/bin/env python3
"""PyTorch scaled_dot_product_attention, bf16, one new token over a KV cache: 32 query heads over
8 KV heads (enable_gqa), head_dim 128, batch 1 and 8, T_kv = 4k..128k. Timed as
tests/bench/cuda_kv_attn.c times kvq's kernels: median of 50 calls, each between two CUDA events,
cycling over copies of the cache that together exceed 256 MB (L2 holds none of them); and a CUDA
graph of 20 such calls, replayed 30 times, median / 20 (the GPU's time per call).
usage: [SDPA_BATCH=1,8] cuda_kv_sdpa.py [T ...]"""
import os
import sys
import torch
import torch.nn.functional as F

Ts = [int(a) for a in sys.argv[1:]] or [4096, 16384, 32768, 131072]
print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
print("| T_kv | batch | SDPA bf16 ms, one call | ms, in a graph | MB read | GB/s (graph) | copies |\n|---|---|---|---|---|---|---|")
for T in Ts:
    for B in [int(b) for b in os.environ.get("SDPA_BATCH", "1,8").split(",")]:
        one = 2 * B * 8 * T * 128 * 2
        rot = min(64, (256 << 20) // one + 1)
        kv = [(torch.randn(B, 8, T, 128, device="cuda", dtype=torch.bfloat16),
               torch.randn(B, 8, T, 128, device="cuda", dtype=torch.bfloat16)) for _ in range(rot)]
        q = torch.randn(B, 32, 1, 128, device="cuda", dtype=torch.bfloat16)
        for k, v in kv[:3]:
            F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        ts = []
        for i in range(53):
            k, v = kv[i % rot]
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); F.scaled_dot_product_attention(q, k, v, enable_gqa=True); b.record(); b.synchronize()
            if i >= 3:
                ts.append(a.elapsed_time(b))
        ts.sort()
        ms = ts[len(ts) // 2]
        # the same 20 calls (cycling over the copies) captured as one CUDA graph, per call
        st = torch.cuda.Stream()
        st.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(st):
            for k, v in kv[:3]:
                F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        torch.cuda.current_stream().wait_stream(st)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for i in range(20):
                k, v = kv[i % rot]
                F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        gs = []
        for i in range(33):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record(); g.replay(); b.record(); b.synchronize()
            if i >= 3:
                gs.append(a.elapsed_time(b) / 20)
        gs.sort()
        msg = gs[len(gs) // 2]
        print(f"| {T // 1024}k | {B} | {ms:.4f} | {msg:.4f} | {one / 1e6:.1f} | {one / (msg * 1e-3) / 1e9:.0f} | {rot} |", flush=True)
        del g
        del kv
