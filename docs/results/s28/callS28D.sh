#!/usr/bin/env bash
# Session 28 call D: call C's build plus the RMSNorm's unaligned-row sum in the aligned path's order (row_rinv,
# row_rinv_wide: a row one float past 16-byte alignment had its 1/rms summed lane-strided, so its bits could differ from
# the same row aligned — call C's fold case 3, offset 1, seeds moved by the new case 1). (1) both suites; (2)
# kvq-tiny-llama's logits/text, main and new; (3) the 8B E8 4.0 decode, main and new alternated twice.
set -u
TESTS= . tests/bench/gpu_env.sh
W=/tmp/w8; L=/tmp/logsD; mkdir -p $W $L
gpu_convert8b e8="--weights hyperquant:e8:4.0"
gpu_suite hqx test_cuda_hqx "*" 200
grep -E "fold case 3 .*offset 1" $L/hqx.log | head -2 | cut -c1-170
gpu_suite model test_cuda_model "*" 300
gpu_tiny old kvq-run.old; gpu_tiny new kvq-run
gpu_pack D_logs
gpu_wait e8
for i in 1 2; do gpu_decode old_$i kvq-run.old $W/e8.kvq; gpu_decode new_$i kvq-run $W/e8.kvq; done
for f in $L/run_*.log; do echo "$(basename $f) text $(grep -av -E 'tok/s|MB|ms' $f | md5sum | cut -c1-8)"; done
gpu_pack D_logs
echo "== done $(el)"
