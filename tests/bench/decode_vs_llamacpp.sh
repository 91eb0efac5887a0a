#!/usr/bin/env bash
# Decode speed side by side, interleaved: llama.cpp's llama-bench tg128 (its Q4_K_M file, made by
# tests/bench/llamacpp_peer.sh) and kvq's bench_runtime (median single-token step over 128
# steps after a 16-token prompt) on a kvq file, alternating run by run so both see the same
# machine; medians of REPS rounds (default 5) per thread count.
# usage: tests/bench/decode_vs_llamacpp.sh MODEL_DIR KVQ_FILE [THREADS ...]
set -euo pipefail
model=${1:?usage: decode_vs_llamacpp.sh MODEL_DIR KVQ_FILE [THREADS ...]}
kvq=${2:?usage: decode_vs_llamacpp.sh MODEL_DIR KVQ_FILE [THREADS ...]}
shift 2
threads=${*:-1 2}
reps=${REPS:-5}
peer=${KVQ_PEER_DIR:-$HOME/.cache/kvq-peer}
bench=$peer/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin/llama-bench
name=$(basename "$model")
[ -x "$bench" ] && [ -s "$peer/$name-Q4_K_M.gguf" ] || tests/bench/llamacpp_peer.sh "$model" >/dev/null
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
echo "| threads | llama.cpp Q4_K_M tg128 tok/s | kvq $(basename "$kvq") decode tok/s | kvq / llama.cpp | rounds |"
echo "|---|---|---|---|---|"
for t in $threads; do
  lc=(); kq=()
  for r in $(seq "$reps"); do
    lc+=("$("$bench" -m "$peer/$name-Q4_K_M.gguf" -p 0 -n 128 -t "$t" -r 1 -o json 2>/dev/null |
            python3 -c "import json,sys; print(json.load(sys.stdin)[0]['avg_ts'])")")
    kq+=("$(build/bench/bench_runtime -t "$t" -n 128 --prefill 1 "$kvq" 2>/dev/null | grep -o 'decode *[0-9.]*' | awk '{print $2}')")
  done
  a=$(printf '%s\n' "${lc[@]}" | median); b=$(printf '%s\n' "${kq[@]}" | median)
  printf '| %s | %.1f (%s) | %.1f (%s) | %.2f | %s |\n' "$t" "$a" "$(echo ${lc[@]} | xargs printf '%.1f ')" "$b" \
    "$(echo ${kq[@]} | xargs printf '%.1f ')" "$(echo "$b / $a" | bc -l)" "$reps"
done
