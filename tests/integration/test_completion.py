"""Shell completion of ``--provider`` and ``--gateway`` lists the InferenceProviders of the real
API server, through the shell protocol a completion script speaks (``_XTASK_COMPLETE``), in the
namespace given before it (else the context's); an API server that refuses, or a namespace with
no providers, completes nothing and fails nothing."""

from __future__ import annotations

import subprocess
import sys

import pytest

from agn.kube import PROVIDERS
from xtask.__main__ import COMPLETE_VAR

pytestmark = pytest.mark.integration


@pytest.fixture
def providers(kube, namespace) -> str:
    for name, gateway in (("p-one", "gw-a"), ("p-two", "gw-a"), ("q-three", "gw-b")):
        spec = {"endpoint": f"http://127.0.0.1:9/{name}", "providerGateway": gateway, "selectionGroup": "chat"}
        kube.create(
            PROVIDERS,
            namespace,
            {"apiVersion": "agn.dev/v1alpha1", "kind": "InferenceProvider", "metadata": {"name": name}, "spec": spec},
        )
    return namespace


def complete(control_plane, words: str) -> list[str]:
    """What bash's completion offers for ``words`` (its last word the one being typed)."""
    parts = words.split(" ")
    env = {**control_plane.env(), COMPLETE_VAR: "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(len(parts) - 1)}
    out = subprocess.run([sys.executable, "-m", "xtask"], env=env, capture_output=True, text=True, timeout=60)
    assert (out.returncode, out.stderr) == (0, ""), out
    return [line.split(",", 1)[1] for line in out.stdout.splitlines() if line]  # nothing: one empty line


def test_provider_and_gateway_names_come_from_the_cluster(control_plane, providers):
    ctx = control_plane.context
    base = f"xtask env provider-drain --context {ctx} -n {providers}"
    assert complete(control_plane, f"{base} --provider ") == ["p-one", "p-two", "q-three"]
    assert complete(control_plane, f"{base} --provider p-") == ["p-one", "p-two"]
    assert complete(control_plane, f"{base} --gateway ") == ["gw-a", "gw-b"]
    assert complete(control_plane, f"{base} --undrain --gateway gw-b") == ["gw-b"]
    # The namespace may come after: the context's own (default) has none of them.
    assert complete(control_plane, f"xtask env provider-drain --context {ctx} --provider ") == []
    assert complete(
        control_plane, f"xtask env provider-drain --context {ctx} --namespace {providers} --provider q"
    ) == ["q-three"]


def test_a_server_that_refuses_completes_nothing(control_plane, providers, tmp_path):
    # A user the API server does not know: every request is 401, completion offers nothing.
    from agn import kubeconfig

    config = kubeconfig.load(str(control_plane.kubeconfig)).config
    cluster = next(c for c in config["clusters"])
    path = tmp_path / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: c, cluster: {{server: '{cluster['cluster']['server']}', insecure-skip-tls-verify: true}}}}]\n"
        "users: [{name: u, user: {token: not-a-token}}]\n"
        "contexts: [{name: stranger, context: {cluster: c, user: u}}]\n"
    )
    path.chmod(0o600)
    words = f"xtask env provider-drain --kubeconfig {path} --context stranger -n {providers} --provider "
    assert complete(control_plane, words) == []
