#!/usr/bin/env bash
# kvq's budgeted conversions (allocated --target-bpw X and uniform HyperQuant at the same
# whole-model bits/param) beside llama.cpp's quantization mixes, all scored by ONE tool:
# llama.cpp's `llama-perplexity --kl-divergence` on the same text slice (ctx 512) against the
# same f32 GGUF of the source. kvq's files go through `kvq-convert --export-hf --export-dtype f32`
# and llama.cpp's convert_hf_to_gguf.py (--outtype f32). bits/param = file bytes × 8 / the
# source's parameter count (each tool's own file: .kvq or .gguf).
# Needs the llama.cpp build and venv that tests/bench/llamacpp_peer.sh caches under
# $KVQ_PEER_DIR (default ~/.cache/kvq-peer); builds its llama-perplexity target there if missing.
#   tests/bench/alloc_vs_llamacpp.sh BUILD MODEL "TEXT..." BYTES PRE_TOKENIZER "BUDGETS" "MIXES"
#   e.g. ... build ../shared/models/kvq-small-qwen3 ../shared/data/heldout-books.txt 100000 qwen2 \
#            "3.0 3.5 4.0 4.5" "Q2_K Q3_K_M Q4_K_M Q5_K_M Q6_K"
# TEXT may name several files (one quoted argument): every file is converted once and scored on
# the first BYTES bytes of each, one row per file and text.
# THREADS=N: llama-perplexity's -t (default 2); CALIB="--calib-tokens 128": extra kvq-convert
# options for the first (calibrating) budget; KEEP=DIR keeps every allocated file there
# (MODEL-aX.kvq) and scores a file found there instead of converting it again; KLD_BASE_DIR=DIR keeps llama-perplexity's base logits of each text there and
# reuses them (they are large: vocab × 2 bytes a token). To pin the whole run: taskset -c 1 nice -n 10 tests/bench/alloc_vs_llamacpp.sh ...
# FIRST=FILE.kvq: an allocated file of this model whose stored sensitivities every budget reuses
# (--calib-from; otherwise the first budget calibrates and the others reuse it).
# UNIFORM=0 skips the uniform rows; "" as BUDGETS or MIXES: none of them (left out: the defaults). One markdown row per file on stdout.
# tests/bench/alloc_vs_llamacpp_table.py turns the rows of one model's runs into docs/RESULTS.md's side-by-side table.
set -euo pipefail
build=$(realpath "${1:?usage: see the header}")
model=$(realpath "${2:?model}")
texts=${3:?text}
bytes=${4:-100000}
pre=${5:-llama-bpe}
budgets=${6-3.0 3.5 4.0 4.5}
mixes=${7-Q2_K Q3_K_M Q4_K_M Q5_K_M Q6_K}
peer=${KVQ_PEER_DIR:-$HOME/.cache/kvq-peer}
src=$(ls -d "$peer"/llama_cpp_python-*/vendor/llama.cpp 2>/dev/null | head -1)
py=$peer/venv/bin/python
if [ -z "$src" ] || [ ! -x "$src/build/bin/llama-quantize" ] || [ ! -x "$py" ]; then
  echo "alloc_vs_llamacpp.sh: no llama.cpp build / venv under $peer: run tests/bench/llamacpp_peer.sh first" >&2
  exit 2
fi
[ -x "$src/build/bin/llama-perplexity" ] || cmake --build "$src/build" -j2 --target llama-perplexity >&2
ppl=$src/build/bin/llama-perplexity
# Its extra CPU buffer types off (LLAMA_ARG_REPACK=0, i.e. --no-repack): on the Xeon (AMX) dev box
# of 2026-11-27 the native build's AMX matmul segfaults on every quantized mix; the plain ggml
# kernels score every file (KLD as on the AVX2 box before, within 0.0001).
export LLAMA_ARG_REPACK=${LLAMA_ARG_REPACK:-0}
name=$(basename "$model")
out=$(mktemp -d /tmp/kvq-avl-XXXXXX)
trap 'rm -rf "$out"' EXIT
threads=${THREADS:-2}
tnames=
for t in $texts; do
  tn=$(basename "$t" .txt)
  [ "$tn" != test ] || tn=$(basename "$(dirname "$t")")-test # wikitext-2/test.txt
  head -c "$bytes" "$(realpath "$t")" > "$out/$tn.txt"
  tnames="$tnames $tn"
done
params=$(python3 - "$model" <<'PY'
import json, os, struct, sys
d = sys.argv[1]; n = 0
for f in sorted(os.listdir(d)):
    if f.endswith(".safetensors"):
        with open(os.path.join(d, f), "rb") as fp:
            h = json.loads(fp.read(struct.unpack("<Q", fp.read(8))[0]))
        for k, v in h.items():
            if k != "__metadata__":
                p = 1
                for s in v["shape"]: p *= s
                n += p
print(n)
PY
)
tl=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]+'/tokenizer.json'))['model']['vocab'].__len__())" "$model")
# GGUF of an HF directory ($1) at f32 into $2 (the pre-tokenizer named, as our tokenizers' hash is unknown to it)
gguf() { KVQ_PRE_TOKENIZER=$pre "$py" "$src/convert_hf_to_gguf.py" "$1" --outtype f32 --outfile "$2" > "$out/conv.log" 2>&1 ||
           { tail -5 "$out/conv.log" >&2; return 1; }; }
f32=$peer/$name-f32.gguf
[ -s "$f32" ] || gguf "$model" "$f32"
kb_dir=${KLD_BASE_DIR:-$out}
for tn in $tnames; do
  base=$kb_dir/$name-$tn-$bytes.kld
  if [ ! -s "$base" ] || [ ! -s "$base.log" ]; then
    "$ppl" -m "$f32" -f "$out/$tn.txt" -c 512 -t "$threads" --kl-divergence-base "$base.tmp" > "$base.log" 2>&1 ||
      { tail -5 "$base.log" >&2; exit 1; }
    mv "$base.tmp" "$base"
  fi
  ln -sf "$base" "$out/$tn.kld"
  echo "<!-- $name: $params parameters, $tl tokenizer entries; text $tn first $bytes bytes; llama-perplexity base: $(grep -o 'Final estimate: PPL = [0-9.]*' "$base.log"); $(date -u +%H:%M) UTC -->"
done
echo "| model | text | tool / mix | bits/param | KLD | same top-1 | PPL ratio |"
echo "|---|---|---|---|---|---|---|"
score() { # $1 label, $2 gguf to score, $3 file whose size counts: one row per text
  for tn in $tnames; do
    "$ppl" -m "$2" -f "$out/$tn.txt" -c 512 -t "$threads" --kl-divergence-base "$out/$tn.kld" --kl-divergence > "$out/s.log" 2>&1 ||
      { tail -5 "$out/s.log" >&2; echo "| $name | $tn | $1 | - | failed | - | - |"; continue; }
    python3 - "$out/s.log" "$name" "$tn" "$1" "$3" "$params" <<'PY'
import os, re, sys
s = open(sys.argv[1], encoding="utf-8", errors="replace").read()
k = re.search(r"Mean\s+KLD:\s+([0-9.eE+-]+)\s+±\s+([0-9.eE+-]+)", s)
t = re.search(r"Same top p:\s+([0-9.]+)", s)
r = re.search(r"Mean PPL\(Q\)/PPL\(base\)\s+:\s+([0-9.]+)", s)
bpp = os.path.getsize(sys.argv[5]) * 8 / int(sys.argv[6])
print(f"| {sys.argv[2]} | {sys.argv[3]} | {sys.argv[4]} | {bpp:.3f} | {float(k.group(1)):.4f} ± {float(k.group(2)):.4f} | "
      f"{float(t.group(1)):.1f} % | {float(r.group(1)):.3f} |")
PY
  done
}
for mix in $mixes; do
  q=$peer/$name-$mix.gguf
  [ -s "$q" ] || "$src/build/bin/llama-quantize" "$f32" "$q" "$mix" > "$out/q.log" 2>&1 || { tail -3 "$out/q.log" >&2; continue; }
  score "llama.cpp $mix" "$q" "$q"
done
first=${FIRST:-}
kvq_row() { # $1 label, $2 .kvq
  rm -rf "$out/hf"
  "$build"/kvq-convert -q --export-hf "$out/hf" --export-dtype f32 "$2" > /dev/null
  gguf "$out/hf" "$out/k.gguf"
  score "$1" "$out/k.gguf" "$2"
}
for x in $budgets; do
  t0=$(date +%s)
  if [ -n "${KEEP:-}" ] && [ -s "$KEEP/$name-a$x.kvq" ]; then cp "$KEEP/$name-a$x.kvq" "$out/a.kvq" # kept earlier
  elif [ -n "$first" ]; then "$build"/kvq-convert -q --target-bpw "$x" --calib-from "$first" "$model" "$out/a.kvq"
  else "$build"/kvq-convert -q --target-bpw "$x" ${CALIB:-} "$model" "$out/a.kvq"; fi
  kb=$("$build"/kvq-inspect "$out/a.kvq" | sed -n 's/.*whole model \([0-9.]*\) bits\/param.*/\1/p' | head -1)
  echo "<!-- kvq --target-bpw $x: kvq-inspect whole model $kb bits/param (tensors only), file $(stat -c %s "$out/a.kvq") bytes, convert $(( $(date +%s) - t0 )) s wall -->"
  [ -n "$first" ] || { first=$out/first.kvq; cp "$out/a.kvq" "$first"; }
  [ -z "${KEEP:-}" ] || [ -s "$KEEP/$name-a$x.kvq" ] || cp "$out/a.kvq" "$KEEP/$name-a$x.kvq"
  kvq_row "kvq --target-bpw $x (allocated)" "$out/a.kvq"
  if [ "${UNIFORM:-1}" != 0 ]; then
    b=$("$build"/kvq-convert --dry-run --quantize-embeddings --weights "hyperquant:e8:$x" "$model" | sed -n 's/.*whole model \([0-9.]*\) bits\/param.*/\1/p')
    r=$(python3 -c "print(f'{2*$x - $b:.4f}')")
    "$build"/kvq-convert -q --quantize-embeddings --weights "hyperquant:e8:$r" "$model" "$out/u.kvq"
    kvq_row "kvq uniform hyperquant:e8:$r" "$out/u.kvq"
  fi
done
