#!/usr/bin/env python3
# Whether every kernel of an old object has the same SASS in a new one (offline: no GPU needed): each function's
# instruction text from `cuobjdump -sass`, branch labels (.L_x_N) and relocated symbol names normalized, compared as a
# whole list; a function matches when some function of NEW has the same list (names may change: a template argument
# added, as when issue 20's split kernels were templated on the head shape, docs/RESULTS.md session 15):
#   python3 tests/bench/sass_same.py main/kv_attn.o build/cuda/kv_attn.o
# Prints the counts and the functions of OLD with no match; exit 1 when there is one. cuobjdump from $CUOBJDUMP, else
# PATH (the CUDA toolkit's, or the PyPI wheel nvidia-cuda-cuobjdump's).
import hashlib, os, re, subprocess, sys

if len(sys.argv) != 3:
    sys.exit("usage: sass_same.py OLD.o NEW.o")
tool = os.environ.get("CUOBJDUMP", "cuobjdump")


def funcs(obj):
    try:
        out = subprocess.run([tool, "-sass", obj], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"sass_same: {tool} -sass {obj}: {str(e).splitlines()[0] if str(e) else e!r}", file=sys.stderr)
        sys.exit(2)
    fs = {}
    for f in re.split(r"\n\s+Function : ", out)[1:]:
        name = f.split("\n", 1)[0].strip()
        ins = []
        for l in f.split("\n"):
            m = re.search(r"/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;?\s*/\*", l)
            if m:
                ins.append(re.sub(r"`\(\S+\)", "`(SYM)", re.sub(r"\.L_x_\d+", "L", m.group(1))))
        fs[name] = hashlib.md5("\n".join(ins).encode()).hexdigest(), len(ins)
    if not fs:
        print(f"sass_same: {obj}: no functions in the SASS", file=sys.stderr)
        sys.exit(2)
    return fs


old, new = funcs(sys.argv[1]), funcs(sys.argv[2])
have = {h for h, _ in new.values()}
miss = [(n, k) for n, (h, k) in old.items() if h not in have]
print(f"{sys.argv[1]}: {len(old)} functions, {len(old) - len(miss)} with the same instructions in {sys.argv[2]} ({len(new)} functions)")
for n, k in miss:
    print(f"  differs: {n} ({k} instructions)")
sys.exit(1 if miss else 0)
