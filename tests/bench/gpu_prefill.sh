#!/usr/bin/env bash
# GPU prefill (issue 12): windows of 512 tokens through kvq-run --gpu --ppl, on the tensor-core
# products (gemm_tc.cu, hqx_tc.cu: cuBLAS bf16, fp32 accumulation) and on the CUDA-core kernels
# (KVQ_CUDA_TC=0), alternating, for each model: tokens/s and the perplexity each path gives
# (the same windows, so the two perplexities show what bf16 operands cost). Median of REPS runs.
# usage: tests/bench/gpu_prefill.sh BIN TEXT MAX_TOKENS MODEL...
#   BIN holds kvq-run (built here, carried over); MODEL: an HF directory or a .kvq.
set -u
B=$1; text=$2; maxt=$3; shift 3
reps=${REPS:-3}
echo "| model | products | tokens/s (median of $reps) | ppl |"
echo "|---|---|---|---|"
for m in "$@"; do
  for tc in 1 0; do
    rates=()
    for r in $(seq "$reps"); do
      out=$(KVQ_CUDA_TC=$tc "$B/kvq-run" "$m" --gpu --ppl "$text" --ctx 512 --max-tokens "$maxt" 2>&1)
      rates+=("$(echo "$out" | sed -n 's/.* \([0-9.]*\) tokens\/s.*/\1/p' | tail -1)")
      ppl=$(echo "$out" | sed -n 's/^ppl \([0-9.]*\) .*/\1/p')
      [ -n "$ppl" ] || { echo "$out" | tail -3; break; }
    done
    med=$(printf '%s\n' "${rates[@]}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    printf '| %s | %s | %s | %s |\n' "$(basename "$m")" "$([ $tc = 1 ] && echo 'tensor cores' || echo 'CUDA cores')" "$med" "${ppl:-?}"
  done
done
