#!/usr/bin/env bash
# llama.cpp as the outside peer for the CPU runtime benchmarks: fetches its source from the
# llama-cpp-python sdist on PyPI (vendor/llama.cpp), builds llama-bench / llama-quantize,
# converts an HF checkpoint with its convert_hf_to_gguf.py (torch, transformers, gguf in a
# private venv) to bf16 and Q4_K_M, and runs llama-bench (-p 512 -n 128 -r 3) at the given
# thread counts. Everything is cached under $KVQ_PEER_DIR (default ~/.cache/kvq-peer).
# Our byte-level BPE tokenizers use the Llama-3 regex but their hash is unknown to the
# converter, so the cached copy of conversion/base.py takes the pre-tokenizer name from
# KVQ_PRE_TOKENIZER (set to llama-bpe here) when the hash is not recognized.
# usage: tests/bench/llamacpp_peer.sh MODEL_DIR [THREADS ...]     (default threads: 1 2)
set -euo pipefail
model=$(realpath "${1:?usage: llamacpp_peer.sh MODEL_DIR [THREADS ...]}")
shift || true
threads=${*:-1 2}
peer=${KVQ_PEER_DIR:-$HOME/.cache/kvq-peer}
ver=0.3.36
src=$peer/llama_cpp_python-$ver/vendor/llama.cpp
mkdir -p "$peer"

if [ ! -d "$src" ]; then
  pip download --no-deps --no-binary :all: "llama-cpp-python==$ver" -d "$peer" >&2
  tar xzf "$peer/llama_cpp_python-$ver.tar.gz" -C "$peer"
fi
if ! grep -q KVQ_PRE_TOKENIZER "$src/conversion/base.py"; then
  python3 - "$src/conversion/base.py" <<'EOF'
import sys
p = sys.argv[1]; s = open(p).read()
anchor = "        if res is None:\n            logger.warning(\"\\n\")"
assert anchor in s, "llamacpp_peer.sh: pre-tokenizer hook not found in conversion/base.py"
s = s.replace(anchor, "        if res is None and __import__('os').environ.get('KVQ_PRE_TOKENIZER'):\n"
                      "            res = __import__('os').environ['KVQ_PRE_TOKENIZER']\n" + anchor, 1)
open(p, "w").write(s)
EOF
fi
if [ ! -x "$src/build/bin/llama-bench" ] || [ ! -x "$src/build/bin/llama-quantize" ]; then
  cmake -S "$src" -B "$src/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF >&2
  cmake --build "$src/build" -j"$(nproc)" --target llama-bench llama-quantize >&2
fi
venv=$peer/venv
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import torch, transformers, gguf" 2>/dev/null; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --no-deps torch >&2       # the converter only needs torch's CPU tensors
  # PyPI's torch is a CUDA build: it imports only with these libraries present (the system CUDA
  # toolkit has the others); versions as torch's own metadata pins them.
  meta=$("$venv/bin/python" -c "import importlib.metadata as m; print('\n'.join(m.requires('torch') or []))")
  pins=$(echo "$meta" | grep -oE '^nvidia-(cusparselt|nvshmem|nccl)-cu[0-9]+==[0-9.]+' || true)
  "$venv/bin/pip" install --no-deps $pins nvidia-cufile >&2
  "$venv/bin/pip" install numpy safetensors sentencepiece transformers tokenizers protobuf sympy networkx jinja2 fsspec filelock typing_extensions >&2
  "$venv/bin/pip" install -e "$src/gguf-py" >&2
fi

name=$(basename "$model")
bf16=$peer/$name-bf16.gguf
q4=$peer/$name-Q4_K_M.gguf
if [ ! -s "$bf16" ]; then
  KVQ_PRE_TOKENIZER=llama-bpe "$venv/bin/python" "$src/convert_hf_to_gguf.py" "$model" --outtype bf16 --outfile "$bf16" >&2
fi
[ -s "$q4" ] || "$src/build/bin/llama-quantize" "$bf16" "$q4" Q4_K_M >&2

echo "| file | MB | threads | prefill tok/s (pp512) | decode tok/s (tg128) |"
echo "|---|---|---|---|---|"
for f in "$bf16" "$q4"; do
  mb=$(python3 -c "import os,sys; print(f'{os.path.getsize(sys.argv[1])/1e6:.1f}')" "$f")
  for t in $threads; do
    "$src/build/bin/llama-bench" -m "$f" -p 512 -n 128 -t "$t" -r 3 -o json 2>/dev/null | python3 -c "
import json,sys
r=json.load(sys.stdin); pp=[x for x in r if x['n_prompt']>0][0]['avg_ts']; tg=[x for x in r if x['n_gen']>0][0]['avg_ts']
print(f'| {sys.argv[1]} | {sys.argv[2]} | {sys.argv[3]} | {pp:.1f} | {tg:.1f} |')" "$(basename "$f")" "$mb" "$t"
  done
done
