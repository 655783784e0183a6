#!/usr/bin/env bash
# Sets up a development checkout: a virtualenv in .venv with the project and its test
# extra installed, and the local control-plane binaries (built once, cached by version).
# Idempotent and quiet when there is nothing to do.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
python="${PYTHON:-python3}"
if [[ ! -x .venv/bin/python ]]; then
  echo "setup: creating .venv" >&2
  "$python" -m venv .venv
fi
stamp=.venv/.agn-installed
if [[ ! -f "$stamp" || pyproject.toml -nt "$stamp" ]]; then
  echo "setup: installing the project and test dependencies into .venv" >&2
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -e '.[test]'
  touch "$stamp"
fi
scripts/install-control-plane.sh >/dev/null
