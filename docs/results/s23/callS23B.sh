#!/usr/bin/env bash
# session 23 call B (H200): the KV attention table (every codec at 4 and 2 bits, batch 1, 4k / 32k / 128k) beside
# PyTorch SDPA bf16 in the same call, while the 8B shape is made and converted (--weights none, E8 4.0); then the 8B
# decode, bf16 against E8 4.0 alternated (call A's bf16 runs, from the HF directory, passed their 60 s limit); then HF
# transformers as the peer if the time allows. Logs in $OUT/B_logs.tgz.
set -u
TESTS= . tests/bench/gpu_env.sh
L=/tmp/logsB; mkdir -p $L
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
( $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1; echo "synth $(el)"
  nice $B/kvq-convert -q -t 12 $src $W/bf16.kvq --weights none; echo "none $(el)"
  nice $B/kvq-convert -q -t 12 $src $W/e8.kvq --weights hyperquant:e8:4.0; echo "e8 $(el)" ) > $L/conv.log 2>&1 &
CP=$!
ROWS="int:4 tc,int:2 tc,kivi:4 tc2,kivi:2 tc,turboquant:4,turboquant:2,qturbo:4,qturbo:2,turboquant-prod:4,turboquant-prod:2,octopus:4,octopus:2,hqmq:s192:r6,hqmq:s24:r3,hqkv:e8:4,hqkv:e8:2"
CUDA_KV_BATCH=1 CUDA_KV_ONLY="$ROWS" timeout 280 $B/cuda_kv_attn 4096 32768 131072 > $L/kv_b1.txt 2>&1; echo "== kv table rc $? $(el)"
SDPA_BATCH=1 timeout 100 python3 tests/bench/cuda_kv_sdpa.py 4096 32768 131072 > $L/sdpa.txt 2>&1; echo "== sdpa rc $? $(el)"
grep -E "^\| [0-9]+ \| 1 " $L/sdpa.txt
grep -E "^\| (4k|32k|128k) " $L/kv_b1.txt | cut -c1-110
wait $CP; cat $L/conv.log
prompt=$(head -c 560 .cu/shared/data/heldout-books.txt)
run() { # label model env...
  local l=$1 m=$2; shift 2
  env "$@" timeout 150 $B/kvq-run $m --gpu --ctx-max 1024 -p "$prompt" -n 256 --temp 0 > $L/run_$l.log 2>&1
  echo "$l: $(grep -ahE 'decode|rror' $L/run_$l.log | cut -c1-70) | $(grep -ahoE 'on the device: weights [0-9.]+ MB' $L/run_$l.log) $(el)"
}
for r in 1 2; do run bf16_r$r $W/bf16.kvq; run e8_r$r $W/e8.kvq; done
for f in $L/run_*.log; do echo "$(basename $f) text $(grep -av -E 'tok/s|MB|ms' $f | md5sum | cut -c1-8)"; done
left=$(( 560 - ($(date +%s) - t0) ))
[ $left -gt 90 ] && timeout $left python3 tests/bench/gpu_hf_peer.py $src 128 256 > $L/peer.txt 2>&1; echo "== peer rc $? $(el)"; grep -v Warning $L/peer.txt | tail -6
tar -C /tmp -czf $OUT/B_logs.tgz logsB
echo "== done $(el)"
