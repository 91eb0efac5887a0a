#!/usr/bin/env bash
# A PQ file (default pq:4, embeddings kept as the source's) run packed (the pqx layout, kvq-run's
# default) and decoded at load (--exec decoded, the reference path), and the bf16 source
# checkpoint itself (SOURCE=1), alternated run by run on
# one pinned core: weights held (kvq-run -v's memory line), decode tok/s of 128 tokens after a
# 10-token prompt, prefill tok/s of a ~520-token prompt, peak RSS; medians of REPS (default 5)
# runs of each. The conversion is cached in $KVQ_BENCH_DIR (default /tmp/kvq-bench).
# usage: tests/bench/pq_decode.sh MODEL_DIR [THREADS]        (from the repository root)
#   env: SPEC (pq:4), CONVERT_OPTS (more kvq-convert options, e.g. --quantize-embeddings), REPS (5),
#        CPU (the core to pin to: 1), SOURCE (1: also run the source), KVQ_PQ_FILE (an existing file)
set -euo pipefail
model=${1:?usage: pq_decode.sh MODEL_DIR [THREADS]}
t=${2:-1}
spec=${SPEC:-pq:4}
reps=${REPS:-5}
cpu=${CPU:-1}
out=${KVQ_BENCH_DIR:-/tmp/kvq-bench}
mkdir -p "$out"
copts=${CONVERT_OPTS:-}
f=${KVQ_PQ_FILE:-$out/$(basename "$model")-${spec//:/-}${copts// /}.kvq}
[ -s "$f" ] || build/kvq-convert -q --weights "$spec" $copts "$model" "$f" >&2
modes="packed decoded"
[ "${SOURCE:-0}" = 1 ] && modes="$modes source"
prompt=$(head -c 2600 tests/data/heldout-sample.txt | tr '\n' ' ')
pin=(taskset -c "$cpu" nice -n 10)

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
declare -A dc pf rss held
for r in $(seq "$reps"); do
  for mode in $modes; do
    ex=(); [ "$mode" = decoded ] && ex=(--exec decoded)
    src=$f; [ "$mode" = source ] && src=$model
    log=$(mktemp)
    "${pin[@]}" /usr/bin/time -f "RSS %M" build/kvq-run "$src" "${ex[@]}" -v \
      -p "The old house stood on the hill above the village" -n 128 -t "$t" --temp 0 >/dev/null 2>"$log" \
      || { cat "$log" >&2; exit 1; }
    dc[$mode]+="$(grep -o 'decode [0-9]* tokens [0-9.]*' "$log" | awk '{print $4}' | tail -1) "
    held[$mode]=$(grep -o 'memory: weights .*' "$log" | head -1)
    "${pin[@]}" /usr/bin/time -f "RSS %M" build/kvq-run "$src" "${ex[@]}" -p "$prompt" -n 2 -t "$t" --temp 0 \
      >/dev/null 2>>"$log" || { cat "$log" >&2; exit 1; }
    pf[$mode]+="$(grep -o 'prefill [0-9]* tokens [0-9.]*' "$log" | awk '{print $4}' | tail -1) "
    rss[$mode]+="$(awk '/^RSS/ {if ($2 > m) m = $2} END {print m/1024}' "$log") "
    rm -f "$log"
  done
done
echo "file: $f ($(stat -c %s "$f") bytes), $t thread(s) pinned to core $cpu, medians of $reps alternated runs"
echo "| path | decode tok/s | prefill tok/s | peak RSS MB | kvq-run -v memory line |"
echo "|---|---|---|---|---|"
for mode in $modes; do
  printf '| %s | %s | %s | %.0f | %s |\n' "$mode" "$(tr ' ' '\n' <<<"${dc[$mode]}" | grep . | median)" \
    "$(tr ' ' '\n' <<<"${pf[$mode]}" | grep . | median)" "$(tr ' ' '\n' <<<"${rss[$mode]}" | grep . | median)" \
    "${held[$mode]}"
done
for mode in $modes; do echo "decode runs, $mode: ${dc[$mode]}"; done
