#!/usr/bin/env bash
# Device call (issue 12, "verify at scale"): kvq-verify --gpu on a slice of heldout-books for the
# Llama-3-8B-shaped checkpoint (source bf16 and E8 4.0 both on the GPU), timed, beside the same
# verify on the device host's 16 CPU cores over fewer windows; then the packed-KV attention
# benchmark (issue 20) with its whole output kept.
# usage (on the device): bash tests/bench/gpu_8b_verify.sh [WINDOWS]
set -u
B=.cu/bin
[ -d .cu/lib ] || tar -C .cu -xJf .cu/pack.tar.xz
export LD_LIBRARY_PATH=$PWD/.cu/lib
cb=$(ls /usr/local/cuda/lib64/libcublas.so.13 2>/dev/null | head -1); [ -n "$cb" ] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$(dirname "$cb")
nw=${1:-16}; W=/tmp/w8; mkdir -p $W; src=$W/synth-8b; f=$W/e8.kvq
t0=$(date +%s); el() { echo "($(( $(date +%s) - t0 )) s)"; }
timeout 200 $B/cuda_kv_attn 4096 32768 131072 > $OUT/kv_attn.txt 2>&1; echo "kv bench rc $? $(el)"
$B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1 || echo synth failed
$B/kvq-convert -q -t 16 $src $f --weights hyperquant:e8:4.0 || echo convert failed
echo "== converted $(el)"
for mode in gpu cpu; do
  n=$nw; [ $mode = cpu ] && n=2
  s0=$(date +%s)
  $B/kvq-verify $f --source $src --text .cu/shared/data/heldout-books.txt --windows $n --no-kv -t 16 $([ $mode = gpu ] && echo --gpu) > $OUT/verify8b_$mode.txt 2>&1
  echo "== $mode windows $n rc $? wall $(( $(date +%s) - s0 )) s"
  grep -iE 'source ppl|weights  *ppl|windows' $OUT/verify8b_$mode.txt | head -4 | cut -c1-200
done
echo "== done $(el)"
