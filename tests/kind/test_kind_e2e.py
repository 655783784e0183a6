"""End to end on a real kind cluster: env up --runtime kind, provider-drain with convergence, env down.

Drives the real CLI as a subprocess. Needs a Docker engine, ``kind`` and ``kubectl``; skipped
with the reason otherwise (``xtask.runtime.kind.kind_problems``). Run it with

    python -m pytest tests/kind -m kind -v

State and the kubeconfig live in a temporary folder; the cluster is named ``example`` after
the env, so the test refuses to touch a kind cluster of that name that it did not create.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agn.shards import assemble
from reportschema import parse_report
from xtask.reports import ENV_STATUS, ENV_UP
from xtask.runtime.kind import kind_problems

REPO_ROOT = Path(__file__).resolve().parents[2]
ENV = "example"
NAMESPACE = "agn-example"
PROBLEMS = kind_problems()

pytestmark = [
    pytest.mark.kind,
    pytest.mark.skipif(bool(PROBLEMS), reason="kind e2e needs Docker, kind and kubectl: " + "; ".join(PROBLEMS)),
]


def run(env: dict, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "xtask", *args], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def kubectl_json(env: dict, *args: str) -> dict:
    out = subprocess.run(
        ["kubectl", "--context", f"kind-{ENV}", "-n", NAMESPACE, *args, "-o", "json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return json.loads(out.stdout)


def overlay_states(env: dict) -> dict[str, dict[str, str]]:
    """Each consumer's admission state per provider, as kubectl shows the overlays: the index
    (RoutingOverlay) and, when sharded, its RoutingOverlayShards, assembled as a gateway does.
    Read after a converged drain, when the operator is not writing; indexes first, as the
    operator writes shards before the index."""
    indexes = kubectl_json(env, "get", "routingoverlays")["items"]
    shards = {s["metadata"]["name"]: s["spec"] for s in kubectl_json(env, "get", "routingoverlayshards")["items"]}
    out = {}
    for index in indexes:
        whole = assemble(index["spec"], shards)
        out[index["metadata"]["name"]] = {c["provider"]: c["admission_state"] for c in whole["candidates"]}
    return out


@pytest.fixture(scope="module")
def cli_env(tmp_path_factory):
    clusters = subprocess.run(["kind", "get", "clusters"], capture_output=True, text=True, check=True).stdout.split()
    if ENV in clusters:
        pytest.skip(
            f"a kind cluster named {ENV!r} already exists; the e2e test does not touch clusters it did not create"
        )
    home = tmp_path_factory.mktemp("kind-e2e")
    env = {
        **os.environ,
        "AGN_XTASK_HOME": str(home / "xtask"),
        "KUBECONFIG": str(home / "kubeconfig"),
        "PYTHONPATH": str(REPO_ROOT),
        "NO_COLOR": "1",
    }
    yield env
    run(env, "env", "down", "--env", ENV, timeout=300)  # whatever happened above


def test_up_drain_down(cli_env):
    up = run(cli_env, "env", "up", "--runtime", "kind", "--env", ENV, "--timeout", "300", "--output", "json")
    assert up.returncode == 0, up.stderr
    result = parse_report(up.stdout, ENV_UP)
    assert (result["runtime"], result["context"]) == ("kind", f"kind-{ENV}")
    assert set(result["served"]) == {"consumer-a", "consumer-b"}

    status = run(cli_env, "env", "status", "--env", ENV, "--output", "json")
    assert status.returncode == 0, status.stderr
    data = parse_report(status.stdout, ENV_STATUS)
    assert data["state"] == "up" and data["runtime"] == "kind"
    assert {c["name"] for c in data["components"]} >= {"agn-operator", "agn-gateway-consumer-a", "fake-provider-one"}

    again = run(cli_env, "env", "up", "--runtime", "kind", "--env", ENV, "--output", "json")
    assert again.returncode == 0, again.stderr
    assert (
        parse_report(again.stdout, ENV_UP)["started"] == []
    )  # idempotent: the cluster and every deployment are reused

    drain_args = [
        "env",
        "provider-drain",
        "--context",
        f"kind-{ENV}",
        "--namespace",
        NAMESPACE,
        "--gateway",
        "provider-a",
        "--network",
        "production",
        "--consumer",
        "consumer-a",
        "--consumer",
        "consumer-b",
        "--timeout",
        "120",
    ]
    drained = run(cli_env, *drain_args, "--reason", "kind e2e")
    assert drained.returncode == 0, drained.stdout + drained.stderr
    for states in overlay_states(cli_env).values():
        assert states["provider-one"] == states["provider-two"] == "existing_only"
        assert states["provider-three"] == states["provider-four"] == "admitted"

    undrained = run(cli_env, *drain_args, "--undrain")
    assert undrained.returncode == 0, undrained.stdout + undrained.stderr
    for states in overlay_states(cli_env).values():
        assert set(states.values()) == {"admitted"}

    down = run(cli_env, "env", "down", "--env", ENV, timeout=300)
    assert down.returncode == 0, down.stderr
    assert ENV not in subprocess.run(["kind", "get", "clusters"], capture_output=True, text=True).stdout.split()
    second = run(cli_env, "env", "down", "--env", ENV, timeout=300)
    assert second.returncode == 0 and "was not up" in second.stdout
