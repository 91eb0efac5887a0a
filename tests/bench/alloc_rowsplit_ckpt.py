#!/usr/bin/env python3
"""A copy of an HF checkpoint with embed_tokens / lm_head replaced by their per-row-block HyperQuant
reconstructions (tests/bench/hq_rowblocks output, rounded to bf16), for tests/bench/alloc_rowsplit.sh.
usage: alloc_rowsplit_ckpt.py SRC_DIR DST_DIR EMIT_DIR   Needs numpy."""
import json, os, shutil, struct, sys
import numpy as np
src, dst, emu = sys.argv[1], sys.argv[2], sys.argv[3]
os.makedirs(dst, exist_ok=True)
rep = {n: np.fromfile(os.path.join(emu, n + '.rec.f32'), dtype=np.float32) for n in ('lm_head.weight', 'model.embed_tokens.weight')
       if os.path.exists(os.path.join(emu, n + '.rec.f32'))}
for fn in os.listdir(src):
    p = os.path.join(src, fn)
    if os.path.isdir(p): continue
    if not fn.endswith('.safetensors'): shutil.copy(p, dst); continue
    b = bytearray(open(p, 'rb').read())
    n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n])
    for k, v in h.items():
        if k in rep:
            s, e = v['data_offsets']
            x = rep[k]; u = x.view(np.uint32)
            r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)  # round to nearest even bf16
            assert r.nbytes == e - s
            b[8 + n + s:8 + n + e] = r.tobytes()
            print('replaced', k)
    open(os.path.join(dst, fn), 'wb').write(b)
