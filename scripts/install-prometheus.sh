#!/usr/bin/env bash
# Installs Debian's `prometheus` (with `promtool`) for `env up` (which starts its own Prometheus
# process per env, on loopback) and for the tests that lint every /metrics with `promtool`.
# Idempotent: nothing to do when both binaries are on PATH. Needs root and apt-get.
#
# The package's own service is never left running: the install runs under a policy-rc.d that
# forbids starting services (unless the host already has one), and where systemd runs, the
# prometheus unit is then disabled and stopped. `env up` starts the only Prometheus we use.
set -euo pipefail
say() { echo "install-prometheus: $*" >&2; }
if command -v prometheus >/dev/null && command -v promtool >/dev/null; then
  exit 0
fi
if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
  say "prometheus is missing and not installable here (needs root and apt-get); env up will not start it"
  exit 1
fi
policy=/usr/sbin/policy-rc.d
ours=0
if [[ ! -e "$policy" ]]; then
  printf '#!/bin/sh\n# Written by scripts/install-prometheus.sh for the install only.\nexit 101\n' > "$policy"
  chmod 755 "$policy"
  ours=1
fi
cleanup() { if (( ours )); then rm -f "$policy"; fi; }
trap cleanup EXIT
say "apt-get install prometheus (no recommends: no node exporter)"
install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >&2; }
install || { apt-get update -qq >&2 && install; }
if [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null; then
  systemctl disable --now prometheus.service >&2 || true
fi
command -v prometheus >/dev/null && command -v promtool >/dev/null
