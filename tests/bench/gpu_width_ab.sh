#!/usr/bin/env bash
# Device call (issues 12/19, the layout's width): E8 4.0 on the 1B shape with the automatic width
# (5 bits: nibbles + one plane, escapes < 0.25 %) against KVQ_HQX_WIDTH=4 (nibbles, ~1.3 %
# escapes), alternating, twice each: decode tok/s and GPU weight memory.
# usage (on the device): bash tests/bench/gpu_width_ab.sh [1b|8b]
set -u
B=.cu/bin
[ -d .cu/lib ] || tar -C .cu -xJf .cu/pack.tar.xz
export LD_LIBRARY_PATH=$PWD/.cu/lib
size=${1:-1b}; W=/tmp/w; mkdir -p $W; src=$W/synth-$size; f=$W/$size-e8.kvq
[ -f $src/config.json ] || $B/make_synth_llama $size $src tests/models/kvq-tiny-llama >/dev/null 2>&1 || echo synth failed
[ -f $f ] || $B/kvq-convert -q -t 16 $src $f --weights hyperquant:e8:4.0 || echo convert failed
prompt=$(printf 'Once upon a time there was a little girl who lived in a village near the forest. %.0s' 1 2 3 4 5 6 7)
for r in 1 2; do for w in "" 4; do
  KVQ_HQX_WIDTH=$w $B/kvq-run $f --gpu --ctx-max 1024 -p "$prompt" -n 128 --temp 0 2>&1 >/dev/null | grep -E 'decode|on the device' | sed "s/^/width=${w:-auto}: /" | cut -c1-200
done; done
