#!/usr/bin/env bash
# Fails when an #include crosses a layer the wrong way. Dependencies run one way:
#   formats ← kernels ← quant, tokenizer ← codec ← kv ← runtime ← eval, convert ← verify
# A file may include headers of its own layer or of a strictly lower one; layers of equal
# rank (quant/tokenizer, eval/convert) may not include each other. tools/ and tests/ sit on
# top and may include anything. Run from the repository root (make test does).
set -u
rank() {
  case "$1" in
    formats/*) echo 0 ;;
    kernels/*) echo 1 ;;
    libconv/quant/*|libconv/tokenizer/*) echo 2 ;;
    libconv/codec/*) echo 3 ;;
    libconv/kv/*) echo 4 ;;
    libconv/runtime/*) echo 5 ;;
    libconv/eval/*|libconv/convert/*) echo 6 ;;
    libconv/verify/*) echo 7 ;;
    *) echo -1 ;;
  esac
}
# The layer's name: its folder below libconv/, or formats / kernels.
layer() { case "$1" in libconv/*) echo "$1" | cut -d/ -f1-2 ;; *) echo "$1" | cut -d/ -f1 ;; esac; }

bad=0; n=0
while IFS= read -r f; do
  rf=$(rank "$f")
  if [ "$rf" -lt 0 ]; then
    echo "check_layers: $f: file outside every layer (libconv/ holds code only in its subsystem folders)"
    bad=1; continue
  fi
  while IFS= read -r inc; do
    n=$((n + 1))
    ri=$(rank "$inc")
    if [ "$ri" -lt 0 ]; then
      echo "check_layers: $f includes \"$inc\", which is in no layer"; bad=1
    elif [ "$(layer "$inc")" != "$(layer "$f")" ] && [ "$ri" -ge "$rf" ]; then
      echo "check_layers: $f (layer $(layer "$f")) includes \"$inc\" (layer $(layer "$inc")): wrong direction"; bad=1
    fi
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" | grep -E '^(formats|kernels|libconv|tools|tests)/')
done < <(find formats kernels libconv -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | sort)

if [ "$bad" -ne 0 ]; then echo "check_layers: FAILED"; exit 1; fi
echo "check_layers: $n project includes follow the layer order"
