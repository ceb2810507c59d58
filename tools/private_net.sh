#!/usr/bin/env bash
# Run a command inside a private network namespace with multicast on loopback.
#
#   tools/private_net.sh .venv/bin/python -m pytest
#
# Zeroconf (LAN discovery) tests multicast; inside a fresh namespace that
# traffic cannot leave this machine (docs/lan-security.md). Loopback is brought up,
# marked multicast-capable, and given the multicast route. Root gets a
# plain `unshare -n`; others try a user namespace (`unshare -rn`, plus a
# mount namespace so tests may create named namespaces). Where neither
# works, the command runs as is, with LEAKYPOOL_TEST_NO_NETNS saying why,
# and the tests that need the namespace skip with that reason.
set -euo pipefail
[ "$#" -gt 0 ] || { echo "usage: $0 COMMAND [ARGS...]" >&2; exit 2; }

if [ "${LEAKYPOOL_IN_PRIVATE_NET:-}" = "1" ]; then
  ip link set lo up
  ip link set lo multicast on
  ip route add 224.0.0.0/4 dev lo 2>/dev/null || true
  exec "$@"
fi

why=""
if ! command -v unshare >/dev/null || ! command -v ip >/dev/null; then
  why="unshare or ip (util-linux, iproute2) is not installed"
elif [ "$(id -u)" = "0" ] && unshare -n true 2>/dev/null; then
  LEAKYPOOL_IN_PRIVATE_NET=1 exec unshare -n "$0" "$@"
elif unshare -rnm true 2>/dev/null; then
  LEAKYPOOL_IN_PRIVATE_NET=1 exec unshare -rnm "$0" "$@"
else
  why="cannot create a network namespace here (needs root or unprivileged user namespaces)"
fi
echo "private_net: $why; running without a private network" >&2
LEAKYPOOL_TEST_NO_NETNS="$why" exec "$@"
