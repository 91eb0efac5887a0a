#!/usr/bin/env bash
# Device call (issue 12): kvq-verify on the whole book for kvq-small-llama, on the GPU and on the
# device host's 16 CPU cores, same command otherwise (cards' protocol: 733 windows of 512).
# Carried: .cv/tools.tar.xz (kvq-verify, kvq-convert, kvq-run, their libraries, heldout-books.txt)
# and .cv/small-llama.tar.xz (../shared/models/kvq-small-llama), both made on the dev machine.
# usage (on the device): bash tests/bench/gpu_verify_book.sh [SPEC]
set -u
V=/tmp/v; mkdir -p $V
tar -C $V -xJf .cv/tools.tar.xz; tar -C $V -xJf .cv/small-llama.tar.xz
export LD_LIBRARY_PATH=$V/lib
cb=$(ls /usr/local/cuda/lib64/libcublas.so.13 2>/dev/null | head -1); [ -n "$cb" ] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$(dirname "$cb")
spec=${1:-hyperquant:e8:4.0}; src=$V/models/kvq-small-llama; f=$V/small-llama.kvq
t0=$(date +%s); el() { echo "($(( $(date +%s) - t0 )) s)"; }
$V/bin/kvq-convert -q -t 16 --weights $spec $src $f || echo convert failed
echo "== converted $(el)"
for mode in gpu cpu; do
  s0=$(date +%s.%N)
  $V/bin/kvq-verify $f --source $src --text $V/data/heldout-books.txt --max-kld 0.05 -t 16 $([ $mode = gpu ] && echo --gpu) > $OUT/verify_$mode.txt 2>&1
  rc=$?; s1=$(date +%s.%N)
  echo "== $mode rc $rc wall $(python3 -c "print(round($s1-$s0,1))") s"
  grep -iE 'ppl|kld|top-1|windows|positions' $OUT/verify_$mode.txt | head -12
done
echo "== done $(el)"
