#!/usr/bin/env bash
# session 22 call C: does fetching a row's first escapes during its last steps (KVQ_CUDA_ESC_PF=1, the PF scheme;
# default at width 4 is the batched row end, 2) help the 16-bit form, whose row end waits on its loads (call B)?
# The product alone (cuda_hqx 14336x4096, width 4) and the 8B decode (E8 4.0, lm_head packed, width 4), ESC16 0 / 2
# crossed with ESC_PF 2 / 1, alternated. Logs in $OUT/C_logs.tgz.
set -u
TESTS= . tests/bench/gpu_env.sh
L=/tmp/logsC; mkdir -p $L
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
( $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1; echo "synth $(el)"
  $B/kvq-convert -q -t 14 $src $W/e8q.kvq --weights hyperquant:e8:4.0 --quantize-embeddings
  echo "conv done: $(ls $W/*.kvq | tr '\n' ' ') $(el)" ) > $L/conv.log 2>&1
cat $L/conv.log
for x in 0:2 2:2 0:1 2:1; do e=${x%%:*}; p=${x##*:}
  KVQ_HQX_WIDTH=4 KVQ_CUDA_ESC16=$e KVQ_CUDA_ESC_PF=$p timeout 60 $B/cuda_hqx 14336x4096 > $L/hqx_e${e}_p$p.txt 2>&1
  echo "cuda_hqx ESC16=$e PF=$p: $(grep -E '^\| 14336x4096 \| hyperquant:e8:4.0' $L/hqx_e${e}_p$p.txt | cut -c1-150) $(el)"
done
prompt=$(head -c 560 .cu/shared/data/heldout-books.txt)
run() { # label env...
  local l=$1; shift
  env "$@" timeout 40 $B/kvq-run $W/e8q.kvq --gpu --ctx-max 1024 -p "$prompt" -n 256 --temp 0 > $L/run_$l.log 2>&1
  echo "$l: $(grep -hoE 'decode [0-9]+ tokens [0-9.]+ tok/s|rror.*' $L/run_$l.log | head -1) | $(grep -hoE 'on the device: weights [0-9.]+ MB' $L/run_$l.log) $(el)"
}
for r in 1 2 3; do for x in 0:2 2:2 2:1 0:1; do e=${x%%:*}; p=${x##*:}
  run e${e}_p${p}_r$r KVQ_HQX_WIDTH=4 KVQ_CUDA_ESC16=$e KVQ_CUDA_ESC_PF=$p; done; done
for f in $L/run_*.log; do echo "$(basename $f) text $(grep -av -E 'tok/s|MB|ms' $f | md5sum | cut -c1-8)"; done
tar -C /tmp -czf $OUT/C_logs.tgz logsC
echo "== done $(el)"
