#!/usr/bin/env bash
# session 19 call B (main a7a418a): the split count of the codec attends (KVQ_CUDA_KV_WAVES: chunks sized so the
# launch fills waves × the resident blocks; call A: at 4k int:4 tc 0.0137 ms at 1 wave, 0.0104 at 0.5) swept over
# T and codecs at batch 1 and 8, beside SDPA; TurboQuant's prelude A/B (tc vs tc blk) in the same process.
set -u
TESTS= . tests/bench/gpu_env.sh
L=$OUT
ROWS="int:4 tc,int:2 tc,kivi:4 tc,kivi:2 tc,turboquant:4 tc,turboquant:4 tc blk,turboquant:2 tc,turboquant:2 tc blk,qturbo:4 tc,qturbo:4 tc blk,turboquant-prod:4 tc,turboquant-prod:2 tc,octopus:4 tc,octopus:4:qjl tc,octopus:2 tc,hqmq:s96:r4,hqkv:e8:4"
for wv in 1 0.5 0.25 0.125; do
  KVQ_CUDA_KV_WAVES=$wv CUDA_KV_ONLY="$ROWS" timeout 150 $B/cuda_kv_attn 1024 4096 16384 32768 131072 > $L/B_w$wv.txt 2>&1; echo "== waves $wv rc $? $(el)"
done
timeout 150 python3 tests/bench/cuda_kv_sdpa.py 1024 4096 16384 32768 131072 > $L/B_sdpa.txt 2>&1; echo "== sdpa rc $? $(el)"
grep -E "^\| [0-9]+k" $L/B_sdpa.txt
python3 - $L <<'PY'
import sys, re, glob, os
L = sys.argv[1]
tab = {}
for f in sorted(glob.glob(L + "/B_w*.txt")):
    wv = re.search(r"B_w([0-9.]+)\.txt", f).group(1)
    for line in open(f):
        c = [x.strip() for x in line.strip().strip("|").split("|")]
        if len(c) >= 10 and re.match(r"^\d+k$", c[0]) and c[1] in ("1", "8"):
            try: tab.setdefault((c[0], c[1], c[2]), {})[wv] = (float(c[4]), c[8])
            except ValueError: pass
ws = ["1", "0.5", "0.25", "0.125"]
print("| T | batch | cache | " + " | ".join("w=%s ms (chunk)" % w for w in ws) + " | best |")
for k in sorted(tab, key=lambda k: (int(k[0][:-1]), k[1], k[2])):
    r = tab[k]; best = min((r[w][0], w) for w in ws if w in r)
    print("| %s | %s | %s | " % k + " | ".join("%.4f (%s)" % r[w] if w in r else "-" for w in ws) + " | %s |" % best[1])
PY
echo "== done $(el)"
