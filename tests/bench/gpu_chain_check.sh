#!/usr/bin/env bash
# Device call (issues 12 and 20): every GPU suite, then the 1B shape: decode with the launch
# (KVQ_CUDA_PDL_CHAIN belonged to an experiment measured 3 % slower and dropped: now a no-op)
# chain on and off (KVQ_CUDA_PDL_CHAIN), long-prompt prefill on tensor cores and CUDA cores,
# and the packed KV attention benchmark. Layout of .cu/ as tests/bench/gpu_tc_check.sh says.
# usage (on the device): bash tests/bench/gpu_chain_check.sh [8b]
set -u
B=.cu/bin
[ -d $B ] || tar -C .cu -xJf .cu/bin.tar.xz # binaries carried compressed (the 64 MiB transfer limit)
[ -d .cu/lib ] || tar -C .cu -xJf .cu/pack.tar.xz
export LD_LIBRARY_PATH=$PWD/.cu/lib
cb=$(ls /usr/local/cuda/lib64/libcublas.so.13 2>/dev/null || find / -xdev -name 'libcublas.so.13' 2>/dev/null | head -1)
[ -n "$cb" ] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$(dirname "$cb")
export KVQ_SHARED=$PWD/.cu/shared
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
t0=$(date +%s)
el() { echo "($(( $(date +%s) - t0 )) s)"; }
$B/cuda_hqx --copy-only 2>&1 | grep -i 'copy' | head -1
if [ "${SKIP_TESTS:-0}" != 1 ]; then
for t in test_cuda_hq test_cuda_hqx test_cuda_kv test_cuda_model; do
  timeout 300 $B/$t > $OUT/$t.log 2>&1; echo "== $t rc $? $(el)"
  grep -E '^\[  (PASSED|FAILED) |FAILED|skipped' $OUT/$t.log | head -6
done
grep 'tc x37' $OUT/test_cuda_hqx.log | awk '{print $(NF-6)}' | sort -g | tail -1 | sed 's/^/hqx worst tc rel err: /'
grep -c 'tc x37' $OUT/test_cuda_hqx.log | sed 's/^/hqx tc cases: /'
fi
size=${1:-1b}
W=/tmp/w; mkdir -p $W
src=$W/synth-$size
$B/make_synth_llama $size $src tests/models/kvq-tiny-llama >/dev/null 2>&1 || echo synth failed
$B/kvq-convert -q -t 16 $src $W/$size-e8.kvq --weights hyperquant:e8:4.0 || echo "convert failed"
echo "== converted $(el)"
prompt=$(printf 'Once upon a time there was a little girl who lived in a village near the forest. %.0s' 1 2 3 4 5 6 7)
long=$(head -c 6000 .cu/shared/data/heldout-books.txt)
dec() { # label model env...
  local l=$1 m=$2; shift 2
  for r in 1 2; do
    env "$@" $B/kvq-run $m --gpu --ctx-max 2048 -p "$prompt" -n 128 --temp 0 2>&1 >/dev/null | grep -E 'decode' | sed "s/^/$l: /" | cut -c1-220
  done
}
for m in $W/$size-e8.kvq $src; do
  dec "chain $(basename $m)" $m KVQ_CUDA_PDL_CHAIN=1
  dec "nochain $(basename $m)" $m KVQ_CUDA_PDL_CHAIN=0
done
echo "== prefill, 6000-byte prompt $(el)"
for m in $W/$size-e8.kvq $src; do for tc in 1 0; do
  KVQ_CUDA_TC=$tc $B/kvq-run $m --gpu --ctx-max 2048 -p "$long" -n 1 --temp 0 2>&1 >/dev/null | grep -E 'prefill' | sed "s/^/tc=$tc $(basename $m): /" | cut -c1-200
done; done
echo "== profile E8 decode $(el)"
KVQ_CUDA_PROFILE=1 $B/kvq-run $W/$size-e8.kvq --gpu --ctx-max 1024 -p Once -n 16 --temp 0 2>&1 | grep -iE 'profile' | head -20
if [ "$size" = 1b ]; then
echo "== kv attention $(el)"
timeout 120 $B/cuda_kv_attn 4096 32768 131072 2>&1 | tail -30
fi
echo "== done $(el)"
