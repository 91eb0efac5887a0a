#!/usr/bin/env bash
# session 21 call A (main 5fb33b5+): the KV benchmarks first, alone on the GPU (SDPA bf16 and the int kernels, variants 1
# and 2, fp16 and int8 scores: which variant per width once Q8 is the default); then the whole test_cuda_kv beside
# test_cuda_model (the bad switch values of 1ff0211), test_cuda_hqx and the Q8 KLD check: kvq-tiny-llama (tests/models),
# E8 4.0 weights, --kv int:4 / int:2, kvq-verify on the CPU and --gpu with KVQ_CUDA_KV_TC_Q8=0 and 1.
set -u
TESTS= . tests/bench/gpu_env.sh
L=$OUT
t() { # name suite filter timeout [env]
  local n=$1 s=$2 f=$3 to=$4; shift 4
  env KVQ_TEST_FILTER="$f" "$@" timeout $to $B/$s > $L/$n.log 2>&1; echo "== $n rc $? $(el)"
  grep -hE '^\[ +(FAILED|PASSED) +\]|FAILED' $L/$n.log | head -6
}
timeout 100 python3 tests/bench/cuda_kv_sdpa.py 4096 32768 131072 > $L/sdpa.txt 2>&1; echo "== sdpa rc $? $(el)"; grep -E "^\| [0-9]+ \| 1 " $L/sdpa.txt
rows="bf16,int:4 tc,int:4 tc2,int:4 tc i8,int:4 tc2 i8,int:4 pipe4 i8,int:2 tc,int:2 tc2,int:2 tc i8,int:2 tc2 i8"
CUDA_KV_BATCH=1 CUDA_KV_ONLY="$rows" timeout 120 $B/cuda_kv_attn 4096 32768 131072 > $L/kv_r1.txt 2>&1; echo "== kv bench rc $? $(el)"
grep -E "^\| " $L/kv_r1.txt | cut -c1-120 | head -40
( t kv test_cuda_kv "*" 400 ) > $L/kv_summary.txt 2>&1 &
KP=$!
t model test_cuda_model "*" 150
grep -hiE "KVQ_CUDA_ESC16|TC_Q8|TC_LEAN" $L/model.log | cut -c1-160 | head -8
t hqx test_cuda_hqx "*" 150
W=/tmp/kt; mkdir -p $W; src=tests/models/kvq-tiny-llama
head -c 100000 .cu/shared/data/heldout-books.txt > $W/text.txt
kld() { grep -E "^  $2 +ppl" "$1" | head -1 | sed -n 's/.*\(ppl [0-9.]*\).*KLD \([0-9.]*\) ± \([0-9.]*\).*/\1 KLD \2 ± \3/p'; }
for kv in int:4 int:2; do
  tg=${kv/:/-}; f=$W/$tg.kvq
  $B/kvq-convert -q -t 4 $src $f --weights hyperquant:e8:4.0 --kv $kv > $L/kld_$tg.convert.txt 2>&1 || echo "convert $kv failed"
  $B/kvq-verify $f --source $src --text $W/text.txt -t 4 > $L/kld_${tg}_cpu.txt 2>&1; echo "rc $?" >> $L/kld_${tg}_cpu.txt
  for q in 0 1; do
    KVQ_CUDA_KV_TC_Q8=$q $B/kvq-verify $f --source $src --text $W/text.txt -t 4 --gpu > $L/kld_${tg}_gpu_q$q.txt 2>&1; echo "rc $?" >> $L/kld_${tg}_gpu_q$q.txt
  done
  for d in cpu gpu_q0 gpu_q1; do echo "$kv $d: kv $(kld $L/kld_${tg}_$d.txt kv) | weights+kv $(kld $L/kld_${tg}_$d.txt 'weights\+kv') | $(tail -1 $L/kld_${tg}_$d.txt)"; done
  echo "== kld $kv $(el)"
done
wait $KP; cat $L/kv_summary.txt
grep -hE "^\[  FAILED|^\[       OK|^\[ RUN" $L/kv.log | tail -3
echo "== done $(el)"
