#!/usr/bin/env bash
# kvq's CPU runtime side by side: the bf16 source, HyperQuant E8 4.0 / 3.0 and RTN 4 g128
# (embeddings quantized too) held packed (--exec int8), and E8 4.0 decoded at load (the
# reference path), at each thread count: prefill tok/s of a ~520-token prompt (as llama-bench's
# pp512) and, in a second run, decode tok/s of 128 tokens after a 9-token prompt (as
# llama-bench's tg128, which decodes from an empty context), weights held and peak RSS; medians
# of REPS runs (default 3). Conversions are cached in $KVQ_BENCH_DIR (default /tmp/kvq-bench).
# usage: tests/bench/cpu_decode.sh MODEL_DIR [THREADS ...]     (from the repository root)
set -euo pipefail
model=${1:?usage: cpu_decode.sh MODEL_DIR [THREADS ...]}
shift || true
threads=${*:-1 2}
reps=${REPS:-3}
out=${KVQ_BENCH_DIR:-/tmp/kvq-bench}
mkdir -p "$out"
name=$(basename "$model")
prompt=$(head -c 2600 tests/data/heldout-sample.txt | tr '\n' ' ')
params=$(python3 -c "
import json,os,sys
d=sys.argv[1]; n=0
import struct
for f in sorted(os.listdir(d)):
    if f.endswith('.safetensors'):
        with open(os.path.join(d,f),'rb') as fh:
            hl=struct.unpack('<Q',fh.read(8))[0]; h=json.loads(fh.read(hl))
        for k,v in h.items():
            if k!='__metadata__':
                p=1
                for s in v['shape']: p*=s
                n+=p
print(n)" "$model")

declare -A files=([bf16]="$model")
for spec in hyperquant:e8:4.0 hyperquant:e8:3.0 rtn:4:g128; do
  f=$out/$name-${spec//:/-}.kvq
  [ -s "$f" ] || build/kvq-convert -q --weights "$spec" --quantize-embeddings "$model" "$f" >&2
  files[$spec]=$f
done

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "| model | file MB | bits/param | exec | threads | weights held MB | prefill tok/s | decode tok/s | peak RSS MB |"
echo "|---|---|---|---|---|---|---|---|---|"
for key in bf16 hyperquant:e8:4.0 hyperquant:e8:3.0 rtn:4:g128 decoded; do
  f=${files[$key]:-${files[hyperquant:e8:4.0]}}
  exec_mode=int8
  [ "$key" = decoded ] && exec_mode=decoded
  [ "$key" = bf16 ] && exec_mode=-
  if [ -d "$f" ]; then bytes=$(cat "$f"/*.safetensors | wc -c); else bytes=$(stat -c %s "$f"); fi
  for t in $threads; do
    pf=(); dc=(); rss=(); held=""
    for r in $(seq "$reps"); do
      log=$(mktemp)
      /usr/bin/time -f "RSS %M" build/kvq-run "$f" $( [ "$exec_mode" != - ] && echo --exec "$exec_mode") \
        -p "$prompt" -n 2 -t "$t" --temp 0 >/dev/null 2>"$log" || { cat "$log" >&2; exit 1; }
      pf+=("$(grep -o 'prefill [0-9]* tokens [0-9.]*' "$log" | awk '{print $4}')")
      /usr/bin/time -f "RSS %M" build/kvq-run "$f" $( [ "$exec_mode" != - ] && echo --exec "$exec_mode") \
        -p "The old house stood on the hill above the village" -n 128 -t "$t" --temp 0 >/dev/null 2>>"$log" \
        || { cat "$log" >&2; exit 1; }
      dc+=("$(grep -o 'decode [0-9]* tokens [0-9.]*' "$log" | awk '{print $4}' | tail -1)")
      rss+=("$(awk '/^RSS/ {if ($2 > m) m = $2} END {print m/1024}' "$log")")
      held=$(grep -o 'weights [0-9.]* MB (packed' "$log" | awk '{print $2}' | tail -1)
      rm -f "$log"
    done
    printf '| %s | %.1f | %.2f | %s | %s | %s | %s | %s | %.0f |\n' "$key" "$(echo "$bytes / 1000000" | bc -l)" \
      "$(echo "$bytes * 8 / $params" | bc -l)" "$exec_mode" "$t" "$held" \
      "$(printf '%s\n' "${pf[@]}" | median)" "$(printf '%s\n' "${dc[@]}" | median)" "$(printf '%s\n' "${rss[@]}" | median)"
  done
done
