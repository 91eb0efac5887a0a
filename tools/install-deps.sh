#!/usr/bin/env bash
# Installs kvq's build dependencies from Debian packages when they are missing.
# As root it runs apt-get itself; otherwise it prints the exact command and fails.
set -eu

# Every library the build links, as a pkg-config module and the Debian package providing it.
# Checked last, on any system: a missing one stops the build with one line naming it (rather
# than a thousand undefined references).
check_modules() {
  command -v pkg-config >/dev/null || { echo "kvq: pkg-config not found (Debian: pkg-config)" >&2; exit 1; }
  for m in libzip:libzip-dev libzstd:libzstd-dev jansson:libjansson-dev libxxhash:libxxhash-dev \
           libcrypto:libssl-dev libpcre2-8:libpcre2-dev libutf8proc:libutf8proc-dev yaml-0.1:libyaml-dev \
           cairo:libcairo2-dev fontconfig:libfontconfig-dev cmocka:libcmocka-dev; do
    mod=${m%%:*} deb=${m#*:}
    pkg-config --exists "$mod" || { echo "kvq: missing library: pkg-config module '$mod' not found (Debian package: $deb)" >&2; exit 1; }
  done
}
if ! command -v dpkg-query >/dev/null; then check_modules; exit 0; fi # not Debian: check what the build needs

pkgs="build-essential pkg-config libzip-dev libzstd-dev libcmocka-dev libjansson-dev \
libxxhash-dev libssl-dev libpcre2-dev libutf8proc-dev libyaml-dev libcairo2-dev libfontconfig-dev python3 python3-venv"
# Needed by a test only: tests/test_report.c renders kvq-verify --report in headless Chromium
# and skips (counted as skipped) without it; `make valgrind` (tests/valgrind.sh) needs valgrind.
# Installed as root; otherwise a note, not a failure.
optional="chromium valgrind"
missing="" opt_missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
for p in $optional; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || opt_missing="$opt_missing $p"
done
[ -z "$missing$opt_missing" ] && { check_modules; exit 0; }
if [ "$(id -u)" = 0 ]; then
  echo "kvq: installing missing packages:$missing$opt_missing" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq $missing >/dev/null
  [ -z "$opt_missing" ] || apt-get install -y -qq $opt_missing >/dev/null ||
    echo "kvq: could not install$opt_missing (optional: the browser test of the HTML report skips, make valgrind stops)" >&2
  check_modules
else
  [ -z "$opt_missing" ] ||
    echo "kvq: optional:$opt_missing not installed (the browser test of the HTML report skips; sudo apt-get install -y$opt_missing)" >&2
  [ -z "$missing" ] && { check_modules; exit 0; }
  echo "kvq: missing packages:$missing" >&2
  echo "kvq: run: sudo apt-get install -y$missing" >&2
  exit 1
fi
