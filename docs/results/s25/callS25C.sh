#!/usr/bin/env bash
# session 25 call C (H200): the short-context decode attention, third step. On top of call B's kernel: the positions
# loop with the G dots summed together (at_allsum: the butterflies' bits, half the shuffles) and no branch between the
# heads (a compile-time slot count 1/2/4/8). kvq-run.old: session 24's binary (e3c8cbe). The suites, the tiny model's
# logits and texts old/new bit for bit, the stamped build, the 8B decode old/new alternated (E8 4.0, bf16, E8 4.0
# with the lm_head packed). Logs in $OUT/C_logs.tgz.
set -u
TESTS= . tests/bench/gpu_env.sh
[ -d .cu/shared/models/kvq-tiny-llama ] || cp -r tests/models/kvq-tiny-llama .cu/shared/models/ # the same files (the 64 MiB limit)
L=/tmp/logsC; mkdir -p $L
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
( $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1; echo "synth $(el)"
  nice $B/kvq-convert -q -t 12 $src $W/e8.kvq --weights hyperquant:e8:4.0; echo "e8 $(el)"
  nice $B/kvq-convert -q -t 12 $src $W/bf16.kvq --weights none; echo "none $(el)"
  nice $B/kvq-convert -q -t 12 $src $W/e8q.kvq --weights hyperquant:e8:4.0 --quantize-embeddings; echo "e8q $(el)" ) > $L/conv.log 2>&1 &
t() { # name suite filter timeout [env]
  local n=$1 s=$2 f=$3 to=$4; shift 4
  env KVQ_TEST_FILTER="$f" "$@" timeout $to $B/$s > $L/$n.log 2>&1; echo "== $n rc $? $(el)"
  grep -hE '^\[ +(FAILED|PASSED) +\]|FAILED' $L/$n.log | head -6
}
t model test_cuda_model "*" 200
grep -h "split attention" $L/model.log | cut -c1-200
t hqx test_cuda_hqx "*" 120
tm=$W/tiny.kvq; $B/kvq-convert -q .cu/shared/models/kvq-tiny-llama $tm --weights hyperquant:e8:4.0 > $L/tiny_conv.log 2>&1
python3 -c "import struct,sys; sys.stdout.buffer.write(struct.pack('<100i', *[(i*37)%200+3 for i in range(100)]))" > $W/ids.bin
for b in kvq-run.old kvq-run; do
  $B/$b $tm --gpu --tokens $W/ids.bin --logits $W/lg_$b.bin > $L/lg_$b.log 2>&1; echo "logits $b rc $? $(md5sum < $W/lg_$b.bin | cut -c1-12)"
  $B/$b $tm --gpu -p "Once upon a time" -n 100 --temp 0 2>/dev/null | md5sum | cut -c1-12 | sed "s/^/tiny text $b /"
done
waitfor() { while ! grep -q "^$1 " $L/conv.log; do sleep 2; done; echo "$1 ready $(el)"; }
waitfor e8
prompt=$(head -c 560 .cu/shared/data/heldout-books.txt)
run() { # label binary model env...
  local l=$1 b=$2 m=$3; shift 3
  env "$@" timeout 120 $B/$b $m --gpu --ctx-max 1024 -p "$prompt" -n 256 --temp 0 > $L/run_$l.log 2>&1
  echo "$l: $(grep -ahE 'decode|rror' $L/run_$l.log | cut -c1-80) $(el)"
  grep -ah "att_stamps" $L/run_$l.log | cut -c1-420
}
run st_default kvq-run-st $W/e8.kvq

for r in 1 2 3; do run e8_old_r$r kvq-run.old $W/e8.kvq; run e8_new_r$r kvq-run $W/e8.kvq; done

run tl_new kvq-run $W/e8.kvq KVQ_CUDA_TIMELINE=1 KVQ_CUDA_PDL=0
grep -ahE "kvq cuda profile" $L/run_tl_new.log | head -12 | cut -c1-120
waitfor none
for r in 1 2; do run bf16_old_r$r kvq-run.old $W/bf16.kvq; run bf16_new_r$r kvq-run $W/bf16.kvq; done
waitfor e8q
for r in 1 2; do run e8q_old_r$r kvq-run.old $W/e8q.kvq; run e8q_new_r$r kvq-run $W/e8q.kvq; done
for f in $L/run_*.log; do echo "$(basename $f) text $(grep -av -E 'tok/s|MB|ms|att_stamps|profile' $f | md5sum | cut -c1-8)"; done
tar -C /tmp -czf $OUT/C_logs.tgz logsC
echo "== done $(el)"
