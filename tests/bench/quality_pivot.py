# Summary pivot of tests/bench/quality_table.sh output: KLD mean / dPPL % per model, rate x codec.
# usage: python3 tests/bench/quality_pivot.py OUTDIR WINDOWS
import json,glob,os,sys,math
out,w=sys.argv[1],sys.argv[2]
rows={}
for p in glob.glob(f"{out}/*.w{w}.json"):
    if p.endswith(".inspect.json"): continue
    d=json.load(open(p)); m=os.path.basename(p).split(".")[0]
    lossy=[t for t in d["tensors"] if not t["lossless"]]; spec=lossy[0]["codec"]
    r=[x for x in d["runs"] if x["label"]=="weights"][0]
    rows[(m,spec)]=(d["tensors_summary"]["lossy_bits_per_weight"],r["kld"]["mean"],100*r["ppl_delta_rel"])
cols=[("E8","hyperquant:e8:{}"),("D4","hyperquant:d4:{}"),("A2","hyperquant:a2:{}"),("Z","hyperquant:z:{}")]
rtn={"3":"rtn:2:g32","3.5":"rtn:3:g64","4":"rtn:3:g32","5":"rtn:4:g32"}
g128={"3":"rtn:3:g128","4":"rtn:4:g128","5":"rtn:5:g128","3.5":None}
qet={"3":"qet:5.333","3.5":"qet:4.571","4":"qet:4","5":"qet:3.2"}
for m in ["kvq-small-llama","kvq-small-qwen3"]:
    print(f"\n**{m}** — KLD mean (nats) / ΔPPL %; [bits] where a codec's realized rate differs from the row's\n")
    print("| target bits | E8 | D4 | A2 | Z | RTN matched rate | RTN g128 (next rate up) | QET |")
    print("|---|---|---|---|---|---|---|---|")
    for b in ["3","3.5","4","5"]:
        cells=[]
        for _,f in cols:
            k=(m,f.format(b)); v=rows.get(k)
            cells.append("-" if not v else f"{v[1]:.4f} / {v[2]:+.2f}")
        for s in (rtn[b],g128[b],qet[b]):
            v=rows.get((m,s)) if s else None
            cells.append("-" if not v else f"{s}: {v[1]:.4f} / {v[2]:+.2f} [{v[0]:.3f}]")
        print(f"| {b} | "+" | ".join(cells)+" |")
