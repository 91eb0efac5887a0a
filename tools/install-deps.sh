#!/usr/bin/env bash
# Installs kvq's build dependencies from Debian packages when they are missing.
# As root it runs apt-get itself; otherwise it prints the exact command and fails.
set -eu
pkgs="build-essential pkg-config libzip-dev libzstd-dev libcmocka-dev libjansson-dev \
libxxhash-dev libssl-dev libpcre2-dev libutf8proc-dev libyaml-dev python3 python3-venv"
missing=""
for p in $pkgs; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ]; then
  echo "kvq: installing missing packages:$missing" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq $missing >/dev/null
else
  echo "kvq: missing packages:$missing" >&2
  echo "kvq: run: sudo apt-get install -y$missing" >&2
  exit 1
fi
