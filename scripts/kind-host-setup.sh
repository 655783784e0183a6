#!/usr/bin/env bash
# Prepares this host to run kind clusters for `env up --runtime kind`, and says what it changes.
#
#   scripts/kind-host-setup.sh           apply every step that is missing (needs root)
#   scripts/kind-host-setup.sh --check   only report what is missing; exit 1 when something is
#
# Steps (each is skipped when already done):
#   1. packages: podman, runc, debootstrap, gcc, libseccomp-dev (Debian/Ubuntu apt; runc is only a
#      recommendation of Debian's podman, and step 2 makes it podman's runtime). Docker's
#      `--privileged` needs every capability; where processes lack one (CAP_SYS_RESOURCE on
#      some VMs), Docker cannot start kind nodes and podman can.
#   2. podman settings for privileged nodes, in /etc/containers/containers.conf.d/50-agn-kind.conf:
#      open-file and process limits within this host's hard limits (podman asks for more than
#      such hosts allow) and the runc runtime (crun refuses hybrid cgroup v1 hosts).
#   3. an empty /lib/modules when the host has none: kind always mounts it into the nodes.
#   4. kind (sigs.k8s.io/kind, version below) built from the Go module proxy, and the
#      control-plane kubectl (scripts/install-control-plane.sh), linked into /usr/local/bin.
# The node-side settings live in the node image (containerd's restrict_oom_score_adj) and in
# the kind configuration the runtime renders (the kubelet's failCgroupV1: false on cgroup v1
# hosts); docs/kind.md lists them all.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KIND_VERSION=v0.33.0
conf=/etc/containers/containers.conf.d/50-agn-kind.conf
cache_root="${AGN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/agn-xtask}"
kind_bin="$cache_root/tools/kind-$KIND_VERSION/kind"
check=0
[[ "${1:-}" == "--check" ]] && check=1
missing=0

say() { echo "kind-host-setup: $*" >&2; }
need() {  # need <description>: in --check mode record it, else announce the change
  missing=1
  if (( check )); then say "missing: $1"; else say "doing: $1"; fi
  return $check
}

nofile_hard="$(ulimit -Hn)"; nproc_hard="$(ulimit -Hu)"
[[ "$nofile_hard" == unlimited ]] && nofile_hard=1048576
[[ "$nproc_hard" == unlimited ]] && nproc_hard=32768
(( nproc_hard > 32768 )) && nproc_hard=32768
want_conf="# Written by scripts/kind-host-setup.sh (AGN xtask): privileged kind nodes on podman.
[containers]
default_ulimits = [\"nofile=${nofile_hard}:${nofile_hard}\", \"nproc=${nproc_hard}:${nproc_hard}\"]
[engine]
runtime = \"runc\""

pkgs=()
command -v podman >/dev/null || pkgs+=(podman)
command -v runc >/dev/null || pkgs+=(runc)
command -v debootstrap >/dev/null || pkgs+=(debootstrap)
command -v gcc >/dev/null || pkgs+=(gcc)
[[ -e /usr/include/seccomp.h ]] || pkgs+=(libseccomp-dev)
if (( ${#pkgs[@]} )) && need "apt-get install ${pkgs[*]}"; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${pkgs[@]}" >&2 \
    || { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${pkgs[@]}" >&2; }
fi

if [[ ! -f "$conf" ]] || [[ "$(cat "$conf")" != "$want_conf" ]]; then
  if need "write $conf (nofile=$nofile_hard, nproc=$nproc_hard, runtime runc)"; then
    mkdir -p "$(dirname "$conf")"
    printf '%s\n' "$want_conf" > "$conf.tmp" && mv "$conf.tmp" "$conf"
  fi
fi

if [[ ! -d /lib/modules ]] && need "mkdir /lib/modules (empty: kind mounts it into every node)"; then
  mkdir -p /lib/modules
fi

if [[ ! -x "$kind_bin" ]] && need "build kind $KIND_VERSION into $kind_bin"; then
  tmp="$(mktemp -d)"
  GOTOOLCHAIN=local CGO_ENABLED=0 GOBIN="$tmp" go install "sigs.k8s.io/kind@$KIND_VERSION" >&2
  mkdir -p "$(dirname "$kind_bin")" && mv "$tmp/kind" "$kind_bin" && rmdir "$tmp"
fi
if [[ "$(readlink /usr/local/bin/kind 2>/dev/null)" != "$kind_bin" ]] && need "link /usr/local/bin/kind -> $kind_bin"; then
  ln -sfn "$kind_bin" /usr/local/bin/kind
fi
if (( check )); then
  kubectl_bin="$("$here/install-control-plane.sh" --print-dir)/kubectl"
else
  kubectl_bin="$("$here/install-control-plane.sh" | tail -1)/kubectl"
fi
if [[ "$(readlink /usr/local/bin/kubectl 2>/dev/null)" != "$kubectl_bin" ]] \
  && need "link /usr/local/bin/kubectl -> $kubectl_bin (the control plane's kubectl)"; then
  ln -sfn "$kubectl_bin" /usr/local/bin/kubectl
fi

if (( check )); then
  (( missing )) && exit 1
  say "nothing missing"
fi
