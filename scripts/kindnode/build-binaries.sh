#!/usr/bin/env bash
# Builds every binary the kind node image holds, from the Go module proxy (and pause from
# the Kubernetes release's C source), into a cache folder keyed by the versions:
#
#   <cache>/kindnode/binaries-<digest of both versions files>/
#
# Prints that folder as its last line. Does nothing when it is complete.
# Needs Go, gcc and libseccomp-dev (runc links libseccomp); scripts/kind-host-setup.sh
# installs them.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
scripts="$(dirname "$here")"
# shellcheck source=../controlplane/versions.env
source "$scripts/controlplane/versions.env"
# shellcheck source=versions.env
source "$here/versions.env"
# shellcheck source=../controlplane/ldflags.sh
source "$scripts/controlplane/ldflags.sh"

log() { echo "kind-node-binaries: $*" >&2; }

cache_root="${AGN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/agn-xtask}"
key="$(cat "$scripts/controlplane/versions.env" "$here/versions.env" "$scripts/controlplane/kubernetes/go.sum" | sha256sum | cut -c1-16)"
dest="$cache_root/kindnode/binaries-$key"

k8s_bins=(kubelet kubeadm kubectl kube-apiserver kube-controller-manager kube-scheduler kube-proxy)
other_bins=(etcd containerd containerd-shim-runc-v2 ctr runc crictl coredns pause)
cni_bins=(bridge host-local loopback portmap)

complete() {
  local b
  for b in "${k8s_bins[@]}" "${other_bins[@]}"; do [[ -x "$dest/$b" ]] || return 1; done
  for b in "${cni_bins[@]}"; do [[ -x "$dest/cni/$b" ]] || return 1; done
}
if [[ "${1:-}" == "--print-dir" ]]; then echo "$dest"; exit 0; fi
if complete; then log "cached: $dest"; echo "$dest"; exit 0; fi

export GOTOOLCHAIN=local GOFLAGS="-mod=mod -trimpath"
mkdir -p "$cache_root/kindnode"
staging="$(mktemp -d "$cache_root/kindnode/.build.XXXXXX")"
trap 'rm -rf "$staging"' EXIT
mkdir -p "$staging/cni"
start=$SECONDS

k8s_ldflags="$(k8s_ldflags "$scripts/controlplane/kubernetes")"

log "building ${k8s_bins[*]} ${KUBERNETES_VERSION} (a cold build takes tens of minutes on 2 cores)"
for b in "${k8s_bins[@]}"; do
  log "  $b"
  (cd "$scripts/controlplane/kubernetes" && CGO_ENABLED=0 go build -ldflags "$k8s_ldflags" -o "$staging/$b" "k8s.io/kubernetes/cmd/$b")
done

log "building etcd ${ETCD_VERSION}"
(cd "$scripts/controlplane/etcd" && CGO_ENABLED=0 go build \
  -ldflags "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=${ETCD_VERSION}" -o "$staging/etcd" go.etcd.io/etcd/server/v3)

# go install of module@version: each of these modules builds without replace directives.
gobin() {  # gobin <name> <package@version> [extra go flags...]
  local name="$1" pkg="$2"; shift 2
  log "  $name ($pkg)"
  local out; out="$(mktemp -d "$staging/.gobin.XXXXXX")"
  GOBIN="$out" go install "$@" "$pkg"
  mv "$out"/* "$staging/$name"
  rmdir "$out"
}
log "building containerd ${CONTAINERD_VERSION}, runc ${RUNC_VERSION}, crictl ${CRI_TOOLS_VERSION}, coredns ${COREDNS_VERSION}, CNI plugins ${CNI_PLUGINS_VERSION}"
ctrd="github.com/containerd/containerd/v2"
ctrd_ld="-s -w -X $ctrd/version.Version=${CONTAINERD_VERSION} -X $ctrd/version.Package=$ctrd"
CGO_ENABLED=0 gobin containerd "$ctrd/cmd/containerd@${CONTAINERD_VERSION}" -tags "no_btrfs no_devmapper no_zfs" -ldflags "$ctrd_ld"
CGO_ENABLED=0 gobin containerd-shim-runc-v2 "$ctrd/cmd/containerd-shim-runc-v2@${CONTAINERD_VERSION}" -ldflags "$ctrd_ld"
CGO_ENABLED=0 gobin ctr "$ctrd/cmd/ctr@${CONTAINERD_VERSION}" -ldflags "$ctrd_ld"
CGO_ENABLED=1 gobin runc "github.com/opencontainers/runc@${RUNC_VERSION}" -tags seccomp \
  -ldflags "-s -w -X main.version=${RUNC_VERSION#v}"
CGO_ENABLED=0 gobin crictl "sigs.k8s.io/cri-tools/cmd/crictl@${CRI_TOOLS_VERSION}" \
  -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=${CRI_TOOLS_VERSION}"
CGO_ENABLED=0 gobin coredns "github.com/coredns/coredns@${COREDNS_VERSION}" -ldflags "-s -w"
for p in main/bridge ipam/host-local main/loopback meta/portmap; do
  CGO_ENABLED=0 gobin "cni/${p#*/}" "github.com/containernetworking/plugins/plugins/$p@${CNI_PLUGINS_VERSION}" -ldflags "-s -w"
done

log "compiling pause ${PAUSE_TAG} from the Kubernetes release's pause.c"
k8s_dir="$(cd "$scripts/controlplane/kubernetes" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)"
gcc -Os -Wall -Werror -static -DVERSION="v${PAUSE_TAG}-agn" -o "$staging/pause" "$k8s_dir/build/pause/linux/pause.c"
strip "$staging/pause"

rm -rf "$dest"
mv "$staging" "$dest"
trap - EXIT
log "built the node binaries into $dest in $((SECONDS - start))s"
echo "$dest"
