#!/usr/bin/env bash
# The issue-19 side-by-side table on a shared machine: llama.cpp's llama-bench (bf16 and Q4_K_M
# GGUF made by tests/bench/llamacpp_peer.sh) and kvq-run (the bf16 source, HyperQuant E8 4.0 /
# 3.0 and RTN 4 g128 packed, embeddings quantized) ALTERNATED run by run: each round runs every
# file once at each thread count, so all of them see the same load; medians of REPS rounds
# (default 3), each round's values in brackets, and the load average before each round.
# kvq: prefill tok/s of a ~520-token prompt (pp512's counterpart) and, in a second process,
# decode tok/s of 128 tokens after a 9-token prompt (tg128's), peak RSS of the larger of the two.
# llama.cpp: llama-bench -p 512 -n 128 -r 1 (it warms up first), peak RSS of that process.
# Also the CPU seconds (user+sys) of each run, as a load-robust measure.
# Each run's figures also go to stderr as they come (a run stopped early keeps them).
# usage: tests/bench/cpu_table_alt.sh MODEL_DIR [THREADS ...]   (from the repository root)
#        KEYS="lc-Q4_K_M e8-4.0 ..." picks rows (default: all); PP=512 TG=128 the prompt and
#        generation lengths (kvq's prompt: the first PP*5 bytes of tests/data/heldout-sample.txt,
#        about PP tokens); KVQ_RUN=path/to/kvq-run (default build/kvq-run); KVQ_BENCH_DIR caches
#        conversions.
set -euo pipefail
model=${1:?usage: cpu_table_alt.sh MODEL_DIR [THREADS ...]}
shift || true
threads=${*:-1 2}
reps=${REPS:-3}
ppn=${PP:-512}
tgn=${TG:-128}
kvqrun=${KVQ_RUN:-build/kvq-run}
peer=${KVQ_PEER_DIR:-$HOME/.cache/kvq-peer}
out=${KVQ_BENCH_DIR:-/tmp/kvq-bench}
lb=$peer/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin/llama-bench
name=$(basename "$model")
[ -x "$lb" ] && [ -s "$peer/$name-Q4_K_M.gguf" ] || tests/bench/llamacpp_peer.sh "$model" >/dev/null
keys=${KEYS:-"lc-bf16 lc-Q4_K_M bf16 e8-4.0 e8-3.0 rtn-4"}
prompt=$(head -c $((ppn * 5)) tests/data/heldout-sample.txt | tr '\n' ' ')
declare -A file=([lc-bf16]="$peer/$name-bf16.gguf" [lc-Q4_K_M]="$peer/$name-Q4_K_M.gguf" [bf16]="$model"
                 [e8-4.0]="$out/$name-hyperquant-e8-4.0.kvq" [e8-3.0]="$out/$name-hyperquant-e8-3.0.kvq"
                 [rtn-4]="$out/$name-rtn-4-g128.kvq")
declare -A spec=([e8-4.0]=hyperquant:e8:4.0 [e8-3.0]=hyperquant:e8:3.0 [rtn-4]=rtn:4:g128)
for k in $keys; do
  [ -n "${spec[$k]:-}" ] && [ ! -s "${file[$k]}" ] && build/kvq-convert -q --weights "${spec[$k]}" --quantize-embeddings "$model" "${file[$k]}" >&2
done
declare -A pp tg rss cpu
loads=()
log=$(mktemp)
for r in $(seq "$reps"); do
  loads+=("$(cut -d' ' -f1 /proc/loadavg)")
  for t in $threads; do
    for k in $keys; do
      f=${file[$k]}
      if [[ $k == lc-* ]]; then
        /usr/bin/time -f "RSS %M CPU %U %S" "$lb" -m "$f" -p "$ppn" -n "$tgn" -t "$t" -r 1 -o json >"$log.json" 2>"$log"
        read -r a b < <(python3 -c 'import json,sys
r=json.load(open(sys.argv[1])); pp=[x for x in r if x["n_prompt"]>0][0]; tg=[x for x in r if x["n_gen"]>0][0]
print("%.1f %.1f" % (pp["avg_ts"], tg["avg_ts"]))' "$log.json")
      else
        /usr/bin/time -f "RSS %M CPU %U %S" "$kvqrun" "$f" -p "$prompt" -n 2 -t "$t" --temp 0 >/dev/null 2>"$log"
        a=$(grep -o 'prefill [0-9]* tokens [0-9.]*' "$log" | awk '{print $4}')
        /usr/bin/time -f "RSS %M CPU %U %S" "$kvqrun" "$f" -p "The old house stood on the hill above the village" \
          -n "$tgn" -t "$t" --temp 0 >/dev/null 2>>"$log"
        b=$(grep -o 'decode [0-9]* tokens [0-9.]*' "$log" | awk '{print $4}' | tail -1)
      fi
      pp[$k,$t]+="$a "; tg[$k,$t]+="$b "
      rss[$k,$t]+="$(awk '/^RSS/ {if ($2 > m) m = $2} END {printf "%.0f", m/1024}' "$log") "
      cpu[$k,$t]+="$(awk '/^RSS/ {s += $4 + $5} END {printf "%.1f", s}' "$log") "
      echo "$(date -u +%T) round $r t $t $k prefill $a decode $b load $(cut -d' ' -f1 /proc/loadavg)" >&2
    done
  done
done
rm -f "$log" "$log.json"
median() { tr ' ' '\n' | grep . | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
fmt() { printf '%s (%s)' "$(echo "$1" | median)" "$(echo $1)"; }
echo "PP=$ppn TG=$tgn threads: $threads, kvq-run: $kvqrun"
echo "load average (1 min) before each round: ${loads[*]}"
echo "| file | MB | threads | prefill tok/s | decode tok/s | peak RSS MB | CPU s per round |"
echo "|---|---|---|---|---|---|---|"
for t in $threads; do
  for k in $keys; do
    f=${file[$k]}
    if [ -d "$f" ]; then bytes=$(cat "$f"/*.safetensors | wc -c); else bytes=$(stat -c %s "$f"); fi
    printf '| %s | %.1f | %s | %s | %s | %s | %s |\n' "$k" "$(echo "$bytes / 1000000" | bc -l)" "$t" \
      "$(fmt "${pp[$k,$t]}")" "$(fmt "${tg[$k,$t]}")" "$(echo "${rss[$k,$t]}" | median)" "$(echo ${cpu[$k,$t]})"
  done
done
