#!/usr/bin/env bash
# Builds the agn:dev image with no container registry: a minimal Debian base made with
# debootstrap and `docker import`ed (cached by a digest of its recipe), the dependencies as
# wheels downloaded on this host (cached), and `docker build --network none`. Needs root,
# debootstrap, a Docker engine (DOCKER_HOST is honoured) or podman and, the first time, a
# Debian mirror and PyPI. Where a registry works, `docker build -t agn:dev .` is the usual way.
# The engine is the one kind would use (KIND_EXPERIMENTAL_PROVIDER, else Docker if it answers,
# else podman) unless --engine says; on podman the image is localhost/agn:dev.
#   scripts/build-image.sh [--engine docker|podman] [--tag agn:dev] [--mirror http://deb.debian.org/debian]
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
if [[ ! -x .venv/bin/python ]]; then
  scripts/setup.sh
fi
exec .venv/bin/python -m xtask.images.agn_image "$@"
