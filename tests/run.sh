#!/usr/bin/env bash
# Runs every cmocka suite in BUILD/tests from the repository root and prints one
# closing tally over all suites. A suite that crashes counts as failed.
set -u
build=${1:-build}
pattern=${2:-test_*} # a subset of the suites (make test-cuda: test_cuda_*)
pass=0; fail=0; skip=0; failed=""
for t in "$build"/tests/$pattern; do
  [ -x "$t" ] || continue
  log=$(mktemp)
  "$t" >"$log" 2>&1; rc=$?
  cat "$log"
  p=$(grep -E '^\[  PASSED  \] [0-9]+ test' "$log" | awk '{print $4}' | tail -1)
  f=$(grep -E '^\[  FAILED  \] [0-9]+ test' "$log" | awk '{print $4}' | tail -1)
  s=$(grep -E '^\[  SKIPPED \] [0-9]+ test' "$log" | awk '{print $4}' | tail -1)
  pass=$((pass + ${p:-0})); fail=$((fail + ${f:-0})); skip=$((skip + ${s:-0}))
  if [ $rc -ne 0 ] && [ -z "$f" ]; then fail=$((fail + 1)); fi
  [ $rc -ne 0 ] && failed="$failed $(basename "$t")"
  rm -f "$log"
done
[ -n "$failed" ] && echo "failed suites:$failed"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ] && [ -z "$failed" ]
