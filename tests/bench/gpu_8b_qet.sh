#!/usr/bin/env bash
# Device calls (issues 12 and 20) on the Llama-3-8B shape, around the QET 4 conversion that takes longer than one
# command (~9 min on the device host): `start` makes the synthetic checkpoint and its E8 4.0 conversion, starts
# `kvq-convert --weights qet:4:iters=10` in the background (setsid, nice 19, 14 threads: it outlives the command;
# iters=10: the qet:4 layout and size from a shorter Lloyd search), then runs tests/bench/gpu_kv_e2e.sh's 32.6k rows
# for the codecs in KVS while it converts. Call `start` again back to back (the machine stays warm between calls) for
# more KVS; when the log says "qet rc 0", `rows` runs the decode table's QET row beside bf16 and E8 4.0 (182-token
# prompt, 256 greedy tokens, batch 1 twice and batch 8 once), then the default conversion (no weight flag) of the same
# checkpoint and its decode rate.
# usage (on the device): KVS="fp32 kivi:4" [RUN_TIMEOUT=240] bash tests/bench/gpu_8b_qet.sh start | bash tests/bench/gpu_8b_qet.sh rows
set -u
TESTS="" . tests/bench/gpu_env.sh
W=/tmp/w8; mkdir -p $W; src=$W/synth-8b
[ -f $src/config.json ] || $B/make_synth_llama 8b $src tests/models/kvq-tiny-llama >/dev/null 2>&1 || echo synth failed
[ -f $W/e8.kvq ] || $B/kvq-convert -q -t 16 $src $W/e8.kvq --weights hyperquant:e8:4.0 || echo "convert failed"
echo "== synth + e8 $(el)"
if [ "${1:-start}" = start ]; then
  if [ ! -f $W/qet.started ]; then
    date +%s > $W/qet.started
    setsid nohup nice -n 19 bash -c "s=\$(date +%s); /usr/bin/time -v $B/kvq-convert -q -t 14 $src $W/qet4i10.kvq --weights qet:4:iters=10 > $W/qet.log 2>&1; echo \"qet rc \$? \$(( \$(date +%s) - s )) s\" >> $W/qet.log" > /dev/null 2>&1 < /dev/null &
    echo "qet started"
  fi
  [ -n "${KVS:-}" ] && VERIFY=0 SHORT_KVS=" " RUN_TIMEOUT=${RUN_TIMEOUT:-240} N=${N:-128} bash tests/bench/gpu_kv_e2e.sh 2>&1 | grep -v '^NVIDIA\|^copy band\|== verify\|== synth\|== converted'
  echo "qet: $(tail -2 $W/qet.log 2>/dev/null | tr '\n' ' ') started $(( $(date +%s) - $(cat $W/qet.started) )) s ago"
  exit 0
fi
grep -E "Elapsed|Maximum resident|User time|qet rc" $W/qet.log
prompt=$(head -c 560 .cu/shared/data/heldout-books.txt)
run() { # label model [batch]
  local bo=""; [ -n "${3:-}" ] && bo="--batch $3"
  out=$(timeout 150 $B/kvq-run $2 --gpu --ctx-max 1024 -p "$prompt" -n 256 --temp 0 $bo 2>&1 >$W/txt.$1.${3:-1})
  echo "$out" | grep -E 'on the device|memory|prefill|decode|--batch|rror' | sed "s/^/$1 b${3:-1}: /" | cut -c1-260
}
for r in 1 2; do
  run bf16 $src; run qet4i10 $W/qet4i10.kvq; run e8 $W/e8.kvq
  [ $r = 1 ] && { run bf16 $src 8; run qet4i10 $W/qet4i10.kvq 8; run e8 $W/e8.kvq 8; }
  echo "== round $r $(el)"
done
ls -la $W/qet4i10.kvq $W/e8.kvq | awk '{print $5, $9}'
s=$(date +%s); timeout 200 $B/kvq-convert -t 16 $src $W/default.kvq 2>&1 | tail -3 | cut -c1-300; echo "default convert $(( $(date +%s) - s )) s"
[ -f $W/default.kvq ] && { ls -la $W/default.kvq | awk '{print $5}'; run default $W/default.kvq; }
echo "== done $(el)"
