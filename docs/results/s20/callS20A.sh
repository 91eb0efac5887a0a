#!/usr/bin/env bash
# session 20 call A (main 932e8fb): the suites not yet run there (test_split_*, test_cuda_model whole with the bad-env
# refusals, test_esc_prefetch with ESC_PF=2) while the 8B shape converts; then the 8B decode at width 4 alternated over
# escape modes (gpu_w4_next.sh's runs); then Nsight Compute's full set with the SASS source page on one model attention
# block and one q/k/v product of the 8B decode (where the short-context attend's 10 µs go).
set -u
TESTS= . tests/bench/gpu_env.sh
L=$OUT
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
( $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1; nice $B/kvq-convert -q -t 12 $src $W/e8.kvq --weights hyperquant:e8:4.0; echo "conv rc $? $(el)" ) > $L/conv.log 2>&1 &
CP=$!
t() { # name suite filter timeout [env]
  local n=$1 s=$2 f=$3 to=$4; shift 4
  env KVQ_TEST_FILTER="$f" "$@" timeout $to $B/$s > $L/$n.log 2>&1; echo "== $n rc $? $(el)"
  grep -hE '^\[ +(FAILED|PASSED) +\]|FAILED' $L/$n.log | head -6
}
( t split test_cuda_model "test_split_*" 150
  t esc test_cuda_hqx "test_esc_prefetch" 120; grep -hE 'same bits|DIFFER' $L/esc.log | cut -c1-200 | head -8 ) > $L/s1.sum 2>&1 &
S1=$!
( t model test_cuda_model "*" 330 ) > $L/s2.sum 2>&1 &
S2=$!
wait $S1 $S2; cat $L/s1.sum $L/s2.sum
wait $CP; cat $L/conv.log
prompt=$(head -c 560 .cu/shared/data/heldout-books.txt)
run() { # label env...
  local l=$1; shift
  env "$@" timeout 100 $B/kvq-run $W/e8.kvq --gpu --ctx-max 1024 -p "$prompt" -n 256 --temp 0 > $L/run_$l.log 2>&1
  echo "$l: $(grep -hE 'decode' $L/run_$l.log | cut -c1-110) | $(grep -hoE 'weights [0-9.]+ MB' $L/run_$l.log | head -1)"
}
for r in 1 2; do
  run "auto_r$r"
  run "w4_r$r" KVQ_HQX_WIDTH=4
  run "w4pf2_r$r" KVQ_HQX_WIDTH=4 KVQ_CUDA_ESC_PF=2
  run "w4g1p3_r$r" KVQ_HQX_WIDTH=4 KVQ_CUDA_G1P=3
done
echo "== decode A/B done $(el)"
N=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
if [ $(( $(date +%s) - t0 )) -lt 470 ]; then
  timeout 110 $N -k regex:attend_split_k -s 9600 -c 1 --set full -o $L/att $B/kvq-run $W/e8.kvq --gpu --ctx-max 1024 -p "${prompt:0:40}" -n 400 --temp 0 > $L/ncu_att.log 2>&1
  echo "== ncu attend rc $? $(el)"
  $N --import $L/att.ncu-rep --page details > $L/att_details.txt 2>&1
  $N --import $L/att.ncu-rep --page source --csv --print-source sass > $L/att_sass.csv 2>&1
  grep -E "Duration|DRAM Through|Registers|Achieved Occ|Theoretical Occ|Warp Cycles Per Issued|Block Size|Grid Size" $L/att_details.txt | head -12
  ls -la $L/att_sass.csv
fi
echo "== done $(el)"
