#!/usr/bin/env python3
# Instruction counts of a kernel's loops from its SASS (offline: no GPU needed): for every function of OBJ whose
# mangled name contains SUBSTR, each backward branch's body (the loop it closes) with its instruction count and
# the count per opcode. How docs/RESULTS.md's QET counts (2026-11-27, session 14) were made, e.g.
#   nvcc -O3 -arch=sm_90 -I. -c kernels/cuda/pqx.cu -o /tmp/pqx.o
#   python3 tests/bench/sass_loops.py /tmp/pqx.o qetx_rows_xILi1ELi16ELi8E
# cuobjdump from $CUOBJDUMP, else PATH (the CUDA toolkit's, or one bundled with triton).
import os, re, subprocess, sys

if len(sys.argv) != 3:
    sys.exit("usage: sass_loops.py OBJ SUBSTR")
obj, sub = sys.argv[1], sys.argv[2]
tool = os.environ.get("CUOBJDUMP", "cuobjdump")
try:
    out = subprocess.run([tool, "-sass", obj], capture_output=True, text=True, check=True).stdout
except (OSError, subprocess.CalledProcessError) as e:
    print(f"sass_loops: {tool} -sass {obj}: {str(e).splitlines()[0] if str(e) else e!r}", file=sys.stderr)
    sys.exit(2)
for f in re.split(r"\n\s+Function : ", out)[1:]:
    name = f.split("\n", 1)[0].strip()
    if sub not in name:
        continue
    ins = [(int(m.group(1), 16), m.group(2).strip())
           for m in (re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", l) for l in f.split("\n")) if m]
    print(f"== {name}: {len(ins)} instructions")
    for a, t in ins:
        m = re.search(r"BRA\s.*?0x([0-9a-f]+)", t)
        if not m or int(m.group(1), 16) > a:
            continue
        lo = int(m.group(1), 16)
        ops = {}
        for _, tt in (x for x in ins if lo <= x[0] <= a):
            w = tt.split()
            op = (w[1] if w[0].startswith("@") else w[0]).split(".")[0]
            ops[op] = ops.get(op, 0) + 1
        n = sum(ops.values())
        print(f"  loop {lo:05x}-{a:05x}: {n} instructions", dict(sorted(ops.items(), key=lambda x: -x[1])))
