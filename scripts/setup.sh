#!/usr/bin/env bash
# Sets up a development checkout: a virtualenv in .venv with the project and its test and dev
# (lint, types) extras installed at the versions constraints.txt pins (what CI runs), and the
# local control-plane binaries (built once, cached by version; KUBEBUILDER_ASSETS brings your own).
# Idempotent and quiet when there is nothing to do.
#
#   scripts/setup.sh                 .venv, then the control-plane binaries (needs Go unless cached or KUBEBUILDER_ASSETS)
#   scripts/setup.sh --python-only   .venv only: enough for the unit suite, needs nothing but Python
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
python="${PYTHON:-python3}"
if [[ ! -x .venv/bin/python ]]; then
  echo "setup: creating .venv" >&2
  "$python" -m venv .venv
fi
stamp=.venv/.agn-installed
if [[ ! -f "$stamp" || pyproject.toml -nt "$stamp" || constraints.txt -nt "$stamp" ]]; then
  echo "setup: installing the project and its test and dev dependencies into .venv" >&2
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -c constraints.txt -e '.[test,dev]'
  touch "$stamp"
fi
[[ "${1:-}" == --python-only ]] && exit 0
scripts/install-control-plane.sh >/dev/null
