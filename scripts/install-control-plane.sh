#!/usr/bin/env bash
# Installs the local control-plane binaries (kube-apiserver, kubectl, etcd) that the
# "local" runtime and the integration tests run.
#
# No prebuilt binary can be downloaded on our machines, so they are built from the Go
# module proxy through the committed wrapper modules in scripts/controlplane/ and cached
# outside the repository, keyed by version:
#
#   ${AGN_CACHE_DIR:-${XDG_CACHE_HOME:-~/.cache}/agn-xtask}/controlplane/kubernetes-<v>_etcd-<v>/
#
# It does nothing when KUBEBUILDER_ASSETS (the envtest convention) already names a folder
# holding all three binaries, or when the cache folder is complete. It prints the folder
# that holds the binaries as its last line, so callers can `export KUBEBUILDER_ASSETS=$(...| tail -1)`.
#
# Usage: scripts/install-control-plane.sh [--print-dir]
#   --print-dir   print the cache folder this version would use and exit (no build)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=controlplane/versions.env
source "$here/controlplane/versions.env"
# shellcheck source=controlplane/ldflags.sh
source "$here/controlplane/ldflags.sh"

binaries=(kube-apiserver kubectl etcd)
cache_root="${AGN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/agn-xtask}"
dest="$cache_root/controlplane/kubernetes-${KUBERNETES_VERSION}_etcd-${ETCD_VERSION}"

has_all() {
  local dir="$1" b
  for b in "${binaries[@]}"; do [[ -x "$dir/$b" ]] || return 1; done
}

log() { echo "install-control-plane: $*" >&2; }

if [[ "${1:-}" == "--print-dir" ]]; then echo "$dest"; exit 0; fi

if [[ -n "${KUBEBUILDER_ASSETS:-}" ]]; then
  if has_all "$KUBEBUILDER_ASSETS"; then
    log "using KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS"
    echo "$KUBEBUILDER_ASSETS"; exit 0
  fi
  log "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS lacks one of ${binaries[*]}; building into the cache instead"
fi
if has_all "$dest"; then
  log "cached: $dest"
  echo "$dest"; exit 0
fi
command -v go >/dev/null || { log "error: Go is needed to build the binaries; install Go or set KUBEBUILDER_ASSETS to a folder holding ${binaries[*]}"; exit 1; }

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-mod=mod -trimpath"
staging="$(mktemp -d "${cache_root}/.build.XXXXXX" 2>/dev/null || { mkdir -p "$cache_root"; mktemp -d "${cache_root}/.build.XXXXXX"; })"
trap 'rm -rf "$staging"' EXIT
start=$SECONDS

k8s_ldflags="$(k8s_ldflags "$here/controlplane/kubernetes")"

log "building kube-apiserver and kubectl ${KUBERNETES_VERSION} (cold builds take a while)"
(cd "$here/controlplane/kubernetes" && \
  go build -ldflags "$k8s_ldflags" -o "$staging/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver && \
  go build -ldflags "$k8s_ldflags" -o "$staging/kubectl" k8s.io/kubernetes/cmd/kubectl)

log "building etcd ${ETCD_VERSION}"
(cd "$here/controlplane/etcd" && \
  go build -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=${ETCD_VERSION}" -o "$staging/etcd" go.etcd.io/etcd/server/v3)

mkdir -p "$(dirname "$dest")"
rm -rf "$dest"
mv "$staging" "$dest"
trap - EXIT
log "built ${binaries[*]} into $dest in $((SECONDS - start))s"
echo "$dest"
