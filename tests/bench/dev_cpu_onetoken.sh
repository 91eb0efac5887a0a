#!/usr/bin/env bash
# Device-host CPU run (issue 19): which body the one-token product should take on the lent GPU
# machine's Intel Xeon (AVX-512 VNNI) — the cpuid rule's AVX2 body against the 512-bit VNNI body
# (KVQ_HQX_ONE_TOKEN=vnni), alternated, beside llama.cpp Q4_K_M in the same call, on the
# Llama-3.2-1B shape (synth-1b, E8 4.0 with embeddings quantized). Needs the .cl bundle of
# dev_cpu_1b.sh (PART=1 of it builds llama.cpp and converts; this script then adds kvq's rows).
# kvq: decode tok/s of NDEC (default 64) tokens after a 9-token prompt; llama.cpp: llama-bench
# -p 512 -n 128 -r 1. usage (on the device): [THREADS="1 2"] [REPS=2] bash tests/bench/dev_cpu_onetoken.sh
set -u
PART=1 THREADS="${THREADS:-1 2}" REPS=1 bash tests/bench/dev_cpu_1b.sh
C=.cl; B=$C/bin; export LD_LIBRARY_PATH=$PWD/$C/lib
W=/tmp/c; f=$W/hyperquant-e8-4.0.kvq
for t in ${THREADS:-1 2}; do
  for r in $(seq ${REPS:-2}); do
    for ot in avx2 vnni; do
      KVQ_HQX_ONE_TOKEN=$ot $B/kvq-run $f -p "The old house stood on the hill above the village" -n ${NDEC:-64} -t $t --temp 0 \
        >/dev/null 2>$W/l || { tail -2 $W/l; continue; }
      echo "kvq E8 4.0 one-token $ot threads $t round $r: $(grep -o 'decode [0-9]* tokens [0-9.]* tok/s' $W/l | tail -1)"
    done
  done
done
