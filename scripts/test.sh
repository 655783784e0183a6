#!/usr/bin/env bash
# The README's test command: set up (idempotent), then run every test suite. The kind
# suite skips itself, with its reason, where Docker or kind is missing.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
