# Sourced by the device scripts (gpu_ab_decode.sh, gpu_8b_spec.sh): unpacks the carried binaries
# (.cu/bin.tar.xz, compressed for the 64 MiB transfer limit) and libraries, sets the library
# path (cuBLAS from the device's CUDA), prints the GPU and its copy bandwidth, then runs the GPU
# suites named in TESTS (default test_cuda_hqx test_cuda_model test_cuda_pq; logs in $OUT; each at most SUITE_TIMEOUT
# seconds, default 300; KVQ_TEST_FILTER narrows them, e.g. "*shape*"). Defines B and el, and the helpers every call
# script wrote again (sessions 20-25): gpu_suite, gpu_wait, gpu_decode, gpu_batch, gpu_pack,
# gpu_convert8b, gpu_tiny, gpu_2layer, gpu_ncu_lean (below; logs in $L, files in $W).
B=.cu/bin
[ -d $B ] || tar -C .cu -xJf .cu/bin.tar.xz
[ -d .cu/lib ] || tar -C .cu -xJf .cu/pack.tar.xz
export LD_LIBRARY_PATH=$PWD/.cu/lib
cb=$(ls /usr/local/cuda/lib64/libcublas.so.13 2>/dev/null | head -1); [ -n "$cb" ] && export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$(dirname "$cb")
export KVQ_SHARED=$PWD/.cu/shared KVQ_SYNTH=$PWD/$B/make_synth_llama
t0=$(date +%s); el() { echo "($(( $(date +%s) - t0 )) s)"; }
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
bw=$($B/cuda_hqx --copy-only 2>&1 | sed -n 's/.*copy bandwidth \([0-9.]*\) GB\/s.*/\1/p' | head -1); echo "copy bandwidth $bw GB/s"
for t in ${TESTS-test_cuda_hqx test_cuda_model test_cuda_pq}; do
  timeout ${SUITE_TIMEOUT:-300} $B/$t > ${OUT:-/tmp}/$t.log 2>&1; echo "== $t rc $? $(el)"
  grep -E '^\[  (PASSED|FAILED) |FAILED' ${OUT:-/tmp}/$t.log | head -6
done
# gpu_suite NAME SUITE FILTER TIMEOUT [VAR=value ...]: one GPU suite into $L/NAME.log, its rc and verdict lines.
gpu_suite() {
  local n=$1 s=$2 f=$3 to=$4; shift 4
  env KVQ_TEST_FILTER="$f" "$@" timeout $to $B/$s > $L/$n.log 2>&1; echo "== $n rc $? $(el)"
  grep -hE '^\[ +(FAILED|PASSED) +\]|FAILED' $L/$n.log | head -6
}
# gpu_wait LABEL: until the background conversions' log ($L/conv.log) has a line starting "LABEL ".
gpu_wait() { while ! grep -q "^$1 " $L/conv.log; do sleep 2; done; echo "$1 ready $(el)"; }
# gpu_decode LABEL BINARY MODEL [VAR=value ...]: a greedy decode of 256 tokens after the book's first 560 bytes
# (the decode table's prompt, 182 tokens on the Llama-3 tokenizer) into $L/run_LABEL.log, its decode line.
gpu_decode() {
  local l=$1 b=$2 m=$3; shift 3
  env "$@" timeout 120 $B/$b $m --gpu --ctx-max 1024 -p "$(head -c 560 .cu/shared/data/heldout-books.txt)" -n 256 --temp 0 \
    > $L/run_$l.log 2>&1
  echo "$l: $(grep -ahE 'decode|rror' $L/run_$l.log | cut -c1-80) $(el)"
}
# gpu_batch LABEL BINARY MODEL N [VAR=value ...]: gpu_decode's run with --batch N (N sequences of the prompt decoded
# together) into $L/b_LABEL.log, its "--batch" line (tokens/s over the batch) — session 26's call C cut that line away.
gpu_batch() {
  local l=$1 b=$2 m=$3 n=$4; shift 4
  env "$@" timeout 150 $B/$b $m --gpu --ctx-max 1024 -p "$(head -c 560 .cu/shared/data/heldout-books.txt)" -n 256 --temp 0 \
    --batch $n > $L/b_$l.log 2>&1
  echo "$l: $(grep -ahE -- '--batch [0-9]+:|rror' $L/b_$l.log | sed 's/.*decode/decode/' | cut -c1-120) $(el)"
}
# gpu_pack NAME: $L packed into $OUT/NAME.tgz now (again at each call: a call cut by its time limit keeps what was packed;
# session 26's call C lost its logs that way).
gpu_pack() { tar -C "$(dirname "$L")" -czf "$OUT/$1.tgz" "$(basename "$L")"; }
# gpu_convert8b LABEL=SPEC ...: in the background, the synthetic Llama-3-8B ($W/synth-8b, make_synth_llama) and then each
# conversion into $W/LABEL.kvq (SPEC: kvq-convert's weight options, e.g. "--weights hyperquant:e8:4.0"), one line
# "LABEL (N s)" in $L/conv.log as each is ready (gpu_wait LABEL). Needs $W and $L.
gpu_convert8b() {
  ( $B/make_synth_llama 8b $W/synth-8b tests/models/kvq-tiny-llama >/dev/null 2>&1; echo "synth $(el)"
    for a in "$@"; do
      nice $B/kvq-convert -q -t 12 $W/synth-8b $W/${a%%=*}.kvq ${a#*=}; echo "${a%%=*} $(el)"
    done ) > $L/conv.log 2>&1 &
}
# gpu_tiny LABEL BINARY [VAR=value ...]: kvq-tiny-llama in E8 4.0 ($W/tiny.kvq, converted at the first call): the prefill
# logits of 100 fixed tokens and a greedy text of 100 tokens, each as an md5 prefix (equal across binaries/knobs = the
# same bits).
gpu_tiny() {
  local l=$1 b=$2; shift 2
  [ -f $W/tiny.kvq ] || $B/kvq-convert -q tests/models/kvq-tiny-llama $W/tiny.kvq --weights hyperquant:e8:4.0 > $L/tiny_conv.log 2>&1
  [ -f $W/ids.bin ] || python3 -c "import struct,sys; sys.stdout.buffer.write(struct.pack('<100i', *[(i*37)%200+3 for i in range(100)]))" > $W/ids.bin
  env "$@" $B/$b $W/tiny.kvq --gpu --tokens $W/ids.bin --logits $W/lg_$l.bin > $L/lg_$l.log 2>&1
  echo "tiny $l: logits rc $? $(md5sum < $W/lg_$l.bin | cut -c1-12) text $(env "$@" $B/$b $W/tiny.kvq --gpu -p "Once upon a time" -n 100 --temp 0 2>/dev/null | md5sum | cut -c1-12)"
}
# gpu_2layer: a 2-layer Llama-3-8B-shaped model in E8 4.0 as $W2/e8.kvq (W2=/tmp/w2) — one decode step's kernels at the
# 8B's shapes in seconds, for Nsight Compute (session 28's calls B, C, E).
gpu_2layer() {
  W2=/tmp/w2; mkdir -p $W2
  $B/make_synth_llama 8b $W2/src tests/models/kvq-tiny-llama 1 2 > $L/synth2.log 2>&1
  $B/kvq-convert -q -t 4 $W2/src $W2/e8.kvq --weights hyperquant:e8:4.0 > $L/conv2.log 2>&1; echo "2-layer e8 rc $? $(el)"
}
# gpu_ncu_lean LABEL BINARY: Nsight Compute on the four lean launches of one decode step (the second) of gpu_2layer's
# model, into $L/n_LABEL_details.txt; prints each launch's duration, issue rate, DRAM share and instructions.
gpu_ncu_lean() {
  local l=$1 b=$2 n
  n=$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  timeout 150 $n --clock-control none -k regex:hqx_gemv1s_k -s 8 -c 4 --section SpeedOfLight --section LaunchStats --section Occupancy \
    --section WarpStateStats --section SchedulerStats --section InstructionStats -o $L/n_$l $B/$b $W2/e8.kvq --gpu --ctx-max 1024 \
    -p "$(head -c 560 .cu/shared/data/heldout-books.txt)" -n 8 --temp 0 > $L/ncu_$l.log 2>&1; echo "== ncu $l rc $? $(el)"
  $n --import $L/n_$l.ncu-rep --page details > $L/n_${l}_details.txt 2>&1; rm -f $L/n_$l.ncu-rep
  grep -E "hqx_gemv1s|Duration|Registers Per|Issued Warp Per|Warp Cycles Per Issued|DRAM Throughput|Executed Instructions  " \
    $L/n_${l}_details.txt | head -32 | cut -c1-120
}
