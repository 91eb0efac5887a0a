#!/usr/bin/env bash
# Device call 1 (issue 12, tensor-core prefill): correctness suites, then 1B-shape prefill.
# Layout it expects (built here, carried to the device with `carry: [".cu"]`; .cu/ is ignored by git):
#   .cu/bin    stripped build/tests/test_cuda_{hq,hqx,kv,model}, build/kvq-{run,verify,convert},
#              build/bench/{make_synth_llama,cuda_hqx}
#   .cu/lib    the shared libraries `ldd` lists for them (no libc/libm/libdl/librt/libpthread)
#   .cu/shared ../shared/oracle, ../shared/models/stories260K, ../shared/data/heldout-books.txt
# usage (on the device): bash tests/bench/gpu_tc_check.sh
set -u
B=.cu/bin
export LD_LIBRARY_PATH=$PWD/.cu/lib
cb=$(ls /usr/local/cuda/lib64/libcublas.so.13 2>/dev/null || find / -xdev -name 'libcublas.so.13' 2>/dev/null | head -1)
echo "cublas: $cb"; [ -n "$cb" ] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$(dirname "$cb")
export KVQ_SHARED=$PWD/.cu/shared
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
t0=$(date +%s)
$B/cuda_hqx --copy-only 2>&1 | grep -i 'copy' | head -2
echo "== test_cuda_hqx"; timeout 240 $B/test_cuda_hqx > $OUT/hqx.log 2>&1; echo "rc $?"
grep -E 'tc |skipped|PASSED|FAILED' $OUT/hqx.log | sort | uniq -c | sort -rn | head -5
grep 'tc x37' $OUT/hqx.log | awk '{print $(NF-6)}' | sort -g | tail -1 | sed 's/^/worst tc rel err: /'
grep 'tc decoded' $OUT/hqx.log | awk '{print $NF}' | sort -g | tail -1 | sed 's/^/worst decoded row rel err: /'
grep -E 'FAILED|fail|Error' $OUT/hqx.log | head -5
echo "== test_cuda_model ($(( $(date +%s) - t0 )) s)"; timeout 300 $B/test_cuda_model > $OUT/model.log 2>&1; echo "rc $?"
grep -E 'tc/exact|PASSED|FAILED|fail' $OUT/model.log | sed 's/  */ /g' | cut -c1-260 | head -30
echo "== 1B shape ($(( $(date +%s) - t0 )) s)"
W=/tmp/w; mkdir -p $W
$B/make_synth_llama 1b $W/synth-1b tests/models/kvq-tiny-llama >/dev/null 2>&1 || echo synth failed
for s in hyperquant:e8:4.0 rtn:4:g128; do $B/kvq-convert -q -t 16 $W/synth-1b $W/1b-${s//:/-}.kvq --weights $s || echo "convert $s failed"; done
ls -la $W
echo "== prefill ($(( $(date +%s) - t0 )) s)"
REPS=3 bash tests/bench/gpu_prefill.sh $B .cu/shared/data/heldout-books.txt 8192 $W/synth-1b $W/1b-hyperquant-e8-4.0.kvq $W/1b-rtn-4-g128.kvq
echo "== profile E8 tc ($(( $(date +%s) - t0 )) s)"
KVQ_CUDA_PROFILE=1 $B/kvq-run $W/1b-hyperquant-e8-4.0.kvq --gpu --ppl .cu/shared/data/heldout-books.txt --ctx 512 --max-tokens 2048 2>&1 | grep -E 'profile|tokens/s' | sort -t'%' -k2 | tail -14
echo "== verify 1B 32 windows ($(( $(date +%s) - t0 )) s)"
for tc in 1 0; do
  s0=$(date +%s)
  KVQ_CUDA_TC=$tc $B/kvq-verify $W/1b-hyperquant-e8-4.0.kvq --source $W/synth-1b --text .cu/shared/data/heldout-books.txt --windows 32 --no-kv --gpu -q > $OUT/verify_tc$tc.txt 2>&1
  echo "tc=$tc rc $? wall $(( $(date +%s) - s0 )) s"; grep -iE 'kld|ppl' $OUT/verify_tc$tc.txt | head -4
done
echo "== done ($(( $(date +%s) - t0 )) s)"
