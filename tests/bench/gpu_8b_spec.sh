#!/usr/bin/env bash
# Device call (issue 12): the decode table at the issue's shape on the Llama-3-8B shape — prompt
# of ~128 tokens (the first 560 bytes of heldout-books: 182 tokens with the synthetic model's
# tokenizer), 256 greedy new tokens, batch 1 — for the bf16 source and HyperQuant E8 4.0 / 3.0
# (SPECS), with HF transformers (tests/bench/gpu_hf_peer.py, bf16 eager, batch 1 and 8, random
# prompt of 128 tokens, 256 new) in the same call. Checks the GPU suites first (TESTS).
# usage (on the device): [SPECS="..."] [TESTS="..."] bash tests/bench/gpu_8b_spec.sh
set -u
B=.cu/bin
[ -d $B ] || tar -C .cu -xJf .cu/bin.tar.xz # binaries carried compressed (the 64 MiB transfer limit)
[ -d .cu/lib ] || tar -C .cu -xJf .cu/pack.tar.xz
export LD_LIBRARY_PATH=$PWD/.cu/lib
cb=$(ls /usr/local/cuda/lib64/libcublas.so.13 2>/dev/null | head -1); [ -n "$cb" ] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$(dirname "$cb")
export KVQ_SHARED=$PWD/.cu/shared
t0=$(date +%s); el() { echo "($(( $(date +%s) - t0 )) s)"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
bw=$($B/cuda_hqx --copy-only 2>&1 | sed -n 's/.*copy bandwidth \([0-9.]*\) GB\/s.*/\1/p' | head -1); echo "copy bandwidth $bw GB/s"
for t in ${TESTS-test_cuda_hqx test_cuda_model}; do
  timeout 300 $B/$t > ${OUT:-/tmp}/$t.log 2>&1; echo "== $t rc $? $(el)"
  grep -E '^\[  (PASSED|FAILED) |FAILED' ${OUT:-/tmp}/$t.log | head -6
done
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
[ -f $src/config.json ] || $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1 || echo synth failed
echo "== synth $(el)"
specs=${SPECS:-hyperquant:e8:4.0 hyperquant:e8:3.0}
for s in $specs; do
  [ -f $W/${s//:/-}.kvq ] || $B/kvq-convert -q -t 16 $src $W/${s//:/-}.kvq --weights $s || echo "convert $s failed"
done
echo "== converted $(el)"
prompt=$(head -c 560 .cu/shared/data/heldout-books.txt)
run() { # label model
  out=$($B/kvq-run $2 --gpu --ctx-max 1024 -p "$prompt" -n 256 --temp 0 2>&1 >/dev/null)
  echo "$out" | grep -E 'on the device|prefill|decode' | sed "s/^/$1: /" | cut -c1-240
}
run bf16 $src
for s in $specs; do run $s $W/${s//:/-}.kvq; done
echo "== kvq done $(el)"
python3 tests/bench/gpu_hf_peer.py $src 128 256 2>&1 | grep -v Warning | tail -6
echo "== peer done $(el)"
for s in $specs; do run "$s (again)" $W/${s//:/-}.kvq; done
echo "== done $(el)"
