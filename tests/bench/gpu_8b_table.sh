#!/usr/bin/env bash
# Device call (issue 12): the Llama-3-8B-shaped decode/prefill table. Synthetic checkpoint made
# on the device (make_synth_llama 8b), converted there; each model run once by kvq-run --gpu with
# a ~2150-token prompt (prefill on tensor cores) and 128 greedy new tokens (decode), E8 4.0 twice.
# usage (on the device): [SPECS="spec ..."] bash tests/bench/gpu_8b_table.sh
set -u
B=.cu/bin
[ -d .cu/lib ] || tar -C .cu -xJf .cu/pack.tar.xz
export LD_LIBRARY_PATH=$PWD/.cu/lib
cb=$(ls /usr/local/cuda/lib64/libcublas.so.13 2>/dev/null | head -1); [ -n "$cb" ] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$(dirname "$cb")
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
t0=$(date +%s); el() { echo "($(( $(date +%s) - t0 )) s)"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
bw=$($B/cuda_hqx --copy-only 2>&1 | sed -n 's/.*copy bandwidth \([0-9.]*\) GB\/s.*/\1/p' | head -1); echo "copy bandwidth $bw GB/s"
$B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1 || echo synth failed
echo "== synth $(el)"; du -sh $src
for s in ${SPECS:-hyperquant:e8:4.0 rtn:4:g128}; do
  s0=$(date +%s); $B/kvq-convert -q -t 16 $src $W/${s//:/-}.kvq --weights $s || echo "convert $s failed"
  echo "converted $s in $(( $(date +%s) - s0 )) s: $(du -b $W/${s//:/-}.kvq | cut -f1) bytes"
done
long=$(head -c 7000 .cu/shared/data/heldout-books.txt)
run() { # label model
  out=$($B/kvq-run $2 --gpu --ctx-max 2304 -p "$long" -n 128 --temp 0 2>&1 >/dev/null)
  echo "$out" | grep -E 'loaded in|on the device|prefill' | sed "s/^/$1: /" | cut -c1-260
}
for s in ${SPECS:-hyperquant:e8:4.0 hyperquant:e8:4.0 rtn:4:g128}; do run "$s" $W/${s//:/-}.kvq; echo "$(el)"; done
run "bf16" $src; echo "$(el)"
echo "== done $(el)"
