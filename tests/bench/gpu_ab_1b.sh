#!/usr/bin/env bash
# Device call (issue 12): the GPU suites that changed, then an A/B of two kvq-run binaries
# (.cu/bin/kvq-run.old = the previous commit's, .cu/bin/kvq-run = this tree's) on the 1B shape:
# decode tok/s of E8 4.0 and RTN 4 g128, alternating, twice each.
# usage (on the device): bash tests/bench/gpu_ab_1b.sh [SIZE]
set -u
B=.cu/bin
[ -d .cu/lib ] || tar -C .cu -xJf .cu/pack.tar.xz
export LD_LIBRARY_PATH=$PWD/.cu/lib
cb=$(ls /usr/local/cuda/lib64/libcublas.so.13 2>/dev/null | head -1); [ -n "$cb" ] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$(dirname "$cb")
export KVQ_SHARED=$PWD/.cu/shared
t0=$(date +%s); el() { echo "($(( $(date +%s) - t0 )) s)"; }
for t in ${TESTS-test_cuda_hqx test_cuda_model}; do
  timeout 300 $B/$t > $OUT/$t.log 2>&1; echo "== $t rc $? $(el)"
  grep -E '^\[  (PASSED|FAILED) |FAILED|argmax' $OUT/$t.log | head -6
done
size=${1:-1b}; W=/tmp/w; mkdir -p $W; src=$W/synth-$size
[ -f $src/config.json ] || $B/make_synth_llama $size $src tests/models/kvq-tiny-llama >/dev/null 2>&1 || echo synth failed
for s in hyperquant:e8:4.0 rtn:4:g128; do
  [ -f $W/$size-${s//:/-}.kvq ] || $B/kvq-convert -q -t 16 $src $W/$size-${s//:/-}.kvq --weights $s || echo "convert $s failed"
done
echo "== converted $(el)"
prompt=$(printf 'Once upon a time there was a little girl who lived in a village near the forest. %.0s' 1 2 3 4 5 6 7)
for s in hyperquant:e8:4.0 rtn:4:g128; do for r in 1 2; do for b in kvq-run.old kvq-run; do
  $B/$b $W/$size-${s//:/-}.kvq --gpu --ctx-max 1024 -p "$prompt" -n 128 --temp 0 2>&1 >/dev/null | grep decode | sed "s/^/$b $s: /" | cut -c1-200
done; done; done
echo "== done $(el)"
