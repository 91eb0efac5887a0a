#!/usr/bin/env bash
# The side-by-side run behind docs/RESULTS.md "CPU runtime from packed weights": llama.cpp's
# llama-bench (GGUF files made by tests/bench/llamacpp_peer.sh in $KVQ_PEER_DIR) and
# tests/bench/cpu_decode.sh on the same model in one run.
# usage: tests/bench/cpu_vs_llamacpp.sh MODEL_DIR [THREADS ...]   (REPS=3 by default)
set -euo pipefail
model=${1:?usage: cpu_vs_llamacpp.sh MODEL_DIR [THREADS ...]}
shift || true
threads=${*:-1 2}
reps=${REPS:-3}
peer=${KVQ_PEER_DIR:-$HOME/.cache/kvq-peer}
bench=$peer/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin/llama-bench
name=$(basename "$model")
[ -x "$bench" ] && [ -s "$peer/$name-Q4_K_M.gguf" ] || tests/bench/llamacpp_peer.sh "$model" >/dev/null
echo "| file | threads | pp512 tok/s | tg128 tok/s |"
echo "|---|---|---|---|"
for t in $threads; do
  for f in "$peer/$name-bf16.gguf" "$peer/$name-Q4_K_M.gguf"; do
    "$bench" -m "$f" -p 512 -n 128 -t "$t" -r "$reps" -o json 2>/dev/null | python3 -c "
import json,sys
r=json.load(sys.stdin); pp=[x for x in r if x['n_prompt']>0][0]; tg=[x for x in r if x['n_gen']>0][0]
print(f'| llama.cpp {sys.argv[1]} | {sys.argv[2]} | {pp[\"avg_ts\"]:.1f} ± {pp[\"stddev_ts\"]:.1f} | {tg[\"avg_ts\"]:.1f} ± {tg[\"stddev_ts\"]:.1f} |')" "$(basename "$f")" "$t"
  done
done
REPS=$reps tests/bench/cpu_decode.sh "$model" $threads
