#!/usr/bin/env bash
# session 26 call A (H200): branch s26-cand (main 91d8536 + s25-next + i12p-split) against main's kvq-run (24b5dbe) as
# kvq-run.old. First the suites: test_cuda_model's split attention with the head shapes not yet run on a device (8, 3
# and 6 query heads a KV head), the one-token inputs in registers (KVQ_CUDA_AIN_REG, fused-input check 4 variants);
# test_cuda_hqx's test_split (KVQ_CUDA_G1SPLIT). Then kvq-tiny-llama's logits and text old/new for each switch (same
# bits expected), the stamped build (inputs phase with AIN_REG 1 / 0), the 8B decode alternated: old, new (defaults),
# new AIN_REG=0, new G1SPLIT=1, new G1SPLIT=2; our bf16 new/old/new. Logs in $OUT/A_logs.tgz.
set -u
TESTS= . tests/bench/gpu_env.sh
[ -d .cu/shared/models/kvq-tiny-llama ] || cp -r tests/models/kvq-tiny-llama .cu/shared/models/ # the same files (the 64 MiB limit)
L=/tmp/logsA; mkdir -p $L
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
( $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1; echo "synth $(el)"
  nice $B/kvq-convert -q -t 12 $src $W/e8.kvq --weights hyperquant:e8:4.0; echo "e8 $(el)"
  nice $B/kvq-convert -q -t 12 $src $W/bf16.kvq --weights none; echo "none $(el)" ) > $L/conv.log 2>&1 &
gpu_suite model test_cuda_model "*" 200
grep -h "split attention\|fused input\|ain" $L/model.log | cut -c1-200 | head -20
gpu_suite hqx test_cuda_hqx "*" 150
grep -h "split" $L/hqx.log | cut -c1-200 | head -10
tm=$W/tiny.kvq; $B/kvq-convert -q .cu/shared/models/kvq-tiny-llama $tm --weights hyperquant:e8:4.0 > $L/tiny_conv.log 2>&1
python3 -c "import struct,sys; sys.stdout.buffer.write(struct.pack('<100i', *[(i*37)%200+3 for i in range(100)]))" > $W/ids.bin
tiny() { # label binary env...
  local l=$1 b=$2; shift 2
  env "$@" $B/$b $tm --gpu --tokens $W/ids.bin --logits $W/lg_$l.bin > $L/lg_$l.log 2>&1
  echo "tiny $l: logits rc $? $(md5sum < $W/lg_$l.bin | cut -c1-12) text $(env "$@" $B/$b $tm --gpu -p "Once upon a time" -n 100 --temp 0 2>/dev/null | md5sum | cut -c1-12)"
}
tiny old kvq-run.old; tiny new kvq-run; tiny ain0 kvq-run KVQ_CUDA_AIN_REG=0; tiny split1 kvq-run KVQ_CUDA_G1SPLIT=1
tiny split2 kvq-run KVQ_CUDA_G1SPLIT=2
gpu_wait e8
gpu_decode st_ain1 kvq-run-st $W/e8.kvq; grep -ah "att_stamps" $L/run_st_ain1.log | cut -c1-420
gpu_decode st_ain0 kvq-run-st $W/e8.kvq KVQ_CUDA_AIN_REG=0; grep -ah "att_stamps" $L/run_st_ain0.log | cut -c1-420
for r in 1 2 3; do
  gpu_decode e8_old_r$r kvq-run.old $W/e8.kvq
  gpu_decode e8_new_r$r kvq-run $W/e8.kvq
  gpu_decode e8_ain0_r$r kvq-run $W/e8.kvq KVQ_CUDA_AIN_REG=0
  gpu_decode e8_split1_r$r kvq-run $W/e8.kvq KVQ_CUDA_G1SPLIT=1
  gpu_decode e8_split2_r$r kvq-run $W/e8.kvq KVQ_CUDA_G1SPLIT=2
done
gpu_decode tl_new kvq-run $W/e8.kvq KVQ_CUDA_TIMELINE=1 KVQ_CUDA_PDL=0
grep -ahE "kvq cuda profile" $L/run_tl_new.log | head -12 | cut -c1-120
gpu_wait none
gpu_decode bf16_new_r1 kvq-run $W/bf16.kvq; gpu_decode bf16_old_r1 kvq-run.old $W/bf16.kvq; gpu_decode bf16_new_r2 kvq-run $W/bf16.kvq
for f in $L/run_*.log; do echo "$(basename $f) text $(grep -av -E 'tok/s|MB|ms|att_stamps|profile' $f | md5sum | cut -c1-8)"; done
tar -C /tmp -czf $OUT/A_logs.tgz logsA
echo "== done $(el)"
