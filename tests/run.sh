#!/usr/bin/env bash
# Runs every cmocka suite in BUILD/tests from the repository root and prints one
# closing tally over all suites. A suite that crashes counts as failed.
#
# KVQ_TEST_JOBS suites at a time (default 2; 1: one after another). A suite's log is printed
# whole when it ends; the longest suites start first (measured: test_runtime is a third of the
# time under AddressSanitizer). The GPU suites (test_cuda_*) run one after another in one lane,
# so that they never share the device.
set -u
build=${1:-build}
pattern=${2:-test_*} # a subset of the suites (make test-cuda: test_cuda_*)
jobs=${KVQ_TEST_JOBS:-2}
case "$jobs" in '' | *[!0-9]* | 0) echo "tests/run.sh: KVQ_TEST_JOBS='$jobs': expected a count >= 1" >&2; exit 2 ;; esac
# OpenMP threads of suites side by side: they sleep at barriers instead of spinning (spinning,
# two suites on two cores took longer than one after another: 4 min 34 s against 3 min 41 s)
[ "$jobs" -gt 1 ] && export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

# the lanes: the heavy suites first (longest first), then the rest, the GPU suites together
heavy="test_runtime test_ldlq test_verify test_convert test_alloc test_numbers test_kvcache_codec"
lanes=()
cuda=""
for h in $heavy; do
  for t in "$build"/tests/$pattern; do [ "$(basename "$t")" = "$h" ] && [ -x "$t" ] && lanes+=("$t"); done
done
for t in "$build"/tests/$pattern; do
  [ -x "$t" ] || continue
  n=$(basename "$t")
  case " $heavy " in *" $n "*) continue ;; esac
  case "$n" in test_cuda_*) cuda="$cuda $t"; continue ;; esac
  lanes+=("$t")
done
[ -n "$cuda" ] && lanes=("${cuda# }" "${lanes[@]}")

# one lane: its suites in order, each log printed whole (under a lock) as it ends
lane() {
  for t in $1; do
    n=$(basename "$t")
    "$t" >"$dir/$n.log" 2>&1
    echo $? >"$dir/$n.rc"
    (flock 9; cat "$dir/$n.log") 9>"$dir/.lock"
  done
}
export -f lane
export dir
if [ ${#lanes[@]} -gt 0 ]; then
  printf '%s\0' "${lanes[@]}" | xargs -0 -n 1 -P "$jobs" bash -c 'lane "$1"' _
fi

pass=0; fail=0; skip=0; failed=""
for t in "$build"/tests/$pattern; do
  [ -x "$t" ] || continue
  n=$(basename "$t")
  log="$dir/$n.log"
  rc=$(cat "$dir/$n.rc" 2>/dev/null || echo 1)
  p=$(grep -E '^\[  PASSED  \] [0-9]+ test' "$log" 2>/dev/null | awk '{print $4}' | tail -1)
  f=$(grep -E '^\[  FAILED  \] [0-9]+ test' "$log" 2>/dev/null | awk '{print $4}' | tail -1)
  s=$(grep -E '^\[  SKIPPED \] [0-9]+ test' "$log" 2>/dev/null | awk '{print $4}' | tail -1)
  pass=$((pass + ${p:-0})); fail=$((fail + ${f:-0})); skip=$((skip + ${s:-0}))
  if [ "$rc" -ne 0 ] && [ -z "$f" ]; then fail=$((fail + 1)); fi
  [ "$rc" -ne 0 ] && failed="$failed $n"
done
[ -n "$failed" ] && echo "failed suites:$failed"
echo "$pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ] && [ -z "$failed" ]
