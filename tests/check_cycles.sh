#!/usr/bin/env bash
# Fails when two library objects call each other (file A uses a symbol B defines and B one
# that A defines): registries and their entries, front ends and back ends must depend one
# way (helpers live in their own files). Reads the objects a build left in BUILD/obj.
# usage: tests/check_cycles.sh [BUILD]   (make test runs it)
set -u
build=${1:-build}
python3 - "$build" <<'PY'
import glob, os, subprocess, sys
objs = sorted(glob.glob(os.path.join(sys.argv[1], "obj", "libconv", "**", "*.o"), recursive=True)
         + glob.glob(os.path.join(sys.argv[1], "obj", "formats", "*.o"))
         + glob.glob(os.path.join(sys.argv[1], "obj", "kernels", "cpu", "*.o")))
if not objs:
    print("check_cycles: no objects under %s/obj (build first)" % sys.argv[1]); sys.exit(1)
defs, undef = {}, {}
for o in objs:
    d, u = set(), set()
    for l in subprocess.check_output(["nm", o], text=True).splitlines():
        p = l.split()
        if len(p) == 3 and p[1] in "TDRB": d.add(p[2])
        elif len(p) == 2 and p[0] == "U": u.add(p[1])
    defs[o], undef[o] = d, u
bad = 0
for i, a in enumerate(objs):
    for b in objs[i + 1:]:
        ab, ba = undef[a] & defs[b], undef[b] & defs[a]
        if ab and ba:
            print("check_cycles: %s <-> %s (%s / %s)" % (a, b, sorted(ab)[0], sorted(ba)[0])); bad = 1
if bad: print("check_cycles: FAILED"); sys.exit(1)
print("check_cycles: %d objects, no two call each other" % len(objs))
PY
