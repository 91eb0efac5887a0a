#!/usr/bin/env bash
# Device call (issue 20, 2026-11-27): the merge of the split-K decode attention fused into the last
# split launch (the last block per (sequence, KV head) merges; KVQ_CUDA_KV_FUSE_MERGE=1, the default)
# against the separate attn_merge launch (=0), beside PyTorch SDPA bf16 in the same call; then the
# chunk count at short contexts (KVQ_CUDA_KV_WAVES). Builds nothing: the binaries are built on the
# dev box and carried in .cu/ (gpu_bundle.sh; .cu/pack.tar.xz = the libraries, as for the other
# device scripts). Steps (logs in $OUT):
#  1. test_cuda_kv: test_merge_emulated (the protocol, host), test_attend_fused (fused vs two launches
#     bit for bit, every codec, tensor cores and pipelined, windows, chunks, waves; and vs the CPU),
#     test_step_graph (captured steps, fused graph vs separate-merge direct launches at 300 positions);
#     EXTRA_TESTS=1 adds test_attend_vs_cpu and test_attend_tc (the default path — now fused — vs the CPU);
#  2. cuda_kv_attn with CUDA_KV_FUSE_AB=1 (each row fused and two-launch, same caches), batch 1 and 8,
#     T_kv 4k 16k 32k 128k: bf16, int/KIVI on tensor cores (default variants, and 4 pipelined stages),
#     the exact int/KIVI kernels, and the other codecs;
#  3. cuda_kv_sdpa.py at the same T_kv and batches (if torch imports);
#  4. a summary table: graph ms fused / two launches / SDPA, and both × SDPA;
#  5. waves of chunks at 4k and 16k, batch 1 (KVQ_CUDA_KV_WAVES 0.5, 1, 2, 4; fused and two-launch);
#  optional: MODEL_TESTS=1 test_cuda_model test_kv_graphs (the runtime's codec steps with graphs vs
#  without, now fused; bundle with MODELS=1 and "test_cuda_model make_synth_llama" in BINS), NCU=1 Nsight Compute of int:4 tc2 at 4k fused (the merge in the split kernel's tail) and not.
# A device command may run 10 minutes: two calls, e.g. (1) BATCHES=1 SKIP_WAVES=1 (tests, batch 1,
# SDPA: expected ~5 min; worst case 240·3 + 240 + 120 s) and (2) SKIP_TESTS=1 BATCHES=8 (batch 8,
# SDPA, waves: expected ~4 min; worst 240 + 120 + 45·4 s).
# usage (dev box): BINS="test_cuda_kv cuda_kv_attn cuda_hqx" bash tests/bench/gpu_bundle.sh
#        (device, one call, carry [".cu"]): bash tests/bench/gpu_kv_fuse_ab.sh
#        [TS="4096 32768"] [BATCHES="1"] [SKIP_TESTS=1] [SKIP_WAVES=1] [MODEL_TESTS=1] [NCU=1]
set -u
TESTS= . tests/bench/gpu_env.sh # unpacks .cu, prints the GPU and its copy bandwidth, defines B and el
L=${OUT:-/tmp}
Ts=${TS:-4096 16384 32768 131072}
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  for f in test_merge_emulated test_attend_fused test_step_graph ${EXTRA_TESTS:+test_attend_vs_cpu test_attend_tc}; do
    KVQ_TEST_FILTER="$f" timeout ${TEST_S:-240} $B/test_cuda_kv > "$L/test_cuda_kv.$f.log" 2>&1; echo "== test_cuda_kv $f rc $? $(el)"
    grep -E '^\[ +(OK|FAILED|SKIPPED|ERROR) +\] test_|^\[  (PASSED|FAILED) ' "$L/test_cuda_kv.$f.log" | sort -u
  done
  grep -hE 'fused merge( protocol)?:|DIFFERS|FAIL' $L/test_cuda_kv.test_*.log | head -20
  grep -hE 'step graph .*merge' $L/test_cuda_kv.test_step_graph.log | head -40
  if [ "${MODEL_TESTS:-0}" = 1 ] && [ -x $B/test_cuda_model ]; then # the runtime's KV codec steps, now fused (needs MODELS=1 in the bundle)
    KVQ_TEST_FILTER="test_kv_graphs" timeout ${TEST_S:-240} $B/test_cuda_model > "$L/test_cuda_model.test_kv_graphs.log" 2>&1
    echo "== test_cuda_model test_kv_graphs rc $? $(el)"; grep -E '^\[ +(OK|FAILED|SKIPPED) +\] test_|^\[  (PASSED|FAILED) ' "$L/test_cuda_model.test_kv_graphs.log" | sort -u
  fi
  echo "== tests done $(el)"
fi
# CUDA_KV_ONLY matches by substring: "int:4 tc2" also selects "int:4 tc" and "int:4" (the exact kernel)
ONLY="int:4 tc2,int:2 tc,kivi:4 tc2,kivi:2 tc,int:4 pipe4,int:2 pipe4,kivi:4 pipe4,kivi:2 pipe4,turboquant:4,turboquant:2,qturbo:4,turboquant-prod:4,octopus:4,octopus:2:qjl,hqmq:s96:r4,hqkv:e8:4,hqkv:e8:2:dither"
: > $L/fuse_ab.txt
for b in ${BATCHES:-1 8}; do
  CUDA_KV_FUSE_AB=1 CUDA_KV_BATCH=$b CUDA_KV_ONLY="$ONLY" CUDA_KV_ENC_ONLY=0 timeout ${BENCH_S:-240} $B/cuda_kv_attn $Ts 2>&1 |
    grep -v '^| encoder\|^|---|---|---|$\|^| [a-z:0-9-]* | [0-9.e+]* | [0-9.]* |$' | tee -a $L/fuse_ab.txt
  echo "== bench batch $b done $(el)"
done
: > $L/sdpa.txt
python3 -c 'import torch' 2>/dev/null && SDPA_BATCH=$(echo ${BATCHES:-1 8} | tr ' ' ',') timeout ${SDPA_S:-120} python3 tests/bench/cuda_kv_sdpa.py $Ts | tee $L/sdpa.txt
echo "== sdpa done $(el)"
echo
echo "Summary (ms per call in a CUDA graph; × SDPA = ours / SDPA bf16 in a graph, same call; goals at 32k/128k: 4-bit ≤ 0.35, 2-bit ≤ 0.25; at 4k ≤ 1):"
echo "| T_kv | batch | cache | fused | two launches | fused / two | SDPA | fused × SDPA | two × SDPA |"
echo "|---|---|---|---|---|---|---|---|---|"
awk -F'|' 'FILENAME == ARGV[1] { if (NF == 9 && $2 ~ /^ *[0-9]+k *$/) { gsub(/ /, "", $2); gsub(/ /, "", $3); s[$2 "," $3] = $5 + 0 }; next }
  NF == 15 && $2 ~ /^ *[0-9]+k *$/ { t = $2; b = $3; gsub(/ /, "", t); gsub(/ /, "", b); k = t "," b; f = $6 + 0; w = $8 + 0
    sd = (k in s) ? s[k] : 0
    printf "| %s | %s |%s| %.4f | %.4f | %.2f | %s | %s | %s |\n", t, b, $4, f, w, f / w, sd ? sprintf("%.4f", sd) : "-",
      sd ? sprintf("%.2f", f / sd) : "-", sd ? sprintf("%.2f", w / sd) : "-" }' $L/sdpa.txt $L/fuse_ab.txt
if [ "${SKIP_WAVES:-0}" != 1 ]; then
  echo
  echo "Waves of chunks (KVQ_CUDA_KV_WAVES; the automatic chunk's blocks per (sequence, KV head) = waves × resident blocks / pairs), batch 1:"
  for wv in 0.5 1 2 4; do
    echo "waves $wv:"
    KVQ_CUDA_KV_WAVES=$wv CUDA_KV_FUSE_AB=1 CUDA_KV_BATCH=1 CUDA_KV_ONLY="int:4 tc2,int:2 tc,kivi:4 tc2,kivi:2 tc,turboquant:4" timeout ${WAVES_S:-45} \
      $B/cuda_kv_attn ${WAVES_TS:-4096 16384} 2>&1 | grep -E '^\| [0-9]+k \|'
  done
  echo "== waves done $(el)"
fi
if [ "${NCU:-0}" = 1 ] && command -v ncu >/dev/null; then
  # the split kernel's duration with the merge in its tail, against the split + attn_merge pair
  # (mangled: attn_tc<KIND 2 = int, B 4, TS 1, PF 2, ST 0> = int:4 tc2)
  for fm in 1 0; do
    echo "ncu: int:4 tc2 at 4k, KVQ_CUDA_KV_FUSE_MERGE=$fm"
    KVQ_CUDA_KV_FUSE_MERGE=$fm CUDA_KV_BATCH=1 CUDA_KV_ONLY="int:4 tc2" timeout ${NCU_S:-60} ncu --kernel-name-base mangled \
      -k "regex:attn_tcILi2ELi4ELi1ELi2ELi0E|attn_merge" --launch-skip 8 --launch-count 2 --section SpeedOfLight --section LaunchStats \
      $B/cuda_kv_attn 4096 2>&1 | grep -E 'attn_tc|attn_merge|Duration|DRAM Throughput|Grid Size' | head -12
  done
fi
echo "== done $(el)"
