#!/usr/bin/env bash
# The README's first command: set up, bring up the example environment on the embedded
# local control plane, then drain and undrain the provider-a gateway and wait until both
# consumers serve each change. Leaves the environment running (`env down` removes it).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
scripts/setup.sh
xtask() { .venv/bin/python -m xtask "$@"; }
run() { echo; printf '$ python -m xtask'; printf ' %q' "$@"; echo; xtask "$@"; }

run env up --env example --runtime local
run env status --env example
targets=(--network production --consumer consumer-a --consumer consumer-b)
run env provider-drain --context local-example --gateway provider-a --dry-run
run env provider-drain --context local-example --gateway provider-a --reason "quickstart maintenance" "${targets[@]}"
run env provider-drain --context local-example --gateway provider-a --undrain "${targets[@]}"
echo
echo "The example environment is still running: try \`python -m xtask env status\`;"
echo "remove it with \`.venv/bin/python -m xtask env down\`."
