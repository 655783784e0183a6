# Sourced by scripts/install-control-plane.sh and scripts/kindnode/build-binaries.sh.
# k8s_ldflags DIR: the -ldflags that make a Kubernetes binary built from the wrapper module in
# DIR report its release (`kubectl version`, /version), as a release build does. The release
# commit is included when the Go module proxy records it. Needs KUBERNETES_VERSION.
k8s_ldflags() {
  local dir="$1" commit minor flags pkg
  commit="$(cd "$dir" && go mod download -json "k8s.io/kubernetes@${KUBERNETES_VERSION}" \
    | python3 -c 'import json,sys; print((json.load(sys.stdin).get("Origin") or {}).get("Hash",""))' || true)"
  minor="${KUBERNETES_VERSION#v1.}"; minor="${minor%%.*}"
  flags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    flags+=" -X $pkg.gitVersion=${KUBERNETES_VERSION} -X $pkg.gitMajor=1 -X $pkg.gitMinor=${minor}"
    flags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    [[ -n "$commit" ]] && flags+=" -X $pkg.gitCommit=${commit}"
  done
  echo "$flags"
}
