#!/usr/bin/env bash
# The checks every change passes before the tests (CI runs them from the README's test command):
# lint, format and types, with the versions pinned in the `dev` extra. Run from the checkout:
#   tools/check.sh            (uses .venv/bin/ if there, else what is on PATH)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=.venv/bin/
[ -x "${bin}ruff" ] || bin=
set -x
"${bin}ruff" check .
"${bin}ruff" format --check .
"${bin}mypy"
