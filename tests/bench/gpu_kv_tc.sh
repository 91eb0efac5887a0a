#!/usr/bin/env bash
# Device call (issue 20: the tensor-core kernels of kernels/cuda/kv_attn_tc.cu for int:2/4 and
# kivi:2/4). Builds nothing: the binaries are built on the dev box and carried in .cu/ as
# tests/bench/gpu_tc_check.sh describes (.cu/bin needs build/tests/test_cuda_kv,
# build/bench/{cuda_kv_attn,cuda_hqx,make_synth_llama}, build/kvq-{run,convert}; .cu/lib the shared
# libraries). Runs test_cuda_kv (log in $OUT) and prints its tensor-core lines (worst NMSE per codec
# and variant), then the attention bench for the exact and tensor-core rows at 4k, 32k and 128k,
# PyTorch's SDPA in the same call (if torch imports), one Nsight Compute profile of each
# tensor-core kernel at 32k (if ncu is there), and kvq-run --gpu --kv int:4 / kivi:4 on the t128
# model with KVQ_CUDA_KV_TC=0, 1 and 2 (the runtime path; texts may differ by fp16 rounding).
# usage (on the device): bash tests/bench/gpu_kv_tc.sh
set -u
TESTS="test_cuda_kv" . tests/bench/gpu_env.sh # unpacks .cu, runs the suite, defines B and el
L=${OUT:-/tmp}
echo
grep -E '^\[ +(OK|FAILED|SKIPPED|ERROR) +\] test_' $L/test_cuda_kv.log | sort -u
grep -E 'tensor-core fragment emulation|tc scores|tc p·V' $L/test_cuda_kv.log | head -8
echo "worst NMSE per codec and path (test_attend_tc; tc=0 the exact kernel):"
grep -E 'test_cuda_kv: attend (int|kivi):[24] +T' $L/test_cuda_kv.log |
  sed -E 's/.*attend ([a-z]+:[24]) +T +[0-9]+ chunk +[0-9]+ (tensor cores|exact kernel) ([0-9]): NMSE vs CPU decode-then-attend ([0-9.e+-]+).*/\1 \3 \4/' |
  awk '{k=$1" tc="$2; if (!(k in w) || $3+0 > w[k]) w[k]=$3+0} END {for (k in w) printf "  %s: %.2e\n", k, w[k]}' | sort
grep -E 'tensor cores\), window' $L/test_cuda_kv.log | awk '{print $NF}' | sort -g | tail -1 | sed 's/^/worst tensor-core NMSE with a window: /'
grep -hE 'Error|error|FAIL' $L/test_cuda_kv.log | head -8
echo "== tests done $(el)"
ONLY="int:4,int:2,int:4 tc,int:2 tc,int:4 tc2,int:2 tc2,kivi:4,kivi:2,kivi:4 tc,kivi:2 tc,kivi:4 tc2,kivi:2 tc2"
CUDA_KV_ONLY="$ONLY" timeout 400 $B/cuda_kv_attn 4096 32768 131072 2>&1 | grep -v '^| encoder\|^|---|---|---|$\|µs per appended' | head -80
echo "== bench done $(el)"
python3 -c 'import torch' 2>/dev/null && timeout 300 python3 tests/bench/cuda_kv_sdpa.py 4096 32768 131072
echo "== sdpa done $(el)"
if command -v ncu >/dev/null; then
  for r in "int:4 tc" "int:2 tc" "kivi:4 tc"; do
    echo "ncu: $r at 32k"
    CUDA_KV_ONLY="$r" timeout 200 ncu --kernel-name-base mangled -k regex:attn_tc --launch-count 1 --section SpeedOfLight \
      --section Occupancy --section WarpStateStats --section MemoryWorkloadAnalysis $B/cuda_kv_attn 32768 2>&1 |
      grep -E 'attn_tc|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Achieved Occupancy|Registers|Stall|Warp Cycles' | head -16
  done
fi
echo "== ncu done $(el)"
T=/tmp/t128; [ -f $T/config.json ] || $B/make_synth_llama t128 $T tests/models/kvq-tiny-llama >/dev/null 2>&1 || echo "synth t128 failed"
[ -f $T.kvq ] || $B/kvq-convert -q -t 16 $T $T.kvq --weights hyperquant:e8:4.0 >/dev/null 2>&1 || echo "convert t128 failed"
for kv in int:4 kivi:4 "int:2 --kv-window 16"; do
  for tc in 0 1 2; do
    out=$(KVQ_CUDA_KV_TC=$tc timeout 60 $B/kvq-run $T.kvq --gpu --ctx-max 512 -p "Once upon a time there was a little" -n 20 --temp 0 --kv $kv 2>&1 >/tmp/text.txt)
    echo "KVQ_CUDA_KV_TC=$tc kvq-run --gpu --kv $kv: rc $? $(echo "$out" | grep -E 'decode|error|cannot' | tr -s ' ' | tr '\n' ' ' | cut -c1-160) text md5 $(md5sum < /tmp/text.txt | cut -c1-12)"
  done
done
echo "== done $(el)"
