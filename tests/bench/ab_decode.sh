#!/usr/bin/env bash
# Decode speed of two kvq-run binaries on the same .kvq files, run by run alternated (old, new,
# old, new, ...) so the load of a shared box falls on both alike; one thread pinned to one core.
# Prints every run's decode tok/s and the medians per file and binary.
# usage: [REPS=5] [NTOK=128] [CPU=0] tests/bench/ab_decode.sh OLD_KVQ_RUN NEW_KVQ_RUN FILE.kvq...
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: ab_decode.sh OLD NEW FILE.kvq..." >&2; exit 2; }
old=$1 new=$2; shift 2
reps=${REPS:-5} ntok=${NTOK:-128} cpu=${CPU:-0}
prompt="The old house stood on the hill above the village"
rate() { # decode tok/s of one run
    taskset -c "$cpu" "$1" "$2" -p "$prompt" -n "$ntok" -t 1 --temp 0 2>&1 >/dev/null |
        sed -n 's/.*decode [0-9]* tokens \([0-9.]*\) tok\/s.*/\1/p'
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
for f in "$@"; do
    o=() n=()
    for ((i = 0; i < reps; i++)); do
        o+=("$(rate "$old" "$f")")
        n+=("$(rate "$new" "$f")")
    done
    echo "$f: old ${o[*]} | new ${n[*]}"
    echo "$f: median old $(printf '%s\n' "${o[@]}" | median) new $(printf '%s\n' "${n[@]}" | median) tok/s (REPS=$reps NTOK=$ntok, core $cpu)"
done
