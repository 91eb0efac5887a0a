#!/usr/bin/env bash
# Device call (issue 20): the cp.async-pipelined tensor-core kernels (kernels/cuda/kv_attn_tc.cu,
# KVQ_CUDA_KV_PIPE=3|4 stages) against the register-prefetch ones (tc = variant 1, tc2 = variant 2;
# the default is tc2 for 4-bit keys, tc for 2-bit), int:4, int:2, kivi:4, kivi:2, batch 1,
# T_kv 1k/4k/16k/32k, beside PyTorch SDPA bf16 in the same call. Builds nothing: the binaries are
# built on the dev box and carried in .cu/ (gpu_bundle.sh; .cu/pack.tar.xz = the libraries, as for
# the other device scripts). Steps (logs in $OUT):
#  1. test_cuda_kv, only test_attend_tc* (the register-prefetch kernels and the pipelined ones vs the
#     CPU's decode-then-attend; the pipelined outputs bit-equal to the default's) and test_step_graph
#     (captured decode steps, pipelined settings included);
#  2. cuda_kv_attn at batch 1, REPS passes (default 2, to see the run-to-run spread): bf16, the exact
#     kernels, tc, tc2, pipe3, pipe4 for each codec (ms one call / in a graph, % of copy bandwidth);
#  3. cuda_kv_sdpa.py at batch 1 (if torch imports);
#  4. NCU=1 (default, if ncu is there): Nsight Compute of int:4 tc2 and int:4 pipe4 at 32k (DRAM
#     throughput, occupancy, stalls: is the pipelined kernel still latency-bound?).
# Worst case (every step at its timeout) 110·2 + 60·2 + 60 + 30·2 s + unpacking: < 8 min; expected ~3 min.
# Ratios × SDPA are for the reader: ours (graph) / SDPA (graph) at the same T_kv.
# usage (dev box): BINS="test_cuda_kv cuda_kv_attn cuda_hqx" bash tests/bench/gpu_bundle.sh
#        (device, one call, carry [".cu"]): bash tests/bench/gpu_kv_pipe_ab.sh
set -u
TESTS= . tests/bench/gpu_env.sh # unpacks .cu, prints the GPU and its copy bandwidth, defines B and el
L=${OUT:-/tmp}
Ts=${TS:-1024 4096 16384 32768}
for f in "test_attend_tc*" test_step_graph; do
  KVQ_TEST_FILTER="$f" timeout ${TEST_S:-110} $B/test_cuda_kv > "$L/test_cuda_kv.${f%\*}.log" 2>&1; echo "== test_cuda_kv $f rc $? $(el)"
  grep -E '^\[ +(OK|FAILED|SKIPPED|ERROR) +\] test_|^\[  (PASSED|FAILED) ' "$L/test_cuda_kv.${f%\*}.log" | sort -u
done
grep -hE 'pipelined tensor-core kernels:|DIFFERS|step graph .*pipe' $L/test_cuda_kv.test_*.log | head -12
echo "worst NMSE per codec and path vs the CPU's decode-then-attend (limit 1e-4):"
grep -hE 'test_cuda_kv: attend (int|kivi):[24] +T' $L/test_cuda_kv.test_attend_tc.log |
  sed -E 's/.*attend ([a-z]+:[24]) +T +[0-9]+ chunk +[0-9]+ (tensor cores ([0-9])|exact kernel 0|pipelined ([0-9]) stages): NMSE vs CPU decode-then-attend ([0-9.e+-]+).*/\1 \2 \5/' |
  awk '{v=$NF+0; $NF=""; if (!($0 in w) || v > w[$0]) w[$0]=v} END {for (k in w) printf "  %s: %.2e\n", k, w[k]}' | sort
echo "== tests done $(el)"
ONLY="int:4 tc2,int:4 pipe3,int:4 pipe4,int:2 tc2,int:2 pipe3,int:2 pipe4,kivi:4 tc2,kivi:4 pipe3,kivi:4 pipe4,kivi:2 tc2,kivi:2 pipe3,kivi:2 pipe4"
for r in $(seq 1 ${REPS:-2}); do # CUDA_KV_ONLY matches by substring: "int:4 tc2" also selects "int:4 tc" and "int:4"
  echo "pass $r:"
  CUDA_KV_BATCH=1 CUDA_KV_ONLY="$ONLY" timeout ${BENCH_S:-60} $B/cuda_kv_attn $Ts 2>&1 | grep -v '^| encoder\|^|---|---|---|$\|^| [a-z:0-9]* | [0-9.e+]* | [0-9.]* |$'
  echo "== bench pass $r done $(el)"
done
python3 -c 'import torch' 2>/dev/null && SDPA_BATCH=1 timeout ${SDPA_S:-60} python3 tests/bench/cuda_kv_sdpa.py $Ts
echo "== sdpa done $(el)"
if [ "${NCU:-1}" = 1 ] && command -v ncu >/dev/null; then
  # mangled names: attn_tc<KIND 2 = int, B 4, TS 1, PF, ST> (variant 2 = PF 2, ST 0; pipe4 = PF 0, ST 4)
  for r in "int:4 tc2|attn_tcILi2ELi4ELi1ELi2ELi0E" "int:4 pipe4|attn_tcILi2ELi4ELi1ELi0ELi4E"; do
    echo "ncu: ${r%%|*} at 32k"
    CUDA_KV_BATCH=1 CUDA_KV_ONLY="${r%%|*}" timeout ${NCU_S:-30} ncu --kernel-name-base mangled -k "regex:${r##*|}" --launch-count 1 \
      --section SpeedOfLight --section Occupancy --section WarpStateStats --section LaunchStats $B/cuda_kv_attn 32768 2>&1 |
      grep -E 'attn_tc|Duration|DRAM Throughput|Compute \(SM\)|Achieved Occupancy|Registers Per|Shared Memory Config|Block Limit|Stall|Warp Cycles' | head -16
  done
fi
echo "== done $(el)"
