#!/usr/bin/env bash
# session 25 call A (H200): the short-context decode attention (attend_split_k). The new kernel computes each
# warp's and each split's softmax factor once (not once per output coordinate), issues the 16 splits' loads of the
# final merge together, and counts a block with one acq_rel atomic after a barrier (no fence by every thread).
# (1) the GPU suites (test_cuda_model: split attention against the host in double, graph/prefill/fused-input bit
# equalities; test_cuda_hqx: the attend+prep path) while the 8B shape converts; (2) the old and new binaries' logits
# and greedy texts on kvq-tiny-llama, bit for bit; (3) the stamped build (KVQ_ATT_STAMPS: per-phase clocks of every
# decode launch) at the default split rule and at KVQ_CUDA_ATTN_CMIN=32/64; (4) the 8B decode, old/new alternated, E8
# 4.0 and bf16; the step's timeline for both. Logs in $OUT/A_logs.tgz.
set -u
TESTS= . tests/bench/gpu_env.sh
[ -d .cu/shared/models/kvq-tiny-llama ] || cp -r tests/models/kvq-tiny-llama .cu/shared/models/ # the same files (the 64 MiB limit)
L=/tmp/logsA; mkdir -p $L
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
( $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1; echo "synth $(el)"
  nice $B/kvq-convert -q -t 12 $src $W/e8.kvq --weights hyperquant:e8:4.0; echo "e8 $(el)"
  nice $B/kvq-convert -q -t 12 $src $W/bf16.kvq --weights none; echo "none $(el)" ) > $L/conv.log 2>&1 &
t() { # name suite filter timeout [env]
  local n=$1 s=$2 f=$3 to=$4; shift 4
  env KVQ_TEST_FILTER="$f" "$@" timeout $to $B/$s > $L/$n.log 2>&1; echo "== $n rc $? $(el)"
  grep -hE '^\[ +(FAILED|PASSED) +\]|FAILED' $L/$n.log | head -6
}
t model test_cuda_model "*" 200
grep -h "split attention" $L/model.log | cut -c1-200
t hqx test_cuda_hqx "*" 120
# (2) tiny model: logits (prefill chunks through the split kernel) and greedy decode, old vs new
tm=$W/tiny.kvq; $B/kvq-convert -q .cu/shared/models/kvq-tiny-llama $tm --weights hyperquant:e8:4.0 > $L/tiny_conv.log 2>&1
python3 -c "import struct,sys; sys.stdout.buffer.write(struct.pack('<100i', *[(i*37)%200+3 for i in range(100)]))" > $W/ids.bin
for b in kvq-run.old kvq-run; do
  $B/$b $tm --gpu --tokens $W/ids.bin --logits $W/lg_$b.bin > $L/lg_$b.log 2>&1; echo "logits $b rc $? $(md5sum < $W/lg_$b.bin | cut -c1-12)"
  $B/$b $tm --gpu -p "Once upon a time" -n 100 --temp 0 2>/dev/null | md5sum | cut -c1-12 | sed "s/^/tiny text $b /"
done
while ! grep -q "^e8 " $L/conv.log; do sleep 2; done; echo "e8 ready $(el)"
prompt=$(head -c 560 .cu/shared/data/heldout-books.txt)
run() { # label binary model env...
  local l=$1 b=$2 m=$3; shift 3
  env "$@" timeout 120 $B/$b $m --gpu --ctx-max 1024 -p "$prompt" -n 256 --temp 0 > $L/run_$l.log 2>&1
  echo "$l: $(grep -ahE 'decode|rror' $L/run_$l.log | cut -c1-80) $(el)"
  grep -ah "att_stamps" $L/run_$l.log | cut -c1-420
}
# (3) stamps, (4) e8 A/B
run st_default kvq-run-st $W/e8.kvq
run st_cmin32 kvq-run-st $W/e8.kvq KVQ_CUDA_ATTN_CMIN=32
run st_cmin64 kvq-run-st $W/e8.kvq KVQ_CUDA_ATTN_CMIN=64
for r in 1 2 3; do run e8_old_r$r kvq-run.old $W/e8.kvq; run e8_new_r$r kvq-run $W/e8.kvq; done
run e8_new_cmin32 kvq-run $W/e8.kvq KVQ_CUDA_ATTN_CMIN=32
run tl_old kvq-run.old $W/e8.kvq KVQ_CUDA_TIMELINE=1 KVQ_CUDA_PDL=0
run tl_new kvq-run $W/e8.kvq KVQ_CUDA_TIMELINE=1 KVQ_CUDA_PDL=0
grep -ahiE "attend|attention" $L/run_tl_old.log | head -4 | cut -c1-200
grep -ahiE "attend|attention" $L/run_tl_new.log | head -4 | cut -c1-200
while ! grep -q "^none " $L/conv.log; do sleep 2; done; echo "none ready $(el)"
for r in 1 2; do run bf16_old_r$r kvq-run.old $W/bf16.kvq; run bf16_new_r$r kvq-run $W/bf16.kvq; done
for f in $L/run_*.log; do echo "$(basename $f) text $(grep -av -E 'tok/s|MB|ms|att_stamps|timeline' $f | md5sum | cut -c1-8)"; done
tar -C /tmp -czf $OUT/A_logs.tgz logsA
echo "== done $(el)"
