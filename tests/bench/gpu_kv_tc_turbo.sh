#!/usr/bin/env bash
# Device call (issue 20, session 14): TurboQuant / qturbo at 2 and 4 bits on the tensor-core kernel
# (kernels/cuda/kv_attn_tc.cu, KIND TURBO; kvq_gkv_set_tc_turbo / KVQ_CUDA_KV_TC_TURBO=1). Builds
# nothing: binaries from tests/bench/gpu_bundle.sh (BINS="cuda_kv_attn test_cuda_kv cuda_hqx
# make_synth_llama kvq-run kvq-convert"). Runs test_cuda_kv (log in $OUT; test_attend_tc_turbo is the
# new device test) and prints its TurboQuant tensor-core lines (worst NMSE per codec and run), then the
# attention bench for the fp32 and tensor-core TurboQuant rows beside int:4 tc2 / int:2 tc and bf16 at
# 4k, 32k, 128k (batch 1) and 32k batch 8, PyTorch's SDPA in the same call (if torch imports), Nsight
# Compute on turboquant:4 tc2 and turboquant:2 tc at 32k (if ncu is there), and kvq-run --gpu --kv
# turboquant:4 / qturbo:2 on the t128 model with KVQ_CUDA_KV_TC_TURBO=0 and 1 (texts may differ by fp16
# rounding).
# usage (on the device): bash tests/bench/gpu_kv_tc_turbo.sh
set -u
TESTS="test_cuda_kv" . tests/bench/gpu_env.sh # unpacks .cu, runs the suite, defines B and el
L=${OUT:-/tmp}
echo
grep -E '^\[ +(OK|FAILED|SKIPPED|ERROR) +\] test_' $L/test_cuda_kv.log | sort -u
grep -E 'TurboQuant tensor-core emulation|TurboQuant / qturbo tensor cores|tq dq|tq scores|tq p·V|DIFFERS' $L/test_cuda_kv.log | head -12
echo "worst NMSE per codec and run (test_attend_tc_turbo; tc 0 = the fp32 kernel):"
grep -E 'test_cuda_kv: attend (turboquant|qturbo):[24] +T' $L/test_cuda_kv.log |
  sed -E 's/.*attend ([a-z]+:[24]) +T +[0-9]+ chunk +[0-9]+ tc ([0-9]) pipe ([0-9]) fuse ([0-9]): NMSE vs CPU decode-then-attend ([0-9.e+-]+).*/\1 tc\2.pipe\3.fuse\4 \5/' |
  awk '{k=$1" "$2; if (!(k in w) || $3+0 > w[k]) w[k]=$3+0} END {for (k in w) printf "  %s: %.2e\n", k, w[k]}' | sort
grep -E 'step graph (turboquant|qturbo)' $L/test_cuda_kv.log | head -4
grep -hE 'Error|error|FAIL' $L/test_cuda_kv.log | head -8
echo "== tests done $(el)"
ONLY="int:4 tc2,int:2 tc,turboquant:4,turboquant:2,qturbo:4,qturbo:2,turboquant:4 tc,turboquant:4 tc2,turboquant:2 tc,turboquant:2 tc2,qturbo:4 tc,qturbo:4 tc2,qturbo:2 tc,qturbo:2 tc2,turboquant:4 pipe3,turboquant:4 pipe4,turboquant:2 pipe4"
CUDA_KV_BATCH=1 CUDA_KV_ONLY="$ONLY" timeout 300 $B/cuda_kv_attn 4096 32768 131072 2>&1 | grep -E '^\| (4k|32k|128k) ' | head -80
CUDA_KV_BATCH=8 CUDA_KV_ONLY="$ONLY" timeout 150 $B/cuda_kv_attn 32768 2>&1 | grep -E '^\| 32k ' | head -30
echo "== bench done $(el)"
python3 -c 'import torch' 2>/dev/null && SDPA_BATCH=1 timeout 100 python3 tests/bench/cuda_kv_sdpa.py 4096 32768 131072 && SDPA_BATCH=8 timeout 60 python3 tests/bench/cuda_kv_sdpa.py 32768
echo "== sdpa done $(el)"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ]; then
  for r in "turboquant:4 tc2" "turboquant:2 tc"; do
    echo "ncu: $r at 32k"
    CUDA_KV_NO_BASE=1 CUDA_KV_BATCH=1 CUDA_KV_ONLY="$r" timeout 150 $NCU --clock-control none -k regex:attn_tc --launch-count 1 --section SpeedOfLight \
      --section Occupancy --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis $B/cuda_kv_attn 32768 2>&1 |
      grep -E 'attn_tc|Duration|DRAM Throughput|Compute \(SM\) Throughput|Achieved Occupancy|Registers Per Thread|Issue Slots Busy|Warp Cycles Per Issued|No Eligible' | head -12
  done
fi
echo "== ncu done $(el)"
T=/tmp/t128; [ -f $T/config.json ] || $B/make_synth_llama t128 $T tests/models/kvq-tiny-llama >/dev/null 2>&1 || echo "synth t128 failed"
[ -f $T.kvq ] || $B/kvq-convert -q -t 16 $T $T.kvq --weights hyperquant:e8:4.0 >/dev/null 2>&1 || echo "convert t128 failed"
for kv in turboquant:4 "qturbo:2 --kv-window 16"; do
  for on in 0 1; do
    out=$(KVQ_CUDA_KV_TC_TURBO=$on timeout 60 $B/kvq-run $T.kvq --gpu --ctx-max 512 -p "Once upon a time there was a little" -n 20 --temp 0 --kv $kv 2>&1 >/tmp/text.txt)
    echo "KVQ_CUDA_KV_TC_TURBO=$on kvq-run --gpu --kv $kv: rc $? $(echo "$out" | grep -E 'decode|error|cannot' | tr -s ' ' | tr '\n' ' ' | cut -c1-160) text md5 $(md5sum < /tmp/text.txt | cut -c1-12)"
  done
done
echo "== done $(el)"
