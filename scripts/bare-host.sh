#!/usr/bin/env bash
# Runs a command as on a newcomer's machine, where no setup script ever ran:
#
#   - an empty HOME (no kubeconfig, no caches, no state) and a clean environment (env -i);
#   - a PATH of the system's programs without podman, docker, kind, kubectl, Go, Prometheus or
#     the control plane (and none of /usr/local, ~/go, cargo or pyenv), plus python3;
#   - where it may make a private mount namespace (root with unshare): the container settings
#     (/etc/containers, /usr/share/containers) and /lib/modules hidden behind empty folders;
#   - the hard limit of open files a Debian login has (20000) when this one allows more.
#
# .ci/run runs the unit suite this way before it sets the machine up, so a unit test that reads
# the machine it runs on (rather than a fixture) fails in CI instead of on a newcomer's host.
# It changes nothing outside a temporary folder, which it removes.
#
#   scripts/bare-host.sh [--keep PROGRAM]... [--set NAME=VALUE]... COMMAND [ARG...]
#     --keep PROGRAM     put this program (as found on today's PATH) on the bare PATH too: a newcomer
#                        with Go installed is `--keep go` (scripts/test.sh then builds the control plane)
#     --set NAME=VALUE   set a variable in the bare environment (KUBEBUILDER_ASSETS=/dir: a newcomer
#                        who brings the control-plane binaries)
set -euo pipefail
usage() { echo "usage: scripts/bare-host.sh [--keep PROGRAM]... [--set NAME=VALUE]... COMMAND [ARG...]" >&2; exit 2; }
keep=()
extra=()
while [[ $# -gt 0 && ( "$1" == --keep || "$1" == --set ) ]]; do
  [[ $# -ge 2 ]] || usage
  if [[ "$1" == --keep ]]; then
    found="$(command -v "$2")" || { echo "bare-host: --keep $2: not on PATH" >&2; exit 2; }
    keep+=("$found")
  else
    [[ "$2" =~ ^[A-Za-z_][A-Za-z0-9_]*= ]] || { echo "bare-host: --set $2: not NAME=VALUE" >&2; exit 2; }
    extra+=("$2")
  fi
  shift 2
done
[[ $# -gt 0 ]] || usage

bare="$(mktemp -d "${TMPDIR:-/tmp}/agn-bare-host.XXXXXX")"
trap 'rm -rf "$bare"' EXIT
mkdir -p "$bare/home" "$bare/bin" "$bare/empty"

# Programs a fresh machine does not have until the setup scripts install them.
hidden=" podman docker dockerd containerd ctr nerdctl runc crun kind kubectl go gofmt prometheus promtool etcd
 kube-apiserver llama-server debootstrap "
for dir in /usr/sbin /usr/bin /sbin /bin; do
  [[ -d "$dir" ]] || continue
  for program in "$dir"/*; do
    name="${program##*/}"
    [[ -x "$program" && ! -d "$program" && "$hidden" != *" $name "* && ! -e "$bare/bin/$name" ]] || continue
    ln -s "$program" "$bare/bin/$name"
  done
done
for program in ${keep[@]+"${keep[@]}"}; do ln -sf "$program" "$bare/bin/${program##*/}"; done
python="$(command -v "${PYTHON:-python3}")"
ln -sf "$("$python" -c 'import sys; print(sys.executable)')" "$bare/bin/python3"

limit=20000
nofile="$(ulimit -Hn)"
if [[ "$nofile" == unlimited || "$nofile" -gt "$limit" ]]; then ulimit -Hn "$limit" && ulimit -Sn "$limit"; fi

environment=(HOME="$bare/home" PATH="$bare/bin" LANG=C.UTF-8 TMPDIR="${TMPDIR:-/tmp}" TERM=dumb ${extra[@]+"${extra[@]}"})
if [[ $(id -u) -eq 0 ]] && unshare --mount --propagation private true 2>/dev/null; then
  # In a private mount namespace: hide what the host setup writes, then drop to the bare environment.
  hide='for d in /etc/containers /usr/share/containers /lib/modules; do [ -d "$d" ] && mount --bind "$0" "$d"; done; exec "$@"'
  status=0
  unshare --mount --propagation private sh -c "$hide" "$bare/empty" env -i "${environment[@]}" "$@" || status=$?
  exit "$status"
fi
echo "bare-host: not root or no unshare here: /etc/containers, /usr/share/containers and /lib/modules stay visible" >&2
status=0
env -i "${environment[@]}" "$@" || status=$?
exit "$status"
