#!/usr/bin/env bash
# Packs what a device call runs (issues 12/20) into .cu/ (gitignored, carried by the device
# tool): the tools, the GPU suites and benchmarks as .cu/bin.tar.xz (xz: the 64 MiB transfer
# limit), KEEP=1 adds the previous bundle's kvq-run as kvq-run.old (A/B against the last
# binaries), and a slice of ../shared as .cu/shared (the texts, the two small models the
# suites read, with MODELS=1; MODELS=2 the two small ones, xz'd). The libraries (.cu/pack.tar.xz) are made once (ldd of the tools, dpkg -x).
# usage: [KEEP=1] bash tests/bench/gpu_bundle.sh [extra binaries...]
set -eu
export XZ_OPT=${XZ_OPT:--9e} # one dictionary over all the binaries: they share most kernels (42 -> 20 MB for five tools, session 16)
make -j2 all build/tests/test_cuda_hqx build/tests/test_cuda_model build/tests/test_cuda_kv build/tests/test_cuda_pq \
  build/bench/cuda_hqx build/bench/make_synth_llama build/bench/cuda_kv_attn build/bench/cuda_pq >/dev/null
mkdir -p .cu
rm -rf .cu/bin .cu/old && mkdir -p .cu/bin
if [ "${KEEP:-0}" = 1 ] && [ -f .cu/bin.tar.xz ]; then
  mkdir -p .cu/old && tar -C .cu/old -xJf .cu/bin.tar.xz bin/kvq-run && cp .cu/old/bin/kvq-run .cu/bin/kvq-run.old && rm -rf .cu/old
fi
# BINS: a subset (the 64 MiB limit: each tool carries every kernel), e.g. "kvq-run kvq-convert"
all="build/kvq-run build/kvq-convert build/kvq-verify build/kvq-inspect build/tests/test_cuda_hqx build/tests/test_cuda_model
  build/tests/test_cuda_kv build/tests/test_cuda_pq build/bench/cuda_hqx build/bench/make_synth_llama build/bench/cuda_kv_attn
  build/bench/cuda_pq build/tests/test_cuda_verify build/tests/test_cuda_hq"
sel=""
for f in $all; do
  if [ -z "${BINS:-}" ] || [[ " $BINS " == *" $(basename $f) "* ]]; then sel="$sel $f"; fi
done
cp $sel "$@" .cu/bin/
[ -n "${OLD:-}" ] && cp "$OLD" .cu/bin/kvq-run.old # OLD=path: a baseline kvq-run (e.g. built from the last commit)
strip -s .cu/bin/* 2>/dev/null || true # symbols are not needed on the device
# largest first: the tools that carry every kernel side by side, each within xz's 64 MiB window of the one before
# (in name order kvq-run and test_cuda_model were 90 MB apart: 36 MB compressed instead of 21, session 18)
(cd .cu && tar -cJf bin.tar.xz $(ls -S bin/*)) && rm -rf .cu/bin
sh=../shared; rm -rf .cu/shared && mkdir -p .cu/shared/data
cp $sh/data/heldout-books.txt $sh/data/tinystories-valid-sample.txt .cu/shared/data/
if [ "${MODELS:-0}" = 1 ]; then mkdir -p .cu/shared/models && cp -r $sh/models/kvq-tiny-llama $sh/models/stories260K .cu/shared/models/; fi
# MODELS=2: kvq-tiny-llama and the small models SMALL (default "kvq-small-llama kvq-small-qwen3"), each as
# .cu/shared/<name>.tar.xz (xz -6: ~36 MB each, measured; both with the binaries exceed the 64 MiB a call
# carries: one model a call, with BINS="kvq-convert kvq-verify"), for tests/bench/gpu_kv_verify_shared.sh
# (which unpacks them)
if [ "${MODELS:-0}" = 2 ]; then
  mkdir -p .cu/shared/models && cp -r $sh/models/kvq-tiny-llama .cu/shared/models/
  for m in ${SMALL:-kvq-small-llama kvq-small-qwen3}; do tar -C $sh -cJf .cu/shared/$m.tar.xz models/$m; done
fi
[ -f .cu/pack.tar.xz ] || echo "gpu_bundle: .cu/pack.tar.xz (the libraries) is missing: make it from ldd .cu/bin/kvq-run" >&2
du -sh .cu/* | sed 's/^/gpu_bundle: /'
