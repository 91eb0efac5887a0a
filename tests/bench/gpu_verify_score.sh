#!/usr/bin/env bash
# Device call (issue 12, session 16, helper i12v): kvq-verify --gpu scoring on the host (the
# logits downloaded, KVQ_VERIFY_DEVICE_SCORE=0) against on the device (=1, the default with
# --gpu), on kvq-small-llama converted with --weights hyperquant:e8:4.0: wall time of each
# (`/usr/bin/time`) and the KLD / ppl lines, which must agree within docs/GPU.md's tolerance
# (KLD mean 1e-12 relative, ppl 1e-6). Then tests/test_cuda_verify (the kernel against the host,
# a tiny model's window, verify end to end, the kernel's time against one window's download).
# Carried by: MODELS=2 SMALL=kvq-small-llama BINS="kvq-convert kvq-verify" bash tests/bench/gpu_bundle.sh build/tests/test_cuda_verify
# usage (on the device): [CTX=512] [TEXT_BYTES=200000] [VMODEL=kvq-tiny-llama (carried by MODELS=1)] bash tests/bench/gpu_verify_score.sh
set -u
TESTS= . tests/bench/gpu_env.sh
O=${OUT:-/tmp}; W=/tmp/vsc; mkdir -p $W
m=${VMODEL:-kvq-small-llama}; src=$KVQ_SHARED/models/$m
[ -f $src/config.json ] || [ ! -f $KVQ_SHARED/$m.tar.xz ] || tar -C $KVQ_SHARED -xJf $KVQ_SHARED/$m.tar.xz
head -c ${TEXT_BYTES:-200000} $KVQ_SHARED/data/heldout-books.txt > $W/text.txt
if [ -f $src/config.json ]; then
  $B/kvq-convert -q -t 16 $src $W/e8.kvq --weights hyperquant:e8:4.0 > $O/convert.txt 2>&1 || echo "convert failed (rc $?)"
  for s in 0 1; do
    KVQ_VERIFY_DEVICE_SCORE=$s /usr/bin/time -f "score=$s wall %e s user %U s" $B/kvq-verify $W/e8.kvq --source $src \
      --text $W/text.txt --ctx ${CTX:-512} -t 16 --gpu > $O/verify.score$s.txt 2> $O/verify.score$s.err
    echo "== score=$s rc $? $(tail -1 $O/verify.score$s.err) $(el)"
    grep -E 'ppl|KLD|top-1' $O/verify.score$s.txt | head -6
  done
else
  echo "$m: not carried ($src)"
fi
timeout ${SUITE_TIMEOUT:-300} $B/test_cuda_verify > $O/test_cuda_verify.log 2>&1; echo "== test_cuda_verify rc $? $(el)"
grep -E '^  |PASSED|FAILED' $O/test_cuda_verify.log | head -20
