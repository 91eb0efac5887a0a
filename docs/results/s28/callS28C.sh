#!/usr/bin/env bash
# Session 28 call C: call B's change with the non-fold run-time-count instances restored to main's SASS (call B's build
# had spilled in hqx_gemv1s_k<5,0,0,0>, the 8B's down rows: 15.3 -> 17.8 us) and the 14336-column hyperquant test case
# dropped (its RMSNorm rows exceeded compare_xin's 1e-6, and the failed test left the preparation mode set for the next).
# Bundle as call B (OLD = main's kvq-run, 86349c1). (1) both suites; (2) kvq-tiny-llama's logits/text, main and new;
# (3) Nsight Compute on one step's four lean launches of the 2-layer model (new); (4) the 8B decode: main, new,
# new with KVQ_CUDA_G1SC=0 alternated 3 times, our bf16 twice (the ratio's denominator, same call).
set -u
# (the Nsight Compute block written inline when it ran; since folded into gpu_env.sh's gpu_2layer and gpu_ncu_lean, the
# same commands; its grep now also prints registers and cycles between issues)
TESTS= . tests/bench/gpu_env.sh
W=/tmp/w8; L=/tmp/logsC; mkdir -p $W $L
gpu_convert8b e8="--weights hyperquant:e8:4.0" bf16="--weights none"
gpu_suite hqx test_cuda_hqx "*" 200
grep -E "int8/rs rows +[0-9]+ cols  4096" $L/hqx.log | head -4 | cut -c1-160
gpu_suite model test_cuda_model "*" 300
gpu_tiny old kvq-run.old; gpu_tiny new kvq-run; gpu_tiny new_nosc kvq-run KVQ_CUDA_G1SC=0
gpu_pack C_logs
gpu_2layer
gpu_ncu_lean new kvq-run
gpu_pack C_logs
gpu_wait e8
for i in 1 2 3; do
  gpu_decode old_$i kvq-run.old $W/e8.kvq; gpu_decode new_$i kvq-run $W/e8.kvq; gpu_decode nosc_$i kvq-run $W/e8.kvq KVQ_CUDA_G1SC=0
done
gpu_pack C_logs
gpu_wait bf16; gpu_decode bf16_1 kvq-run $W/bf16.kvq; gpu_decode new_4 kvq-run $W/e8.kvq; gpu_decode bf16_2 kvq-run $W/bf16.kvq
for f in $L/run_*.log; do echo "$(basename $f) text $(grep -av -E 'tok/s|MB|ms' $f | md5sum | cut -c1-8)"; done
gpu_pack C_logs
echo "== done $(el)"
