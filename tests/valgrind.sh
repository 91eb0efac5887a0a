#!/usr/bin/env bash
# `make valgrind`: the CLI smoke tests under valgrind memcheck — the demo's commands on the
# bundled model (convert with HyperQuant-E8 weights and an OCTOPUS KV cache, inspect, verify
# against the source with --record, generate a few tokens) and a few refusals (error paths are
# where leaks hide). Any memory error, or any definitely-lost block, fails the step
# (--error-exitcode). Third-party reports only may be suppressed, in tests/valgrind.supp, each
# with the reason. Minutes, not seconds (valgrind runs ~30x slower): not part of `make test`.
set -eu
build=${1:-build}
command -v valgrind >/dev/null || { echo "kvq: make valgrind needs valgrind (Debian: apt-get install valgrind)" >&2; exit 1; }
model=tests/models/kvq-tiny-llama
text=tests/data/heldout-sample.txt
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# One OpenMP thread (valgrind serializes threads anyway). kvq-run re-executes itself through
# /proc/self/exe to set libgomp's wait policy unless GOMP_SPINCOUNT or OMP_WAIT_POLICY is set;
# under valgrind that path is valgrind's own tool binary, so the variable is set here.
export OMP_NUM_THREADS=1 GOMP_SPINCOUNT=30000
vg=(valgrind --tool=memcheck --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite
    --show-leak-kinds=definite --suppressions=tests/valgrind.supp --quiet)
fails=0 n=0
# step WANT CMD...: runs CMD under valgrind; WANT is the tool's own expected exit code (0, or 2 for
# a refusal). Exit 99 is valgrind's: a memory error or a leak.
step() {
  local want=$1
  shift
  local t0=$SECONDS rc=0
  "${vg[@]}" "$@" > "$tmp/out" 2> "$tmp/err" || rc=$?
  n=$((n + 1))
  if [ "$rc" -eq "$want" ]; then
    echo "ok    ($((SECONDS - t0)) s) $*"
  else
    fails=$((fails + 1))
    echo "FAIL  ($((SECONDS - t0)) s, exit $rc, want $want) $*"
    sed 's/^/      /' "$tmp/err" | tail -40
  fi
}
step 0 "$build/kvq-convert" -q --weights hyperquant:e8:4.0 --kv octopus:4 -t 1 "$model" "$tmp/m.kvq"
step 0 "$build/kvq-inspect" "$tmp/m.kvq"
step 0 "$build/kvq-inspect" --json "$tmp/m.kvq"
step 0 "$build/kvq-verify" -q "$tmp/m.kvq" --source "$model" --text "$text" --windows 1 --ctx 64 -t 1 --record
step 0 "$build/kvq-verify" -q "$tmp/m.kvq" --no-source
step 0 "$build/kvq-run" "$tmp/m.kvq" -p "It was a dark and stormy night" -n 8 --temp 0 -t 1
step 0 "$build/kvq-run" "$tmp/m.kvq" -p "Once" -n 4 --temp 0.8 --seed 3 -t 1
step 2 "$build/kvq-inspect" tests/data/bad/garbage.kvq
step 2 "$build/kvq-inspect" tests/data/bad/zip-overlap-members.kvq
step 2 "$build/kvq-run" "$tmp/m.kvq" -p hi -n abc
step 2 "$build/kvq-convert" tests/data/bad/l2c-size-mismatch.bin "$tmp/x.kvq"
cp -r tests/fixtures/st/sharded_ok "$tmp/ck" && cp tests/data/bad/tokenizer-bad-regex.json "$tmp/ck/tokenizer.json"
step 2 "$build/kvq-convert" "$tmp/ck" "$tmp/x.kvq"
echo "valgrind: $n steps, $fails failed"
[ "$fails" -eq 0 ]
