#!/usr/bin/env bash
# Decode speed of the KV-codec cache, two kvq-run binaries side by side (e.g. before and after a
# change): for each --kv spec, REPS rounds (default 3) that run OLD then NEW on the same prompt,
# 400 greedy tokens at 1 thread (as docs/EXECUTION.md's KV-codec figures); prints the median
# decode tok/s of each (wall clock, as kvq-run reports it), the median CPU seconds (user + sys)
# of each whole run (loading included: on a shared machine CPU time moves less than wall time),
# and whether the two generated the same text (else the byte where they part). "fp32" = no --kv.
# usage: tests/bench/kv_decode.sh FILE.kvq OLD_KVQ_RUN NEW_KVQ_RUN [SPEC ...]   (from the repo root)
set -euo pipefail
file=${1:?usage: kv_decode.sh FILE.kvq OLD_KVQ_RUN NEW_KVQ_RUN [SPEC ...]}
old=${2:?old kvq-run}
new=${3:?new kvq-run}
shift 3
specs=${*:-fp32 int:4 kivi:2 octopus:4 octopus:3 turboquant:4 turboquant-prod:4 qturbo:4 hqmq:s96:r4 hqkv:e8:3}
reps=${REPS:-3}
ntok=${NTOK:-400}
threads=${THREADS:-1}
prompt="The old house stood on the hill above the village"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
run() { # binary spec out-prefix -> prints "tok/s cpu-seconds"
  local kv=()
  [ "$2" != fp32 ] && kv=(--kv "$2")
  /usr/bin/time -f "%U %S" -o "$3.time" "$1" "$file" "${kv[@]}" -p "$prompt" -n "$ntok" -t "$threads" --temp 0 \
    >"$3.txt" 2>"$3.err" || { cat "$3.err" >&2; exit 1; }
  echo "$(grep -o 'decode [0-9]* tokens [0-9.]*' "$3.err" | awk '{print $4}') $(awk '{print $1 + $2}' "$3.time")"
}

echo "| KV cache | old tok/s (runs) | new tok/s (runs) | new/old | old CPU s | new CPU s | same text |"
echo "|---|---|---|---|---|---|---|"
for spec in $specs; do
  o=(); n=(); oc=(); nc=()
  for r in $(seq "$reps"); do
    read -r a b < <(run "$old" "$spec" "$tmp/o"); o+=("$a"); oc+=("$b")
    read -r a b < <(run "$new" "$spec" "$tmp/n"); n+=("$a"); nc+=("$b")
  done
  same=yes # else where the two texts part: the first differing byte of the old text's bytes
  cmp -s "$tmp/o.txt" "$tmp/n.txt" ||
    same="from byte $(cmp "$tmp/o.txt" "$tmp/n.txt" 2>/dev/null | awk '{print $5}' | tr -d ,) of $(wc -c <"$tmp/o.txt")"
  mo=$(printf '%s\n' "${o[@]}" | median)
  mn=$(printf '%s\n' "${n[@]}" | median)
  echo "| $spec | $mo (${o[*]}) | $mn (${n[*]}) | $(awk -v a="$mn" -v b="$mo" 'BEGIN {printf "%.2f", a / b}') |" \
       "$(printf '%s\n' "${oc[@]}" | median) | $(printf '%s\n' "${nc[@]}" | median) | $same |"
done
