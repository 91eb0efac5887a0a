#!/usr/bin/env bash
# Attention time per decode step of the KV-codec cache, two kv_attend binaries side by side (one
# built from the old tree, one from the new: tests/bench/kv_attend.c builds against either):
# REPS rounds (default 3) that run OLD then NEW, each run the median of ROUNDS (default 5) timed
# rounds of thread CPU time; prints per spec and context the median over the REPS runs of each
# binary and new/old. Pin it (taskset -c 1) on a shared machine.
# usage: tests/bench/kv_attend_ab.sh OLD_KV_ATTEND NEW_KV_ATTEND SPEC...
set -euo pipefail
old=${1:?usage: kv_attend_ab.sh OLD_KV_ATTEND NEW_KV_ATTEND SPEC...}
new=${2:?new kv_attend}
shift 2
reps=${REPS:-3}
rounds=${ROUNDS:-5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for r in $(seq "$reps"); do
  "$old" "$rounds" "$@" | awk -F'|' 'NR > 2 {gsub(/ /, "", $2); gsub(/ /, "", $3); print $2, $3, $4 + 0}' >>"$tmp/old"
  "$new" "$rounds" "$@" | awk -F'|' 'NR > 2 {gsub(/ /, "", $2); gsub(/ /, "", $3); print $2, $3, $4 + 0}' >>"$tmp/new"
done
med() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "| KV cache | context | old CPU ms / step (runs) | new CPU ms / step (runs) | new/old |"
echo "|---|---|---|---|---|"
awk '{print $1, $2}' "$tmp/old" | awk '!seen[$0]++' | while read -r spec ctx; do
  o=$(awk -v s="$spec" -v c="$ctx" '$1 == s && $2 == c {print $3}' "$tmp/old")
  n=$(awk -v s="$spec" -v c="$ctx" '$1 == s && $2 == c {print $3}' "$tmp/new")
  mo=$(echo "$o" | med); mn=$(echo "$n" | med)
  echo "| \`$spec\` | $ctx | $mo ($(echo $o)) | $mn ($(echo $n)) | $(awk -v a="$mn" -v b="$mo" 'BEGIN {printf "%.3f", a / b}') |"
done
