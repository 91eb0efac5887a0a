#!/usr/bin/env bash
# Device call (issue 12): every kernel of one decode step timed alone by Nsight Compute
# (gpu__time_duration, boost clocks), to set the sum of kernel times against the step's wall time.
# usage (on the device): bash tests/bench/gpu_ncu_step.sh MODEL [SKIP] [COUNT]
set -u
B=.cu/bin
[ -d .cu/lib ] || tar -C .cu -xJf .cu/pack.tar.xz
export LD_LIBRARY_PATH=$PWD/.cu/lib
m=$1; skip=${2:-1000}; cnt=${3:-200}
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
$NCU --clock-control none --metrics gpu__time_duration.sum --launch-skip $skip --launch-count $cnt --csv \
  $B/kvq-run $m --gpu --ctx-max 1024 -p Once -n 40 --temp 0 2>/dev/null > $OUT/ncu.csv
python3 - $OUT/ncu.csv <<'PY'
import csv,sys,collections
rows=[r for r in csv.reader(open(sys.argv[1])) if len(r)>10]
h=rows[0]; rows=rows[1:]
ki=h.index('Kernel Name'); vi=h.index('Metric Value'); ui=h.index('Metric Unit')
d=collections.defaultdict(list)
for r in rows:
    v=float(r[vi].replace(',','')); v = v/1e3 if r[ui]=='nsecond' else v if r[ui]=='usecond' else v*1e3
    d[r[ki][:70]].append(v)
tot=sum(sum(v) for v in d.values())
for k,v in sorted(d.items(), key=lambda kv:-sum(kv[1])):
    v=sorted(v); print(f"{sum(v):9.1f} us {len(v):4d} x med {v[len(v)//2]:7.2f} us  {k}")
print(f"sum {tot:.1f} us over {sum(len(v) for v in d.values())} kernels")
PY
