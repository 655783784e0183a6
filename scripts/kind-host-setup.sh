#!/usr/bin/env bash
# Prepares this host to run kind clusters for `env up --runtime kind`. It lists what it would
# change first, and changes the host only when told to:
#
#   scripts/kind-host-setup.sh           list every missing step; change nothing (exit 1 when a step is missing)
#   scripts/kind-host-setup.sh --check   the same (kept for scripts that used it)
#   scripts/kind-host-setup.sh --yes     list the missing steps, then do them (needs root); CI=true means --yes
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
#      A /usr/local/bin/kind or /usr/local/bin/kubectl that is not this script's own link (a
#      link into the cache below) is never replaced: it is reported and left as it is.
# The node-side settings live in the node image (containerd's restrict_oom_score_adj) and in
# the kind configuration the runtime renders (the kubelet's failCgroupV1: false on cgroup v1
# hosts); docs/kind.md lists them all.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KIND_VERSION=v0.33.0
# AGN_HOST_ROOT (tests only) puts every host path this script checks or writes under a folder.
root="${AGN_HOST_ROOT:-}"
conf="$root/etc/containers/containers.conf.d/50-agn-kind.conf"
modules="$root/lib/modules"
bindir="$root/usr/local/bin"
cache_root="${AGN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/agn-xtask}"
kind_bin="$cache_root/tools/kind-$KIND_VERSION/kind"
apply=0
[[ "${CI:-}" == true ]] && apply=1
case "${1:-}" in
  --yes) apply=1 ;;
  --check) apply=0 ;;
  "") ;;
  *) echo "kind-host-setup: unknown argument ${1@Q} (use --yes, or --check)" >&2; exit 2 ;;
esac
steps=()   # descriptions, in order
actions=() # the function doing each, with its arguments

say() { echo "kind-host-setup: $*" >&2; }
step() {  # step <description> <function> [args...]: a missing step, done later with --yes
  steps+=("$1"); shift; actions+=("$(printf '%q ' "$@")")
}
ours() {  # ours <link> <cache prefix>: absent, or a link into our cache (safe to (re)point)
  [[ ! -e "$1" && ! -L "$1" ]] && return 0
  [[ -L "$1" && "$(readlink "$1")" == "$2"/* ]]
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
[[ -e "$root/usr/include/seccomp.h" ]] || pkgs+=(libseccomp-dev)
install_packages() {
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@" >&2 \
    || { apt-get update >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@" >&2; }
}
write_conf() {
  mkdir -p "$(dirname "$conf")"
  printf '%s\n' "$want_conf" > "$conf.tmp" && mv "$conf.tmp" "$conf"
}
build_kind() {
  local tmp; tmp="$(mktemp -d)"
  GOTOOLCHAIN=local CGO_ENABLED=0 GOBIN="$tmp" go install "sigs.k8s.io/kind@$KIND_VERSION" >&2
  mkdir -p "$(dirname "$kind_bin")" && mv "$tmp/kind" "$kind_bin" && rmdir "$tmp"
}
build_control_plane() { "$here/install-control-plane.sh" >/dev/null; }
link() { mkdir -p "$(dirname "$2")" && ln -sfn "$1" "$2"; }

(( ${#pkgs[@]} )) && step "apt-get install ${pkgs[*]}" install_packages "${pkgs[@]}"
if [[ ! -f "$conf" ]] || [[ "$(cat "$conf")" != "$want_conf" ]]; then
  step "write $conf (nofile=$nofile_hard, nproc=$nproc_hard, runtime runc)" write_conf
fi
[[ -d "$modules" ]] || step "mkdir $modules (empty: kind mounts it into every node)" mkdir -p "$modules"
[[ -x "$kind_bin" ]] || step "build kind $KIND_VERSION into $kind_bin" build_kind
kubectl_bin="$("$here/install-control-plane.sh" --print-dir)/kubectl"
[[ -x "$kubectl_bin" ]] || step "build the control-plane binaries (scripts/install-control-plane.sh) for $kubectl_bin" build_control_plane
for pair in "kind:$kind_bin" "kubectl:$kubectl_bin"; do
  name="${pair%%:*}"; target="${pair#*:}"; dest="$bindir/$name"
  [[ "$(readlink "$dest" 2>/dev/null)" == "$target" ]] && continue
  if ours "$dest" "$cache_root"; then
    step "link $dest -> $target" link "$target" "$dest"
  else
    say "leaving $dest alone: it is not this script's link (it is $(readlink "$dest" 2>/dev/null || echo 'a file')); $name on PATH is $(command -v "$name" || echo 'missing')"
  fi
done

if (( ${#steps[@]} == 0 )); then
  say "nothing missing"
  exit 0
fi
say "missing steps:"
for s in "${steps[@]}"; do say "  - $s"; done
if (( ! apply )); then
  say "nothing changed; run with --yes (or CI=true) to do them"
  exit 1
fi
for i in "${!steps[@]}"; do
  say "doing: ${steps[$i]}"
  eval "${actions[$i]}"  # a function and its arguments, each quoted by step()
done
say "done"
