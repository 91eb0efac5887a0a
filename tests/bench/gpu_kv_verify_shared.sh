#!/usr/bin/env bash
# Device call (issue 20, session 15): kvq-verify with a stored KV codec, CPU against --gpu, on the
# shared models whose head shapes the GPU KV kernels now take: kvq-small-llama (head_dim 64, 8/2
# heads) and kvq-small-qwen3 (head_dim 128, 4/2 heads), carried by `MODELS=2 SMALL=<model>
# BINS="kvq-convert kvq-verify" bash tests/bench/gpu_bundle.sh` (one model a call: the 64 MiB limit)
# as .cu/shared/<model>.tar.xz, or unpacked under .cu/shared/models; a model not carried is reported. Each converted with `--weights
# hyperquant:e8:4.0 --kv SPEC`, then `kvq-verify F --source DIR --text T --ctx 256 -t 16 [--gpu]`,
# T = the first TEXT_BYTES (default 60000) bytes of heldout-books.txt. One line per (model, codec)
# with the kv and weights+kv rows' KLD on the CPU and the GPU into $OUT/kv_verify_shared.txt; the
# full outputs beside it. The issue's check: the GPU's KLD equals the CPU's within its stated
# standard error (the caches quantize what each backend computed: a code at a rounding boundary
# may flip, docs/RESULTS.md "KV codecs in the GPU runtime").
# usage (on the device): [MODELS_="kvq-small-llama kvq-small-qwen3"] [KVS="..."] [TEXT_BYTES=60000] bash tests/bench/gpu_kv_verify_shared.sh
set -u
TESTS= . tests/bench/gpu_env.sh
O=${OUT:-/tmp}; W=/tmp/kvs; mkdir -p $W
head -c ${TEXT_BYTES:-60000} $KVQ_SHARED/data/heldout-books.txt > $W/text.txt
kld() { # the KLD "x ± y" of row $2 in output file $1
  grep -E "^  $2 +ppl" "$1" | head -1 | sed -n 's/.*KLD \([0-9.]*\) ± \([0-9.]*\).*/\1 ± \2/p'
}
IFS=';' read -ra kvs <<< "${KVS:-int:4;kivi:2 --kv-window 16;turboquant:4;octopus:3;hqkv:e8:3:dither;hqmq:s96:r4}"
for m in ${MODELS_:-kvq-small-llama kvq-small-qwen3}; do
  src=$KVQ_SHARED/models/$m
  [ -f $src/config.json ] || [ ! -f $KVQ_SHARED/$m.tar.xz ] || tar -C $KVQ_SHARED -xJf $KVQ_SHARED/$m.tar.xz # MODELS=2 bundles
  [ -f $src/config.json ] || { echo "$m: not carried ($src; MODELS=2 SMALL=$m bash tests/bench/gpu_bundle.sh)" | tee -a $O/kv_verify_shared.txt; continue; }
  for kv in "${kvs[@]}"; do
    tag=$m-${kv%% *}; tag=${tag//:/-}; f=$W/$tag.kvq
    $B/kvq-convert -q -t 16 $src $f --weights hyperquant:e8:4.0 --kv $kv > $O/$tag.convert.txt 2>&1 || { echo "$m --kv $kv: convert failed" | tee -a $O/kv_verify_shared.txt; continue; }
    for dev in cpu gpu; do
      $B/kvq-verify $f --source $src --text $W/text.txt --ctx 256 -t 16 $([ $dev = gpu ] && echo --gpu) > $O/$tag.$dev.txt 2>&1
      echo "rc $?" >> $O/$tag.$dev.txt
    done
    line="$m --kv $kv: kv KLD cpu $(kld $O/$tag.cpu.txt kv) gpu $(kld $O/$tag.gpu.txt kv); weights+kv KLD cpu $(kld $O/$tag.cpu.txt 'weights\+kv') gpu $(kld $O/$tag.gpu.txt 'weights\+kv')"
    echo "$line" | tee -a $O/kv_verify_shared.txt
    grep -hE 'error|refused|cannot|unsupported' $O/$tag.gpu.txt | head -2 | sed "s/^/  $tag gpu: /"
    echo "== $tag $(el)"
  done
done
echo "== done $(el)"
