#!/usr/bin/env bash
# Device call (issue 12): A/B of decode configurations on the Llama-3-8B shape, E8 4.0, the
# issue's run (prompt 182 tokens, 256 greedy new tokens, batch 1, kvq-run --gpu --ctx-max
# 1024), alternating ROUNDS times. CONFIGS: ';'-separated "label|VAR=value ..." run on e8.kvq
# (default: the one-token product per warp (KVQ_CUDA_G1P=0), persistent with rings of 2 and 4);
# EXTRA: the same form, run once after the rounds (M=path: another model; R=name: another
# binary in .cu/bin, e.g. the previous bundle's kvq-run carried as kvq-run.old; N=n: n sequences
# decoded together, kvq-run --batch n);
# TIMELINE=1: the decode step's per-op time (KVQ_CUDA_TIMELINE=1, PDL off) for the default.
# usage (on the device): [TESTS=...] [ROUNDS=2] [CONFIGS=...] [EXTRA=...] bash tests/bench/gpu_ab8b.sh
set -u
. tests/bench/gpu_env.sh
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
[ -f $src/config.json ] || $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1 || echo synth failed
[ -f $W/e8.kvq ] || $B/kvq-convert -q -t 16 $src $W/e8.kvq --weights hyperquant:e8:4.0 || echo "convert failed"
[ -n "${EMBQ:-}" ] && { [ -f $W/e8q.kvq ] || $B/kvq-convert -q -t 16 $src $W/e8q.kvq --weights hyperquant:e8:4.0 --quantize-embeddings || echo "convert q failed"; }
[ -n "${E83:-}" ] && { [ -f $W/e83.kvq ] || $B/kvq-convert -q -t 16 $src $W/e83.kvq --weights hyperquant:e8:3.0 || echo "convert 3 failed"; }
echo "== converted $(el)"
prompt=$(head -c 560 .cu/shared/data/heldout-books.txt)
run() { # label "VAR=v ..." (M=model)
  local m=$W/e8.kvq bin=kvq-run e=() a=()
  for kv in $2; do case $kv in M=*) m=${kv#M=};; R=*) bin=${kv#R=};; N=*) a=(--batch ${kv#N=});; *) e+=("$kv");; esac; done
  out=$(env "${e[@]}" $B/$bin $m --gpu --ctx-max 1024 -p "$prompt" -n 256 --temp 0 "${a[@]}" 2>&1 >/dev/null)
  echo "$out" | grep -E -- 'on the device|decode|profile|--batch|rror' | sed "s/^/$1: /" | sed 's/(the embedding table.*//; s/ (\([0-9.]*\) ms a token.*/ \1 ms/' | cut -c1-160
}
IFS=';' read -ra cf <<< "${CONFIGS:-w|KVQ_CUDA_G1P=0;p2|KVQ_CUDA_G1P=2;p4|KVQ_CUDA_G1P=4}"
for r in $(seq ${ROUNDS:-2}); do for c in "${cf[@]}"; do run "${c%%|*}" "${c#*|}"; done; done
echo "== rounds done $(el)"
IFS=';' read -ra ex <<< "${EXTRA:-}"
for c in "${ex[@]}"; do run "${c%%|*}" "${c#*|}"; done
[ "${TIMELINE:-0}" = 1 ] && run "timeline" "KVQ_CUDA_TIMELINE=1 KVQ_CUDA_PDL=0"
echo "== done $(el)"
