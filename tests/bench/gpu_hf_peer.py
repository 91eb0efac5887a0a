#!/usr/bin/env python3
"""The outside peer for the GPU decode table: HF transformers generating greedily in bf16 on
the same GPU from the same checkpoint, prompt P tokens (random ids), N new tokens, batch 1
and 8 (eager generate with its default dynamic cache). Prefill is timed as one forward of the
prompt; decode tok/s = batch·N / (generate time − prefill time). Median of 3 runs.
usage: gpu_hf_peer.py CHECKPOINT_DIR [P] [N]"""
import statistics
import sys
import time

import torch
import transformers
from transformers import AutoModelForCausalLM

path = sys.argv[1]
P = int(sys.argv[2]) if len(sys.argv) > 2 else 128
N = int(sys.argv[3]) if len(sys.argv) > 3 else 256
m = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).cuda().eval()
wbytes = sum(p.numel() * p.element_size() for p in m.parameters())
print(f"transformers {transformers.__version__}, torch {torch.__version__}, {torch.cuda.get_device_name(0)}; "
      f"weights {wbytes / 1e6:.1f} MB on the GPU")
g = torch.Generator().manual_seed(1)
for bs in (1, 8):
    ids = torch.randint(2, 30000, (bs, P), generator=g).cuda()
    kw = dict(do_sample=False, max_new_tokens=N, min_new_tokens=N, pad_token_id=0)
    with torch.no_grad():
        m.generate(ids, **{**kw, "max_new_tokens": 8, "min_new_tokens": 8})  # warm-up
        dec, pre = [], []
        for _ in range(3):
            torch.cuda.synchronize(); t0 = time.perf_counter()
            m(ids)
            torch.cuda.synchronize(); t1 = time.perf_counter()
            out = m.generate(ids, **kw)
            torch.cuda.synchronize(); t2 = time.perf_counter()
            assert out.shape[1] == P + N
            pre.append(t1 - t0)
            dec.append(bs * N / ((t2 - t1) - (t1 - t0)))
    print(f"hf bf16 batch {bs}: prefill {bs * P / statistics.median(pre):.0f} tok/s, "
          f"decode {statistics.median(dec):.1f} tok/s (median of 3)")
