#!/usr/bin/env bash
# Session 28 call E (not merged: fewer instructions, no faster; the kernel change is docs/results/s28/sc14.patch): the down rows (14336 columns, 14 steps, outside the fold) with their step count at compile time too
# (hqx_gemv1s_k<..., SC = 14>, a compiler barrier after each pair: no spill), against main's 0e817b8 (SC = 4 only).
# Bundle: OLD=<0e817b8's build/kvq-run> BINS="kvq-run kvq-convert make_synth_llama test_cuda_hqx test_cuda_model" MODELS=1.
# (1) both suites (compare()'s new 14336-column width-5 case asserts the SC launch and the run-time count's bits);
# (2) kvq-tiny-llama, old and new; (3) Nsight Compute on one step's four lean launches (new); (4) the 8B E8 4.0 decode,
# old and new alternated 3 times.
set -u
# (the Nsight Compute block written inline when it ran; since folded into gpu_env.sh's gpu_2layer and gpu_ncu_lean, the
# same commands; its grep now also prints registers and cycles between issues)
TESTS= . tests/bench/gpu_env.sh
W=/tmp/w8; L=/tmp/logsE; mkdir -p $W $L
gpu_convert8b e8="--weights hyperquant:e8:4.0"
gpu_suite hqx test_cuda_hqx "*" 200
grep -E "int8/rs rows +[0-9]+ cols 14336" $L/hqx.log | head -2 | cut -c1-160
gpu_suite model test_cuda_model "*" 300
gpu_tiny old kvq-run.old; gpu_tiny new kvq-run
gpu_pack E_logs
gpu_2layer
gpu_ncu_lean new kvq-run
gpu_pack E_logs
gpu_wait e8
for i in 1 2 3; do gpu_decode old_$i kvq-run.old $W/e8.kvq; gpu_decode new_$i kvq-run $W/e8.kvq; done
for f in $L/run_*.log; do echo "$(basename $f) text $(grep -av -E 'tok/s|MB|ms' $f | md5sum | cut -c1-8)"; done
gpu_pack E_logs
echo "== done $(el)"
