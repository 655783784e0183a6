#!/usr/bin/env bash
# Builds llama.cpp's `llama-server`, the real inference engine that the `engines` test suite and
# `env up --env engines` run (docs/engines.md, "A real engine in the loop").
#
# No prebuilt binary can be downloaded on our machines (they reach PyPI only), so the server is
# built from the llama.cpp source vendored in the PyPI sdist of llama-cpp-python (pinned in
# scripts/engines/versions.env):
# CPU only, static, one relocatable binary. It is cached outside the repository, keyed by version:
#
#   ${AGN_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/agn-xtask}/engines/llama-server-<version>/
#     llama-server                 the binary
#     ggml-vocab-llama-spm.gguf    llama.cpp's own llama (SentencePiece) vocabulary, which the
#                                  tiny test model (xtask/llamacpp/model.py) borrows
#
# It does nothing when AGN_LLAMA_SERVER names an executable `llama-server` (bring your own; the
# vocabulary is then $AGN_LLAMA_VOCAB, the file beside it, or the cache's) or when the cache
# folder is complete. It prints the
# folder that holds the binary as its last line. Needs cmake, a C++ compiler and pip.
#
# Usage: scripts/install-llama-server.sh [--print-dir]
#   --print-dir   print the cache folder this version would use and exit (no build)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=engines/versions.env
source "$here/engines/versions.env"
files=(llama-server ggml-vocab-llama-spm.gguf)
cache_root="${AGN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/agn-xtask}"
dest="$cache_root/engines/llama-server-${LLAMA_CPP_PYTHON_VERSION}"

log() { echo "install-llama-server: $*" >&2; }
complete() { [[ -x "$1/llama-server" && -s "$1/ggml-vocab-llama-spm.gguf" ]]; }

if [[ "${1:-}" == "--print-dir" ]]; then echo "$dest"; exit 0; fi

if [[ -n "${AGN_LLAMA_SERVER:-}" ]]; then
  if [[ -x "$AGN_LLAMA_SERVER" ]]; then
    log "using AGN_LLAMA_SERVER=$AGN_LLAMA_SERVER"
    dirname "$AGN_LLAMA_SERVER"; exit 0
  fi
  log "AGN_LLAMA_SERVER=$AGN_LLAMA_SERVER is not an executable; building into the cache instead"
fi
if complete "$dest"; then
  echo "$dest"; exit 0
fi
missing=()
command -v cmake >/dev/null || missing+=(cmake)
command -v c++ >/dev/null || command -v g++ >/dev/null || missing+=("a C++ compiler (g++)")
python="${PYTHON:-python3}"
"$python" -m pip --version >/dev/null 2>&1 || missing+=("pip ($python -m pip)")
if (( ${#missing[@]} )); then
  needs="$(printf '%s, ' "${missing[@]}")"
  log "error: building llama-server needs ${needs%, }; install them or set AGN_LLAMA_SERVER to a llama-server binary"
  exit 1
fi

mkdir -p "$cache_root/engines"
# One build at a time per version; a second caller waits, then finds the cache complete.
exec 9>"$cache_root/engines/.llama-server-${LLAMA_CPP_PYTHON_VERSION}.lock"
flock 9
if complete "$dest"; then echo "$dest"; exit 0; fi
# The work folder is kept when a build fails or is interrupted, so the next run resumes it
# (cmake builds incrementally); it is removed once the binary is in the cache.
work="$cache_root/engines/.build-llama-server-${LLAMA_CPP_PYTHON_VERSION}"
mkdir -p "$work"
start=$SECONDS

src="$(echo "$work"/llama_cpp_python-*/vendor/llama.cpp)"
if [[ ! -d "$src/tools/server" ]]; then
  log "downloading the llama-cpp-python ${LLAMA_CPP_PYTHON_VERSION} sdist (its vendored llama.cpp source)"
  rm -rf "$work/sdist" "$work"/llama_cpp_python-*
  # --no-binary for this package only: pip may still fetch its build backend as a wheel to read
  # the sdist's metadata.
  "$python" -m pip download --quiet --no-binary llama-cpp-python --no-deps \
    -d "$work/sdist" "llama-cpp-python==${LLAMA_CPP_PYTHON_VERSION}" >&2
  rm -rf "$work/.unpack" && mkdir "$work/.unpack"  # unpacked whole, then renamed: never half a source
  tar -xzf "$work"/sdist/llama_cpp_python-*.tar.gz -C "$work/.unpack"
  mv "$work"/.unpack/llama_cpp_python-* "$work/"
  src="$(echo "$work"/llama_cpp_python-*/vendor/llama.cpp)"
  [[ -d "$src/tools/server" ]] || { log "error: no llama.cpp server source in the sdist ($src)"; exit 1; }
else
  log "resuming the build in $work"
fi

jobs="${AGN_BUILD_JOBS:-$(nproc 2>/dev/null || echo 2)}"
log "building llama-server (CPU, static, Release, $jobs jobs; a cold build takes ~12 min on 2 cores)"
# LLAMA_USE_PREBUILT_UI would download the web UI at build time; LLAMA_CURL would link libcurl
# for model downloads. Neither is wanted: the server serves the API only, from a local model.
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
  -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF -DLLAMA_CURL=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON >&2
cmake --build "$work/build" --target llama-server -j "$jobs" >&2

out="$work/out"
rm -rf "$out"
mkdir -p "$out"
cp "$work/build/bin/llama-server" "$out/llama-server"
strip "$out/llama-server" 2>/dev/null || true
cp "$src/models/ggml-vocab-llama-spm.gguf" "$out/"
"$out/llama-server" --version >&2 || { log "error: the built llama-server does not run"; exit 1; }

rm -rf "$dest"
mv "$out" "$dest"
rm -rf "$work"
log "built ${files[*]} into $dest in $((SECONDS - start))s ($(du -h "$dest/llama-server" | cut -f1) binary)"
echo "$dest"
