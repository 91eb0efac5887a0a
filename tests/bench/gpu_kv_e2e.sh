#!/usr/bin/env bash
# Device call (issue 20): the Llama-3-8B-shaped model (HyperQuant E8 4.0 weights) decoding at a
# long context with each KV cache the device runs: the fp32 default, --kv fp16, int:4, int:2,
# kivi:2 (KVS). A prompt of the first 108500 bytes of ../shared/data/heldout-books.txt (carried as
# .cu/long.txt: ~32.6k tokens with the synthetic model's tokenizer), then N greedy tokens, batch 1, `kvq-run --gpu --ctx-max CTX
# --prompt-file`. Then the short prompt (182 tokens, SHORT_KVS: fp32 int:4 fp16 by default) where
# the cache is small and launches dominate: each codec cache with its decode steps as CUDA graphs
# (the default) and with KVQ_CUDA_KV_GRAPHS=0 (launched directly), the fp32 cache with and
# without graphs. LONG=0 skips the long runs, VERIFY=0 the t128 kvq-verify rows.
# usage (on the device): [KVS="..."] [SHORT_KVS="..."] [LONG=0] [VERIFY=0] [CTX=33024] [N=128] [RUN_TIMEOUT=150] bash tests/bench/gpu_kv_e2e.sh
set -u
TESTS= . tests/bench/gpu_env.sh
# kvq-verify with a stored KV codec, CPU against GPU, on the t128 model (head_dim 128, 4 query heads
# per KV head: the device kernels' shape; random weights), text .cu/ts.txt (the first 12000 bytes
# of ../shared/data/tinystories-valid-sample.txt), 128-token windows
T=/tmp/t128; [ "${VERIFY:-1}" = 1 ] && { [ -f $T/config.json ] || $B/make_synth_llama t128 $T tests/models/kvq-tiny-llama >/dev/null 2>&1; }
[ "${VERIFY:-1}" = 1 ] && for kv in int:4 "kivi:2 --kv-window 16"; do
  f=$T-${kv%% *}.kvq; f=${f//:/-}
  $B/kvq-convert -q -t 16 $T $f --weights hyperquant:e8:4.0 --kv $kv || echo "convert t128 $kv failed"
  for dev in "" --gpu; do
    echo "verify t128 $kv ${dev:-cpu}: $($B/kvq-verify $f --source $T --text .cu/ts.txt --ctx 128 -t 16 $dev 2>&1 | grep -E '^  (kv|weights\+kv) +ppl|result' | tr -s ' ' | tr '\n' ' ')"
  done
done
echo "== verify $(el)"
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
[ -f $src/config.json ] || $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1 || echo synth failed
echo "== synth $(el)"
[ -f $W/e8.kvq ] || $B/kvq-convert -q -t 16 $src $W/e8.kvq --weights hyperquant:e8:4.0 || echo "convert failed"
echo "== converted $(el)"
cp .cu/long.txt $W/long.txt # the first 108500 bytes of ../shared/data/heldout-books.txt, carried
head -c 560 $W/long.txt > $W/short.txt
run() { # label prompt-file ctx kv-options...
  local l=$1 p=$2 c=$3; shift 3
  out=$(timeout ${RUN_TIMEOUT:-150} $B/kvq-run $W/e8.kvq --gpu --ctx-max $c --prompt-file $p -n ${N:-128} --temp 0 "$@" 2>&1 >$W/text.$l)
  echo "$out" | grep -E 'KV cache|memory|on the device|prefill|decode|error|cannot|exceeds' | sed "s/^/$l: /" | cut -c1-260
  echo "$l: text md5 $(md5sum < $W/text.$l | cut -c1-12)"
}
[ "${LONG:-1}" = 1 ] && for kv in ${KVS:-fp32 int:4 fp16 int:2 kivi:2}; do
  if [ $kv = fp32 ]; then run "long-$kv" $W/long.txt ${CTX:-33024}; else run "long-$kv" $W/long.txt ${CTX:-33024} --kv $kv; fi
  echo "== $kv $(el)"
done
for kv in ${SHORT_KVS:-fp32 int:4 fp16}; do
  if [ $kv = fp32 ]; then run "short-$kv" $W/short.txt 1024; KVQ_CUDA_GRAPHS=0 run "short-fp32-nographs" $W/short.txt 1024
  else run "short-$kv" $W/short.txt 1024 --kv $kv; KVQ_CUDA_KV_GRAPHS=0 run "short-$kv-nokvgraphs" $W/short.txt 1024 --kv $kv; fi
done
echo "== done $(el)"
