#!/usr/bin/env bash
# Builds the seed corpora of the fuzz targets in OUT/<target>/ from the real files in ../shared
# (when present), the repository's fixtures and recipes, .kvq files converted by BUILD's
# kvq-convert, and SEEDER's codec encodings (make_seeds). Generated, never committed (some are
# large). Usage: tests/fuzz/seeds.sh OUT BUILD SEEDER
set -eu
out=$1 build=$2 seeder=$3
sh=../shared
# a .kvq's manifest, compacted (no indentation: the fixtures' manifests then fit the manifest
# target's max_len, tests/fuzz/fuzz.mk)
manifest_of='import json, sys, zipfile; print(json.dumps(json.loads(zipfile.ZipFile(sys.argv[1]).read("manifest.json")), separators=(",", ":")))'
mkdir -p "$out"
for t in st index config tokenizer tok_text l2c kvqfile manifest recipe rice hq qet kvcodec; do mkdir -p "$out/$t"; done
cp tests/fixtures/st/*.safetensors "$out/st/"
for f in tests/fixtures/st/*/model.safetensors.index.json; do cp "$f" "$out/index/$(basename "$(dirname "$f")").json"; done
for f in tests/fixtures/st/*/config.json; do cp "$f" "$out/config/$(basename "$(dirname "$f")").json"; done
cp recipes/*.yaml "$out/recipe/"
cp tests/tokenizer/*.json "$out/tokenizer/"
cp tests/fixtures/l2c/*.bin "$out/l2c/"
if [ -d "$sh/models" ]; then
  # real safetensors headers (their data cut off: only the parser's input matters here)
  for f in "$sh"/models/*/*.safetensors; do
    python3 - "$f" "$out/st/$(basename "$(dirname "$f")")-$(basename "$f")" <<'PY'
import struct, sys
b = open(sys.argv[1], 'rb').read(1 << 20)
n = struct.unpack('<Q', b[:8])[0]
open(sys.argv[2], 'wb').write(b[:8 + n])
PY
  done
  for m in "$sh"/models/*/ "$sh"/oracle/*/; do
    [ -f "$m/config.json" ] && cp "$m/config.json" "$out/config/$(basename "$m").json"
    [ -f "$m/model.safetensors.index.json" ] && cp "$m/model.safetensors.index.json" "$out/index/$(basename "$m").json"
  done
  cp "$sh/models/stories260K/tok512.bin" "$sh/models/kvq-tiny-llama/tokenizer.json" "$out/tokenizer/" 2>/dev/null || true
  cp "$sh/models/stories260K/stories260K.bin" "$out/l2c/"
  # texts: a selector byte (which tokenizer) and 300 bytes of each data file
  i=0
  for f in "$sh"/data/heldout-books.txt "$sh"/data/wikitext-2/test.txt "$sh"/data/tinystories-valid-sample.txt; do
    for sel in 0 1 2 3; do
      { printf "\\x$(printf %02x $sel)"; head -c $((300 + 4000 * i)) "$f" | tail -c 300; } > "$out/tok_text/$sel-$i"
    done
    i=$((i + 1))
  done
  # .kvq files: stories260K with two weight codecs and a KV codec, and the 8-wide fixture
  tmp=$(mktemp -d)
  "$build/kvq-convert" "$sh/models/stories260K/stories260K.bin" "$tmp/a.kvq" --weights hyperquant:e8:4.0 --kv octopus:3 -q >/dev/null 2>&1 || true
  "$build/kvq-convert" "$sh/models/stories260K/stories260K.bin" "$tmp/b.kvq" --weights rtn:4:g64 --kv hqmq:s96:r4 -q >/dev/null 2>&1 || true
  [ -f "$tmp/a.kvq" ] && "$build/kvq-verify" "$tmp/a.kvq" --record --no-source >/dev/null 2>&1 || true
  "$build/kvq-convert" tests/fixtures/st/sharded_ok "$tmp/c.kvq" -q >/dev/null 2>&1 || true
  for k in "$tmp"/*.kvq; do
    [ -f "$k" ] || continue
    # stories260K's files (~300 KB) would slow the .kvq target to ~30 runs/s: manifests only
    [ "$(stat -c %s "$k")" -lt 65536 ] && cp "$k" "$out/kvqfile/"
    python3 -c "$manifest_of" "$k" > "$out/manifest/$(basename "$k" .kvq).json"
  done
  rm -rf "$tmp"
else
  echo "fuzz seeds: ../shared absent: seeds from the repository only" >&2
  printf '\001hello world' > "$out/tok_text/hello"
fi
# small .kvq files with a KV section, from the repository's llama2.c fixture (~30 KB each)
tmp=$(mktemp -d)
for kv in octopus:3 turboquant:3 kivi:4 hqmq:s96:r4; do
  "$build/kvq-convert" -q tests/fixtures/l2c/tiny_unshared.bin "$tmp/t.kvq" --weights rtn:4:g32 --kv $kv >/dev/null 2>&1 \
    && cp "$tmp/t.kvq" "$out/kvqfile/fixture-${kv%%:*}.kvq" && rm -f "$tmp/t.kvq"
  # and their manifests (a few KB, under the manifest target's max_len, unlike stories260K's)
  [ -f "$out/kvqfile/fixture-${kv%%:*}.kvq" ] && python3 -c "$manifest_of" "$out/kvqfile/fixture-${kv%%:*}.kvq" \
    > "$out/manifest/fixture-${kv%%:*}.json"
done
rm -rf "$tmp"
# the crafted zip structures of the bad-input corpus (tests/data/bad/make_zip_cases.py), zip64 included
cp tests/data/bad/zip-*.kvq "$out/kvqfile/"
head -c 4096 /dev/urandom > "$out/rice/random"
printf '\003\377\377\001\200' > "$out/rice/short"
"$seeder" "$out"
# the kept regression inputs seed their targets too
for d in tests/fuzz/regress/*/; do [ -d "$d" ] && cp "$d"* "$out/$(basename "$d")/" 2>/dev/null || true; done
for t in "$out"/*/; do echo "fuzz seeds: $(basename "$t"): $(ls "$t" | wc -l) files"; done
