#!/usr/bin/env python3
"""Issue 22 diagnostics: what finer allocation units would buy, in the allocator's own model.
From a dry run's per-tensor sensitivities and the source's weights, split embed_tokens and
lm_head into row blocks whose share of the tensor's sensitivity is f_r * |w_r|^2 (f_r: the
token's frequency in a counts file: an embedding row costs when its token is looked up, an
lm_head row's logit error when the token has probability), then run the equal-slope allocation
over all units at the same total bits, against per-tensor rates and uniform rates.
Prints the predicted sum-of-KLD changes and, with --emit, the blocks' rates and the other
tensors' rates (for tests/bench/hq_rowblocks and a recipe).
usage: alloc_rowsplit.py DRYRUN.txt MODEL_DIR COUNTS.txt UNIFORM_RATE [BLOCK_ROWS] [--emit DIR]
Run from the repository root (reads libconv's E8 rate-SNR table). Needs numpy."""
import json, math, os, re, struct, sys
import numpy as np

args = [a for a in sys.argv[1:]]
emit = None
if '--emit' in args:
    i = args.index('--emit'); emit = args[i + 1]; del args[i:i + 2]
dry, mdir, counts, ru = args[0], args[1], args[2], float(args[3])
brows = int(args[4]) if len(args) > 4 else 256

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from e8_rate_snr import snr, SIDE
def D(s, r): return s * 10 ** (-snr(r - SIDE) / 10)

rows = []  # (name, rate, numel, sensitivity)
for line in open(dry):
    f = line.split()
    if len(f) >= 7 and f[-1] == 'target_bpw':
        rate, by = float(f[3]), int(f[4])
        rows.append([f[0], rate, None, float(f[-2])])

# shapes and weights from the safetensors
def st_tensors(d):
    out = {}
    for fn in sorted(os.listdir(d)):
        if not fn.endswith('.safetensors'): continue
        b = open(os.path.join(d, fn), 'rb').read()
        n = struct.unpack('<Q', b[:8])[0]; h = json.loads(b[8:8 + n])
        for k, v in h.items():
            if k == '__metadata__': continue
            s, e = v['data_offsets']
            out[k] = (v['dtype'], v['shape'], b, 8 + n + s, 8 + n + e)
    return out
T = st_tensors(mdir)
def load(name):
    dt, shape, b, s, e = T[name]
    assert dt == 'BF16'
    u = np.frombuffer(b[s:e], dtype=np.uint16).astype(np.uint32) << 16
    return u.view(np.float32).reshape(shape)
for r in rows: r[2] = int(np.prod(T[r[0]][1]))

cnt = np.zeros(T['model.embed_tokens.weight'][1][0])
dense = False
for line in open(counts):
    i, c = line.split(); cnt[int(i)] = float(c); dense |= '.' in c or 'e' in c
# integer counts: add-half smoothing (unseen ids still cost a little); real values (the model's mean
# predicted probabilities, p_bar.py) are dense already
freq = cnt / cnt.sum() if dense else (cnt + 0.5) / (cnt.sum() + 0.5 * len(cnt))

GRID = np.arange(1.5, 8.0001, 0.005)
def alloc(units, bits):
    """units: (sens, numel); equal-slope rates on GRID with sum(rate*numel) <= bits."""
    S = np.array([u[0] for u in units]); N = np.array([u[1] for u in units], float)
    snrg = np.array([snr(r - SIDE) for r in GRID]); att = 10 ** (-snrg / 10)
    def rates(lam):
        cost = S[:, None] * att[None, :] + lam * GRID[None, :] * N[:, None]
        return GRID[cost.argmin(1)]
    lo, hi = 1e-14, 1e2
    for _ in range(80):
        mid = math.sqrt(lo * hi)
        if (rates(mid) * N).sum() > bits: lo = mid
        else: hi = mid
    r = rates(hi)
    r = r + (bits - (r * N).sum()) / N.sum()  # leftover spread evenly, as the allocator does
    return r, sum(D(s, x) for s, x in zip(S, r))

tot_bits = sum(r[1] * r[2] for r in rows)
unif = sum(D(r[3], ru) for r in rows)
per_t = sum(D(r[3], r[1]) for r in rows)
print(f"units: {len(rows)} tensors, {sum(r[2] for r in rows)} weights, {tot_bits / sum(r[2] for r in rows):.4f} bits/weight")
print(f"predicted sum KLD: uniform@{ru} {unif:.4f}; per-tensor (dry run) {per_t:.4f} ({100 * (per_t - unif) / unif:+.1f} %)")
r2, d2 = alloc([(r[3], r[2]) for r in rows], tot_bits)
print(f"  per-tensor, re-allocated here: {d2:.4f} ({100 * (d2 - unif) / unif:+.1f} %)")
share = {}
for r in rows:
    kind = re.sub(r'model\.layers\.\d+\.', '', r[0]).replace('.weight', '')
    share[kind] = share.get(kind, 0) + D(r[3], r[1])
print("  share of the per-tensor allocation's predicted KLD by kind: " +
      ", ".join(f"{k} {100 * v / per_t:.1f} %" for k, v in sorted(share.items(), key=lambda kv: -kv[1])))

split = {}
for name in [n for n in ('model.embed_tokens.weight', 'lm_head.weight') if n in T and n in [r[0] for r in rows]]:
    W = load(name); wn = (W.astype(np.float64) ** 2).sum(1)
    s = freq * wn; s = s / s.sum()
    split[name] = s
    srt = np.sort(s)[::-1]
    print(f"{name}: rows {W.shape[0]}; share of sensitivity in the top 1 % rows {srt[:len(srt)//100].sum():.3f}, "
          f"top 10 % {srt[:len(srt)//10].sum():.3f}, top 50 % {srt[:len(srt)//2].sum():.3f}")

def split_units(mode, br):
    units, meta = [], []
    for r in rows:
        if r[0] in split:
            s = split[r[0]]; n_r = r[2] // len(s)
            order = np.argsort(-s) if mode == 'sorted' else np.arange(len(s))
            for b0 in range(0, len(s), br):
                idx = order[b0:b0 + br]
                units.append((r[3] * s[idx].sum(), n_r * len(idx))); meta.append((r[0], b0, b0 + len(idx)))
        else:
            units.append((r[3], r[2])); meta.append((r[0], None, None))
    return units, meta

for mode, br in (('contiguous', brows), ('contiguous', 64), ('contiguous', 1024), ('sorted', brows)):
    u, meta = split_units(mode, br)
    rr, dd = alloc(u, tot_bits)
    print(f"emb+head rows split {mode:10s} blocks of {br:4d}: predicted {dd:.4f} ({100 * (dd - unif) / unif:+.1f} % vs uniform, "
          f"{100 * (dd - d2) / d2:+.1f} % vs per-tensor)")
    if emit and mode == 'contiguous' and br == brows:
        os.makedirs(emit, exist_ok=True)
        with open(os.path.join(emit, 'rules.txt'), 'w') as fo:
            for (name, b0, b1), x in zip(meta, rr):
                if b0 is None: fo.write(f"{name} {x:.4f}\n")
        for name in split:
            with open(os.path.join(emit, name + '.blocks'), 'w') as fo:
                for (nm, b0, b1), x in zip(meta, rr):
                    if nm == name: fo.write(f"{b0} {b1} {min(8.0, max(1.5, x)):.4f}\n")
            load(name).astype(np.float32).tofile(os.path.join(emit, name + '.f32'))
