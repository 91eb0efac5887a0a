#!/usr/bin/env bash
# Device-host CPU run (issue 19): kvq's CPU runtime beside llama.cpp on the Llama-3.2-1B shape,
# on the lent GPU machine's CPU (16 cores, quiet: no other job), threads 1 and 2 (THREADS=...).
# Bundle (.cl/, carried): bin/ = kvq-run, kvq-convert, make_synth_llama (this tree);
# src/lcsrc.tar.xz = llama.cpp 0.3.36's source (llamacpp_peer.sh's copy, less docs, models and
# GPU backends), built there with -march=native (GGML_NATIVE=ON) into llama-bench and
# llama-quantize; py/ = its convert_hf_to_gguf.py, conversion/ (with llamacpp_peer.sh's
# pre-tokenizer hook) and gguf-py; pack.tar.xz = the shared libraries kvq's binaries need.
# PART=1: build, convert, llama.cpp's rows; PART=2: kvq's rows (default: both).
# kvq: prefill tok/s of the ~520-token prompt of cpu_decode.sh (-n 2), decode tok/s of 128
# (NDEC, default 128) tokens after a 9-token prompt; llama.cpp: llama-bench -p 512 -n 128 -r REPS. Medians.
# usage (on the device): [THREADS="1 2"] [REPS=3] bash tests/bench/dev_cpu_1b.sh
set -u
C=.cl; B=$C/bin
[ -d $C/lib ] || tar -C $C -xJf $C/pack.tar.xz
export LD_LIBRARY_PATH=$PWD/$C/lib
W=/tmp/c; mkdir -p $W; src=$W/synth-1b
t0=$(date +%s); el() { echo "($(( $(date +%s) - t0 )) s)"; }
lscpu | grep -E "Model name|^CPU\(s\)|L3"
L=$W/llama.cpp
if [ ! -x $L/b/bin/llama-bench ]; then
  mkdir -p $L && tar -C $L -xJf $C/src/lcsrc.tar.xz
  cmake -S $L -B $L/b -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF > $W/cmake.log 2>&1 &&
  cmake --build $L/b -j16 --target llama-bench llama-quantize >> $W/cmake.log 2>&1 || { echo "llama.cpp build failed"; tail -5 $W/cmake.log; }
fi
echo "== llama.cpp built $(el)"
[ -f $src/config.json ] || $B/make_synth_llama 1b $src tests/models/kvq-tiny-llama >/dev/null || echo synth failed
[ -s $W/bf16.gguf ] || PYTHONPATH=$C/py/gguf-py:$C/py KVQ_PRE_TOKENIZER=llama-bpe python3 $C/py/convert_hf_to_gguf.py $src --outtype bf16 --outfile $W/bf16.gguf > $W/conv.log 2>&1 || { echo "gguf conversion failed"; tail -5 $W/conv.log; }
[ -s $W/q4km.gguf ] || $L/b/bin/llama-quantize $W/bf16.gguf $W/q4km.gguf Q4_K_M 16 > $W/q.log 2>&1 || { echo "quantize failed"; tail -3 $W/q.log; }
for s in hyperquant:e8:4.0 hyperquant:e8:3.0 rtn:4:g128; do
  [ -s $W/${s//:/-}.kvq ] || $B/kvq-convert -q -t 16 --weights $s --quantize-embeddings $src $W/${s//:/-}.kvq || echo "convert $s failed"
done
ls -l $W/*.gguf $W/*.kvq | awk '{printf "%s %.1f MB\n", $NF, $5/1e6}'
echo "== prepared $(el)"
reps=${REPS:-3}
[ "${PART:-0}" = 2 ] || for t in ${THREADS:-1 2}; do
  for f in bf16 q4km; do
    $L/b/bin/llama-bench -m $W/$f.gguf -p 512 -n 128 -t $t -r $reps -o json 2>/dev/null | python3 -c "
import json,sys
r=json.load(sys.stdin); pp=[x for x in r if x['n_prompt']>0][0]; tg=[x for x in r if x['n_gen']>0][0]
print(f'| llama.cpp {sys.argv[1]} | {sys.argv[2]} | {pp[\"avg_ts\"]:.1f} ± {pp[\"stddev_ts\"]:.1f} | {tg[\"avg_ts\"]:.1f} ± {tg[\"stddev_ts\"]:.1f} |')" $f $t
  done
done
echo "== llama.cpp $(el)"
[ "${PART:-0}" = 1 ] && exit 0
TM=""; [ -x /usr/bin/time ] && TM="/usr/bin/time -f RSS:%M"
prompt=$(head -c 2600 tests/data/heldout-sample.txt | tr '\n' ' ')
for t in ${THREADS:-1 2}; do
  for key in bf16 hyperquant:e8:4.0 hyperquant:e8:3.0 rtn:4:g128; do
    f=$W/${key//:/-}.kvq; [ $key = bf16 ] && f=$src
    pf=""; dc=""; rss=""; held=""
    for r in $(seq $reps); do
      $TM $B/kvq-run $f -p "$prompt" -n 2 -t $t --temp 0 >/dev/null 2>$W/l1 || { tail -2 $W/l1; continue; }
      $TM $B/kvq-run $f -p "The old house stood on the hill above the village" -n ${NDEC:-128} -t $t --temp 0 >/dev/null 2>$W/l2 || { tail -2 $W/l2; continue; }
      pf="$pf $(grep -o 'prefill [0-9]* tokens [0-9.]*' $W/l1 | awk '{print $4}')"
      dc="$dc $(grep -o 'decode [0-9]* tokens [0-9.]*' $W/l2 | awk '{print $4}' | tail -1)"
      rss="$rss $(cat $W/l1 $W/l2 | awk -F: '/^RSS:/ {if ($2 + 0 > m) m = $2 + 0} END {print m/1024}')"
      held=$(cat $W/l1 | grep -o 'weights [0-9.]* MB' | head -1)
    done
    python3 -c "
import sys,statistics as s
k,t,pf,dc,rss,held=sys.argv[1:7]
m=lambda v: s.median([float(x) for x in v.split()]) if v.split() else float('nan')
print(f'| kvq {k} | {t} | {held} | {m(pf):.1f} | {m(dc):.1f} | {m(rss):.0f} | pf {pf.strip()} / dc {dc.strip()} |')" "$key" "$t" "$pf" "$dc" "$rss" "$held"
  done
done
echo "== done $(el)"
