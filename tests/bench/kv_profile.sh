#!/usr/bin/env bash
# Where decode time goes in the KV-codec cache, by perf samples (CPU time, so time-slicing on a
# shared machine does not enter): for each --kv spec and each of two kvq-run binaries, one
# 400-token greedy decode at 1 thread under `perf record`, and the share of samples in the KV
# cache's functions (encode, decode, score, value sums, softmax, the code kernels) against the
# share in the weights' products (hqx_row_*: the same work per token in both binaries). Prints
# KV/weights for each binary and their ratio (new/old: < 1 = less KV work per token).
# usage: tests/bench/kv_profile.sh FILE.kvq OLD_KVQ_RUN NEW_KVQ_RUN [SPEC ...]   (needs perf)
set -euo pipefail
file=${1:?usage: kv_profile.sh FILE.kvq OLD_KVQ_RUN NEW_KVQ_RUN [SPEC ...]}
old=${2:?}
new=${3:?}
shift 3
specs=${*:-int:4 kivi:2 octopus:4 octopus:3 turboquant:4 turboquant-prod:4 qturbo:4 hqmq:s96:r4 hqkv:e8:3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# symbols of the KV cache path (libconv/kv, kernels/cpu/kvcodes.c and attention.c, the f16
# conversions and libm exp the softmax calls)
kv='^(kvc_|kvq_kv|kvq_codes|kvq_attention|slot_|ring_|int_|kivi|hq_|hk_|oct_|turbo_|bn_|kvq_hqmq|kvq_oct|kvq_quat|kvq_nearest|kvq_lattice|kvq_br|kvq_bw|kvq_rice|kvq_f16_to_f32|kvq_f32_to_f16|kvq_fast_expf|unpack_|axpy_|dot_|lut_|fdot_|faxpy_|probs_|rows_plain|rows_avx512|code_at|__expf|__ieee754_exp|exp@|__fmaxf|expf)'

share() { # perf data -> "kv% weights%"
  perf report -i "$1" --no-children --stdio --sort symbol 2>/dev/null | grep -v '^#' |
    awk -v re="$kv" '$1 ~ /%$/ {p = $1 + 0; s = $3; if (s ~ re) k += p; if (s ~ /^hqx_row/) w += p} END {printf "%.1f %.1f\n", k, w}'
}

echo "| KV cache | old: KV % / weights % | new: KV % / weights % | KV work per token new/old |"
echo "|---|---|---|---|"
for spec in $specs; do
  for b in old new; do
    bin=$old; [ $b = new ] && bin=$new
    perf record -q -o "$tmp/$b.data" -- "$bin" "$file" --kv "$spec" -p "The old house stood on the hill above the village" \
      -n 400 -t 1 --temp 0 >/dev/null 2>&1
    read -r k w < <(share "$tmp/$b.data")
    eval "k_$b=$k w_$b=$w"
  done
  echo "| $spec | $k_old / $w_old | $k_new / $w_new | $(awk -v a="$k_new" -v b="$w_new" -v c="$k_old" -v d="$w_old" 'BEGIN {printf "%.2f", (a / b) / (c / d)}') |"
done
