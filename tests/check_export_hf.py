"""Checks kvq-convert --export-hf output with the real `safetensors` package (run by
tests/test_convert.c, test_export_hf_python):
    python tests/check_export_hf.py BF16_DIR F32_DIR
Both directories are exports of the same .kvq, one --export-dtype bf16 (sharded), one f32.
Checks: config.json states each directory's dtype and every tensor has it; the index (when
sharded) names every tensor once, only existing shards, the right total_size; every file opens
with safetensors; the bf16 values are the f32 values rounded to nearest-even bf16.
Prints one line per failure and exits 1, or "ok ..." and exits 0."""
import json, os, sys
import numpy as np
import safetensors
from safetensors import safe_open
from safetensors.numpy import load_file

fails = []
def check(cond, msg):
    if not cond: fails.append(msg)

def load_dir(d, want_dtype, want_cfg):
    cfg = json.load(open(os.path.join(d, "config.json")))
    check(cfg.get("dtype") == want_cfg, f"{d}/config.json: dtype {cfg.get('dtype')!r}, expected {want_cfg!r}")
    if "torch_dtype" in cfg:
        check(cfg["torch_dtype"] == want_cfg, f"{d}/config.json: torch_dtype {cfg['torch_dtype']!r}")
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        ix = json.load(open(idx))
        shards = sorted(set(ix["weight_map"].values()))
        check(not os.path.exists(os.path.join(d, "model.safetensors")), f"{d}: both an index and model.safetensors")
    else:
        ix, shards = None, ["model.safetensors"]
    names, total, raw = {}, 0, {}
    for s in shards:
        p = os.path.join(d, s)
        check(os.path.exists(p), f"{d}: shard {s} named by the index is missing")
        with safe_open(p, framework="numpy") as f:
            check((f.metadata() or {}).get("format") == "pt", f"{s}: metadata format is not 'pt'")
            for k in f.keys():
                sl = f.get_slice(k)
                check(sl.get_dtype() == want_dtype, f"{s}: tensor {k} is {sl.get_dtype()}, config says {want_cfg}")
                check(k not in names, f"{d}: tensor {k} in two shards")
                names[k] = s
                n = int(np.prod(sl.get_shape())) if sl.get_shape() else 1
                total += n * (2 if want_dtype == "BF16" else 4)
        for k, v in safetensors.deserialize(open(p, "rb").read()):
            raw[k] = v
    if ix is not None:
        check(ix["weight_map"] == names, f"{d}: index weight_map differs from the shards' contents")
        check(ix["metadata"]["total_size"] == total, f"{d}: index total_size {ix['metadata']['total_size']} != {total}")
        check(len(shards) > 1, f"{d}: an index for a single shard")
    return names, raw

bdir, fdir = sys.argv[1], sys.argv[2]
bn, braw = load_dir(bdir, "BF16", "bfloat16")
fn, _ = load_dir(fdir, "F32", "float32")
check(sorted(bn) == sorted(fn), "the bf16 and f32 exports hold different tensor names")
f32 = {}
for s in sorted(set(fn.values())):
    f32.update(load_file(os.path.join(fdir, s)))
worst = 0
for k, v in braw.items():
    b = np.frombuffer(bytes(v["data"]), dtype=np.uint16).astype(np.uint32) << 16
    got = b.view(np.float32).reshape(v["shape"])
    x = f32[k].astype(np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    rne = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16).astype(np.uint32).view(np.float32)
    if not np.array_equal(got, rne):
        fails.append(f"tensor {k}: bf16 values are not the f32 values rounded to nearest even")
    worst = max(worst, float(np.max(np.abs(got - x))) if x.size else 0.0)
for m in fails: print("check_export_hf:", m)
if fails: sys.exit(1)
print(f"ok: {len(bn)} tensors, bf16 in {len(set(bn.values()))} shard(s), f32 in {len(set(fn.values()))}; "
      f"safetensors {safetensors.__version__}; max |bf16 - f32| {worst:.3g}")
