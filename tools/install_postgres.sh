#!/usr/bin/env bash
# Install a PostgreSQL server for the tests (they start their own throwaway
# cluster; nothing runs as a service). Does nothing when initdb is already
# installed. Debian/Ubuntu (apt-get); elsewhere, install PostgreSQL >= 13 by hand.
set -euo pipefail
if ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  echo "tools/install_postgres.sh: no apt-get; install PostgreSQL (initdb, pg_ctl) by hand" >&2
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends postgresql >/dev/null
# The package may start a cluster of its own; the tests do not use it.
$SUDO service postgresql stop >/dev/null 2>&1 || true
