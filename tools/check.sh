#!/usr/bin/env bash
# The checks every change passes before the tests (CI runs them from the README's test command):
# lint, format, types, and the public API's type completeness, with the versions pinned in the `dev` extra.
# Run from the checkout:
#   tools/check.sh            (uses $VENV/bin/, default .venv/bin/, if there, else what is on PATH)
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${VENV:-.venv}/bin/
[ -x "${bin}ruff" ] || bin=
[ -z "$bin" ] || bin=$(cd "$bin" && pwd)/  # absolute: it also goes on PATH below (VENV may be either)
set -x
"${bin}ruff" check .
"${bin}ruff" format --check .
"${bin}mypy"
# The public API fully typed, as `pyright --verifytypes` measures it (trio runs the same check): it exits
# non-zero below 100%, printing what is missing. The verifier finds this checkout through PYTHONPATH and
# installed packages (joblib-stubs) through the `python` on PATH, hence both.
{ set +x; } 2>/dev/null  # the report is long: shown only when it fails
for package in pool balancer backpressure; do
  echo "+ basedpyright --verifytypes $package --ignoreexternal" >&2
  report=$(PATH="${bin:+$bin:}$PATH" PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" \
    "${bin}basedpyright" --verifytypes "$package" --ignoreexternal) || { printf '%s\n' "$report"; exit 1; }
  grep "completeness score" <<<"$report"
done
