#!/usr/bin/env bash
# Builds build/bench/kvq-run-st: kvq-run with the decode attention's phase clocks compiled in (KVQ_ATT_STAMPS in
# kernels/cuda/attention.cu; never the shipped build). At exit it prints one "att_stamps:" line: mean cycles a block
# of each phase of a one-token decode launch (the inputs, the positions, the block's merge, the count) and of the
# merging block (the splits' merge, o's tiles), and the span from a KV head's earliest wait (ns). How session 25's
# calls A-C (docs/results/s25/) measured attend_split_k. Needs nvcc and a built tree (make all).
# usage: bash tests/bench/att_stamps_build.sh   (then carry build/bench/kvq-run-st to the device, e.g. as an extra
#        binary of tests/bench/gpu_bundle.sh)
set -eu
make -j2 all >/dev/null
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
nvcc -O3 -arch=sm_90 -DKVQ_ATT_STAMPS -I. -c kernels/cuda/attention.cu -o "$t/attention.o"
cp build/cuda/libkvqcuda.a "$t/lib.a"
ar r "$t/lib.a" "$t/attention.o" # the member of the same name replaced
# the link line of build/kvq-run (make -n), with the stamped library in place of build/cuda/libkvqcuda.a
cmd=$(make -n -B build/kvq-run 2>/dev/null | grep -E -- "-o build/kvq-run( |$)" | tail -1)
[ -n "$cmd" ] || { echo "att_stamps_build: no link line for build/kvq-run" >&2; exit 1; }
mkdir -p build/bench
eval "$(echo "$cmd" | sed "s#build/cuda/libkvqcuda.a#$t/lib.a#; s#-o build/kvq-run#-o build/bench/kvq-run-st#")"
nm build/bench/kvq-run-st | grep -q att_st_print && echo "att_stamps_build: build/bench/kvq-run-st"
