#!/usr/bin/env bash
# The README's test command: set up (idempotent), lint and type-check, then run every test
# suite. The kind suite skips itself, with its reason, where kind, kubectl or an engine kind
# can use is missing (scripts/kind-host-setup.sh; with AGN_REQUIRE_KIND=1 it fails instead), and
# so does the container suite where no Docker engine can run or its base image cannot be made.
# With arguments (a test path, -k, -m ...) only pytest runs, with those arguments.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
scripts/setup.sh
if [[ $# -eq 0 ]]; then
  echo "test: ruff check, ruff format --check, mypy" >&2
  .venv/bin/ruff check xtask agn tests scripts
  .venv/bin/ruff format --check --quiet xtask agn tests scripts
  .venv/bin/mypy
fi
exec .venv/bin/python -m pytest "$@"
