#!/usr/bin/env bash
# Device call (issue 20: the GPU encoders of kernels/cuda/kv_enc.cu — turboquant, qturbo,
# turboquant-prod keys, octopus keys with and without qjl, hqkv, hqmq). Builds nothing: the binaries are
# built on the dev box and carried in .cu/ as tests/bench/gpu_tc_check.sh describes (.cu/bin
# needs build/tests/test_cuda_{kv,model}, build/bench/{cuda_kv_attn,cuda_hqx,make_synth_llama},
# build/kvq-{run,convert}; .cu/lib the shared libraries they need). Runs test_cuda_kv and
# test_cuda_model (logs in $OUT), prints a pass/fail table per test and per codec, then the
# encoders' throughput (cuda_kv_attn with CUDA_KV_ENC_ONLY=1) and one `kvq-run --gpu --kv` per
# new codec on the t128 model (head_dim 128, 4 query heads per KV head, random weights).
# usage (on the device): bash tests/bench/gpu_kv_enc_check.sh
set -u
export KVQ_SYNTH=$PWD/.cu/bin/make_synth_llama # test_cuda_model's t128 model
TESTS="test_cuda_kv test_cuda_model" . tests/bench/gpu_env.sh # unpacks .cu, runs the suites, defines B and el
L=${OUT:-/tmp}
echo
echo "| suite | test | result |"
echo "|---|---|---|"
for t in test_cuda_kv test_cuda_model; do
  grep -E '^\[ +(OK|FAILED|SKIPPED|ERROR) +\] test_' $L/$t.log | sort -u |
    sed -E 's/^\[ +([A-Z]+) +\] (test_[a-z0-9_]+).*/\2 \1/' | while read -r n r; do echo "| $t | $n | $r |"; done
done
echo
# per codec: the GPU encoder's bytes against the CPU encoder's (test_encode_vs_cpu), the GPU cache's
# bytes and attention against the CPU cache (test_append_vs_cpu_cache), the runtime's logits against
# the CPU's codec cache (test_cuda_model test_kv_codecs); "-" = not in that test, "not run" = the
# suite stopped before it
verdict() { # log, grep pattern -> PASS / FAIL / not run
  local v; v=$(grep -E "$2" "$1" 2>/dev/null | grep -oE 'PASS|FAIL' | sort -u | tr '\n' ' ')
  echo "${v:-not run}"
}
echo "| codec | encoder bytes | GPU cache vs CPU cache | runtime logits |"
echo "|---|---|---|---|"
for c in int:3 kivi:2 turboquant:2 turboquant:3 turboquant:4 qturbo:2 qturbo:3 qturbo:4 turboquant-prod:2 turboquant-prod:3 \
         turboquant-prod:4 octopus:2 octopus:3 octopus:4 octopus:2:qjl octopus:3:qjl octopus:4:qjl octopus:3:round=scalar \
         octopus:3:round=2x2 octopus:2:qjl:round=full hqkv:e8:3 hqkv:e8:3:dither hqkv:e8:2:dither hqkv:e8:4:rot=qjl:dither \
         hqkv:d4:3 hqkv:d4:3:dither hqkv:d4:4:rot=none hqkv:d4:4:rot=qjl hqkv:a2:3:dither hqkv:a2:3:rot=qjl:dither hqkv:a2:4:dither \
         hqkv:z:2:rot=none:dither hqkv:z:4:dither hqmq:s24:r3 hqmq:s96:r4 hqmq:s192:r6; do
  # each test's own codec list (a codec a test does not run is "-")
  case " int:3 kivi:2 turboquant:2 turboquant:3 turboquant:4 qturbo:2 qturbo:3 qturbo:4 turboquant-prod:2 turboquant-prod:3 turboquant-prod:4 octopus:2 octopus:3 octopus:4 octopus:2:qjl octopus:3:qjl octopus:4:qjl octopus:3:round=scalar octopus:3:round=2x2 octopus:2:qjl:round=full hqkv:e8:3 hqkv:e8:3:dither hqkv:e8:2:dither hqkv:e8:4:rot=qjl:dither hqkv:d4:3:dither hqkv:d4:4:rot=none hqkv:a2:3:rot=qjl:dither hqkv:a2:4:dither hqkv:z:2:rot=none:dither hqkv:z:4:dither hqmq:s24:r3 hqmq:s96:r4 hqmq:s192:r6 " in
    *" $c "*) e=$(verdict $L/test_cuda_kv.log "test_cuda_kv: encode $c: ");; *) e=-;; esac
  case " int:3 kivi:2 turboquant:2 turboquant:3 turboquant:4 qturbo:2 qturbo:3 qturbo:4 turboquant-prod:2 turboquant-prod:3 turboquant-prod:4 octopus:2 octopus:3 octopus:4 octopus:2:qjl octopus:3:qjl octopus:4:qjl hqkv:e8:3:dither hqkv:e8:4:rot=qjl:dither hqkv:d4:3 hqkv:a2:3:dither hqkv:z:2:rot=none:dither hqmq:s24:r3 hqmq:s96:r4 hqmq:s192:r6 " in
    *" $c "*) a=$(verdict $L/test_cuda_kv.log "test_cuda_kv: cache $c: ");; *) a=-;; esac
  case " turboquant:3 qturbo:2 turboquant-prod:4 octopus:3 octopus:2:qjl hqkv:e8:3:dither hqkv:d4:4:rot=qjl hqmq:s96:r4 " in
    *" $c "*) m=$(verdict $L/test_cuda_model.log "^  kv $c window [0-9]+ boundary [01]: (PASS|FAIL)");; *) m=-;; esac
  echo "| $c | $e | $a | $m |"
done
echo
echo "first differences and failures (if any):"
grep -hE 'differs|FAIL|Error|error' $L/test_cuda_kv.log $L/test_cuda_model.log | head -12
grep -hE '^  kv ' $L/test_cuda_model.log | grep -v PASS | cut -c1-220 | head -20
grep -hE 'test_cuda_kv: cache .*NMSE' $L/test_cuda_kv.log | awk '{print $NF}' | sort -g | tail -1 | sed 's/^/worst GPU-vs-CPU-cache attention NMSE: /'
echo "== tests done $(el)"
# encoder throughput: a 4096-token prefill and one-token appends, 8 KV heads, K and V
CUDA_KV_ENC_ONLY=1 timeout 200 $B/cuda_kv_attn 2>&1 | tail -20
echo "== throughput done $(el)"
# the runtime, end to end: each new codec through kvq-run --gpu (20 greedy tokens after a short prompt)
T=/tmp/t128; [ -f $T/config.json ] || $B/make_synth_llama t128 $T tests/models/kvq-tiny-llama >/dev/null 2>&1 || echo "synth t128 failed"
$B/kvq-convert -q -t 16 $T $T.kvq --weights hyperquant:e8:4.0 >/dev/null 2>&1 || echo "convert t128 failed"
for kv in "turboquant:4" "qturbo:3" "turboquant-prod:3" "octopus:3" "octopus:4:qjl --kv-window 16" "turboquant:2 --kv-boundary" \
          "hqkv:e8:3:dither" "hqkv:a2:4:rot=qjl --kv-window 16" "hqmq:s96:r4" "hqmq:s24:r3 --kv-boundary"; do
  out=$(timeout 60 $B/kvq-run $T.kvq --gpu --ctx-max 512 -p "Once upon a time there was a little" -n 20 --temp 0 --kv $kv 2>&1 >/tmp/text.txt)
  echo "kvq-run --gpu --kv $kv: rc $? $(echo "$out" | grep -E 'KV cache|decode|error|cannot' | tr -s ' ' | tr '\n' ' ' | cut -c1-200) text md5 $(md5sum < /tmp/text.txt | cut -c1-12)"
  cpu=$(timeout 60 $B/kvq-run $T.kvq --ctx-max 512 -p "Once upon a time there was a little" -n 20 --temp 0 --kv $kv 2>/dev/null | md5sum | cut -c1-12)
  echo "   same on the CPU: text md5 $cpu"
done
echo "== done $(el)"
