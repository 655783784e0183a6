#!/usr/bin/env bash
# The README's test command: set up (idempotent), lint and type-check, then run every test
# suite. The kind suite skips itself, with its reason, where kind, kubectl or an engine kind
# can use is missing (scripts/kind-host-setup.sh; with AGN_REQUIRE_KIND=1 it fails instead), and
# so does the container suite where no Docker engine can run or its base image cannot be made.
# With arguments (a test path, -k, -m ...) only pytest runs, with those arguments; when every
# path given is under tests/unit, nothing but Python is set up (no Go, no control-plane build).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
unit_only=0
if [[ $# -gt 0 ]]; then
  unit_only=1
  paths=0
  for arg in "$@"; do  # a path names a test file or folder (pytest's PATH[::NODE]); the rest are options and values
    path="${arg%%::*}"
    [[ "$arg" == -* || ! -e "$path" ]] && continue
    case "$(realpath -m --relative-to="$repo" "$path")" in
      tests/unit | tests/unit/*) paths=1 ;;
      *) unit_only=0 ;;
    esac
  done
  (( paths )) || unit_only=0
fi
if (( unit_only )); then scripts/setup.sh --python-only; else scripts/setup.sh; fi
if [[ $# -eq 0 ]]; then
  echo "test: ruff check, ruff format --check, mypy" >&2
  .venv/bin/ruff check xtask agn tests scripts
  .venv/bin/ruff format --check --quiet xtask agn tests scripts
  .venv/bin/mypy
fi
exec .venv/bin/python -m pytest "$@"
