#!/usr/bin/env bash
# Install what the tests need from the system's packages: a PostgreSQL server
# (the tests start their own throwaway cluster; nothing runs as a service) and
# tmux (the status view is tested in a real terminal). Installs only what is
# missing. Debian/Ubuntu (apt-get); elsewhere, install PostgreSQL >= 13 and
# tmux by hand.
set -euo pipefail
missing=()
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null 2>&1; then
  missing+=(postgresql)
fi
command -v tmux >/dev/null 2>&1 || missing+=(tmux)
# Chromium: the page (GET / on a metrics port) is tested in it, driven by Playwright.
[ -x /usr/bin/chromium ] || missing+=(chromium)
[ ${#missing[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null; then
  echo "tools/install_system_packages.sh: no apt-get; install ${missing[*]} by hand" >&2
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# The postgresql package may start a cluster of its own; the tests do not use it.
$SUDO service postgresql stop >/dev/null 2>&1 || true
