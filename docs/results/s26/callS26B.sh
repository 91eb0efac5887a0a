#!/usr/bin/env bash
# session 26 call B (H200): branch s26-tail — the split attention's merging tail by warps (a head each, o's tile
# prepared from registers; KVQ_CUDA_ATTN_TAIL bit 1) and the tail's parameters read into the constant cache at the
# start (bit 2); default 3. kvq-run.old: main's binary (24b5dbe). test_cuda_model (its compare() runs tail modes 0-2
# against 3 bit for bit; t1k E8 4.0 is the shape where the warp tail runs), the tiny model's logits/text per mode, the
# stamped build per mode, the 8B decode alternated: old, new (3), new 0, new 1; our bf16; lm_head packed old/new.
set -u
TESTS= . tests/bench/gpu_env.sh
[ -d .cu/shared/models/kvq-tiny-llama ] || cp -r tests/models/kvq-tiny-llama .cu/shared/models/ # the same files (the 64 MiB limit)
L=/tmp/logsB; mkdir -p $L
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
( $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1; echo "synth $(el)"
  nice $B/kvq-convert -q -t 12 $src $W/e8.kvq --weights hyperquant:e8:4.0; echo "e8 $(el)"
  nice $B/kvq-convert -q -t 12 $src $W/bf16.kvq --weights none; echo "none $(el)"
  nice $B/kvq-convert -q -t 12 $src $W/e8q.kvq --weights hyperquant:e8:4.0 --quantize-embeddings; echo "e8q $(el)" ) > $L/conv.log 2>&1 &
gpu_suite model test_cuda_model "*" 240
grep -h "split attention\|t1k\|tail 0-2" $L/model.log | cut -c1-250 | head -20
tm=$W/tiny.kvq; $B/kvq-convert -q .cu/shared/models/kvq-tiny-llama $tm --weights hyperquant:e8:4.0 > $L/tiny_conv.log 2>&1
python3 -c "import struct,sys; sys.stdout.buffer.write(struct.pack('<100i', *[(i*37)%200+3 for i in range(100)]))" > $W/ids.bin
tiny() { # label binary env...
  local l=$1 b=$2; shift 2
  env "$@" $B/$b $tm --gpu --tokens $W/ids.bin --logits $W/lg_$l.bin > $L/lg_$l.log 2>&1
  echo "tiny $l: logits rc $? $(md5sum < $W/lg_$l.bin | cut -c1-12) text $(env "$@" $B/$b $tm --gpu -p "Once upon a time" -n 100 --temp 0 2>/dev/null | md5sum | cut -c1-12)"
}
tiny old kvq-run.old; tiny new kvq-run; tiny t0 kvq-run KVQ_CUDA_ATTN_TAIL=0
gpu_wait e8
for m in 3 0 1 2; do
  gpu_decode st_t$m kvq-run-st $W/e8.kvq KVQ_CUDA_ATTN_TAIL=$m; grep -ah "att_stamps" $L/run_st_t$m.log | cut -c1-420
done
for r in 1 2 3; do
  gpu_decode e8_old_r$r kvq-run.old $W/e8.kvq
  gpu_decode e8_new_r$r kvq-run $W/e8.kvq
  gpu_decode e8_t0_r$r kvq-run $W/e8.kvq KVQ_CUDA_ATTN_TAIL=0
  gpu_decode e8_t1_r$r kvq-run $W/e8.kvq KVQ_CUDA_ATTN_TAIL=1
done
gpu_decode tl_new kvq-run $W/e8.kvq KVQ_CUDA_TIMELINE=1 KVQ_CUDA_PDL=0
grep -ahE "kvq cuda profile" $L/run_tl_new.log | head -12 | cut -c1-120
gpu_wait none
gpu_decode bf16_new_r1 kvq-run $W/bf16.kvq; gpu_decode bf16_old_r1 kvq-run.old $W/bf16.kvq; gpu_decode bf16_new_r2 kvq-run $W/bf16.kvq
gpu_wait e8q
for r in 1 2; do gpu_decode e8q_old_r$r kvq-run.old $W/e8q.kvq; gpu_decode e8q_new_r$r kvq-run $W/e8q.kvq; done
for f in $L/run_*.log; do echo "$(basename $f) text $(grep -av -E 'tok/s|MB|ms|att_stamps|profile' $f | md5sum | cut -c1-8)"; done
tar -C /tmp -czf $OUT/B_logs.tgz logsB
echo "== done $(el)"
