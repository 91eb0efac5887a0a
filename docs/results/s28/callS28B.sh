#!/usr/bin/env bash
# Session 28 call B: the lean one-token product with the row's step count known at compile time (hqx_gemv1s_k's SC = 4
# for rows of 4096 columns: q/k/v, o, gate/up on the 8B shape) and the fold's part found once a block. Bundle: OLD=main's
# build/kvq-run (86349c1) BINS="kvq-run kvq-convert make_synth_llama test_cuda_hqx test_cuda_model" MODELS=1
# bash tests/bench/gpu_bundle.sh. (1) the suites (same bits: compare() mode 10 and the fold test's case 6 against the run-time
# count; the knob's refusal in test_cuda_model); (2) kvq-tiny-llama's logits and text equal to main's; (3) Nsight Compute
# on the four lean launches of one step of a 2-layer 8B-shaped model, main and new (instructions, duration);
# (4) the 8B E8 4.0 decode: main, new, new with KVQ_CUDA_G1SC=0, alternated 3 times.
set -u
# (the Nsight Compute block written inline when it ran; since folded into gpu_env.sh's gpu_2layer and gpu_ncu_lean, the
# same commands)
TESTS= . tests/bench/gpu_env.sh
W=/tmp/w8; L=/tmp/logsB; mkdir -p $W $L
gpu_convert8b e8="--weights hyperquant:e8:4.0"
gpu_suite hqx test_cuda_hqx "*" 200
grep -E "int8/rs|fold case 1 .*fold 1 offset 0" $L/hqx.log | head -8 | cut -c1-160
gpu_suite model test_cuda_model "*" 300
gpu_tiny old kvq-run.old; gpu_tiny new kvq-run; gpu_tiny new_nosc kvq-run KVQ_CUDA_G1SC=0
gpu_pack B_logs
gpu_2layer
for b in old new; do gpu_ncu_lean $b $([ $b = old ] && echo kvq-run.old || echo kvq-run); done
gpu_pack B_logs
gpu_wait e8
for i in 1 2 3; do
  gpu_decode old_$i kvq-run.old $W/e8.kvq; gpu_decode new_$i kvq-run $W/e8.kvq; gpu_decode nosc_$i kvq-run $W/e8.kvq KVQ_CUDA_G1SC=0
done
for f in $L/run_*.log; do echo "$(basename $f) text $(grep -av -E 'tok/s|MB|ms' $f | md5sum | cut -c1-8)"; done
gpu_pack B_logs
echo "== done $(el)"
