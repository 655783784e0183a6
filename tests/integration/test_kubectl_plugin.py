"""``kubectl agn`` through the real kubectl (the one built with the control plane), which finds
``kubectl-agn`` on ``PATH`` (the venv's bin), against the real API server. ``$KUBECONFIG`` points
at a file that does not exist: only the flags kubectl hands over can reach the test cluster."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agn.kube import PROVIDERS
from xtask.drain.core.holds import holds_of
from xtask.reports import ENV_DRAINS, PROVIDER_DRAIN

pytestmark = pytest.mark.integration

BIN = Path(sys.executable).parent


@pytest.fixture
def kubectl(control_plane, tmp_path):
    plugin = BIN / "kubectl-agn"
    assert plugin.exists(), f"{plugin} missing: install the project (scripts/setup.sh or pip install -e .)"
    env = {**control_plane.env(), "KUBECONFIG": str(tmp_path / "no-such-kubeconfig"), "NO_COLOR": "1"}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"

    def run(*args: str) -> subprocess.CompletedProcess:
        argv = [str(control_plane.assets / "kubectl"), "agn", *args]
        return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)

    return run


@pytest.fixture
def provider(kube, namespace) -> str:
    spec = {"endpoint": "http://127.0.0.1:9/p1", "providerGateway": "gw-a", "selectionGroup": "chat"}
    kube.create(
        PROVIDERS,
        namespace,
        {"apiVersion": "agn.dev/v1alpha1", "kind": "InferenceProvider", "metadata": {"name": "p1"}, "spec": spec},
    )
    return "p1"


def test_provider_drain_and_drains_honour_kubectls_global_flags(
    kubectl, control_plane, kube, namespace, provider, tmp_path
):
    where = ("--kubeconfig", str(control_plane.kubeconfig), "--context", control_plane.context)
    drained = kubectl(
        f"--namespace={namespace}",
        "provider-drain",
        *where,
        "--provider",
        provider,
        "--holder",
        "ann@host",
        "--reason",
        "kernel",
        "--journal-dir",
        str(tmp_path / "journal"),
        "-o",
        "json",
    )
    assert drained.returncode == 0, drained.stderr
    report = json.loads(drained.stdout)
    assert report["kind"] == PROVIDER_DRAIN and report["namespace"] == namespace
    assert [h["holder"] for h in holds_of(kube.get(PROVIDERS, namespace, provider))] == ["ann@host"]

    for args in (("drains", "-n", namespace, *where, "-o", "json"), (*where, "-n", namespace, "drains", "-o", "json")):
        listed = kubectl(*args)
        assert listed.returncode == 0, listed.stderr
        data = json.loads(listed.stdout)
        assert data["kind"] == ENV_DRAINS and data["namespace"] == namespace
        assert [(p["provider"], [h["holder"] for h in p["holds"]]) for p in data["providers"]] == [
            (provider, ["ann@host"])
        ]


def test_without_the_flags_kubectls_kubeconfig_is_used_and_its_failure_reported(kubectl, namespace, provider):
    listed = kubectl("drains", "-n", namespace)
    assert listed.returncode == 1
    assert "no-such-kubeconfig" in listed.stderr and "does not exist" in listed.stderr


def test_a_flag_status_cannot_honour_is_exit_2_and_help_comes_through_kubectl(kubectl, namespace):
    status = kubectl("status", "-n", namespace)
    assert status.returncode == 2
    assert f"does not take --namespace (given '{namespace}')" in status.stderr
    shown = kubectl("--help")
    assert shown.returncode == 0 and "Usage: kubectl agn" in shown.stdout and "provider-drain" in shown.stdout
