#!/usr/bin/env bash
# Builds a kind node image for the Kubernetes release in scripts/controlplane/versions.env with
# no container registry, and loads it into the container engine; prints the image's name.
#
#   scripts/build-kind-node-image.sh [--engine docker|podman] [--archive-only] [--mirror URL]
#
# The binaries come from the Go module proxy (scripts/kindnode/build-binaries.sh), the root
# filesystem from a Debian mirror (debootstrap); both, and the assembled image archive, are
# cached under ${AGN_CACHE_DIR:-~/.cache/agn-xtask}/ by a digest of their recipe. Needs root,
# Go, gcc, libseccomp-dev and debootstrap the first time (scripts/kind-host-setup.sh installs
# them). Where a registry works, kind's own node image needs none of this. docs/kind.md says more.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
if [[ ! -x .venv/bin/python ]]; then
  scripts/setup.sh >&2
fi
exec .venv/bin/python -m xtask.images.nodeimage "$@"
