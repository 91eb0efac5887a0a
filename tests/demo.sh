#!/usr/bin/env bash
# `make demo`: converts the bundled kvq-tiny-llama into a .kvq in the build dir,
# inspects it, and verifies and runs it when build/kvq-verify / build/kvq-run exist
# (they come from later issues; their absence is reported, not an error).
set -eu
build=${1:-build}
model=tests/models/kvq-tiny-llama
out="$build/demo/kvq-tiny-llama.kvq"
mkdir -p "$build/demo"
echo "== kvq-convert $model -> $out"
"$build/kvq-convert" -q "$model" "$out"
echo
echo "== kvq-inspect $out"
"$build/kvq-inspect" "$out"
if [ -x "$build/kvq-verify" ]; then
  echo; echo "== kvq-verify $out"
  "$build/kvq-verify" "$out"
else
  echo; echo "(kvq-verify not built yet: skipping verification)"
fi
if [ -x "$build/kvq-run" ]; then
  echo; echo "== kvq-run $out"
  "$build/kvq-run" "$out" "Once upon a time"
else
  echo "(kvq-run not built yet: skipping generation)"
fi
