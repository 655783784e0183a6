"""``env up/status/down --runtime cluster`` as a user runs them (the CLI as a subprocess), against
the test control plane as the "existing cluster".

No kubelet and no kube-controller-manager run there, so Deployments never roll out: ``up`` is
tested with ``--dry-run`` (server-side dry runs), with ``--no-wait`` (the real apply) and with
a bounded ``--timeout`` (the wait fails, naming the Deployments, and a fresh bring-up is rolled
back). On a real cluster ``up`` waits for the rollouts and the first overlays.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import yaml

from agn.kube import CONSUMERS, PROVIDERS
from envcli import REPO, Cli
from reportschema import parse_report
from xtask.reports import ENV_DOWN, ENV_UP

pytestmark = pytest.mark.integration

LABEL = "agn.dev/env"


@pytest.fixture
def user(tmp_path, control_plane):
    """A CLI with its own state folder and an envs folder whose example env uses ``namespace``."""
    cli = Cli(tmp_path)
    envs = tmp_path / "envs"
    envs.mkdir()

    def run(namespace: str, *args: str, env_name: str = "example"):
        data = yaml.safe_load((REPO / "envs" / "example.yaml").read_text())
        data["name"], data["namespace"] = env_name, namespace
        (envs / f"{env_name}.yaml").write_text(yaml.safe_dump(data))
        where = ("--context", control_plane.context, "--kubeconfig", str(control_plane.kubeconfig))
        full = [*args[:2], "--env", env_name, *args[2:]]
        if args[:2] == ("env", "up"):
            full += ["--runtime", "cluster", *where]
        return cli(*full, env={"AGN_XTASK_ENVS_DIR": str(envs)})

    return run


def labelled(kube, namespace: str, env: str = "example") -> list[str]:
    found = []
    for api_version, kind in (
        ("apps/v1", "Deployment"),
        ("v1", "ServiceAccount"),
        ("agn.dev/v1alpha1", "InferenceProvider"),
    ):
        found += [
            f"{kind} {o['metadata']['name']}"
            for o in kube.list_objects(api_version, kind, namespace=namespace, label_selector=f"{LABEL}={env}")
        ]
    return found


def test_dry_run_validates_every_object_and_changes_nothing(user, kube, namespace, tmp_path):
    proc = user(namespace, "env", "up", "--dry-run", "--output", "json")
    assert proc.returncode == 0, proc.stderr
    report = parse_report(proc.stdout, ENV_UP)
    assert report["dryRun"] is True and report["runtime"] == "cluster" and report["started"] == []
    kinds = {line.split()[0] for line in report["applied"]}
    assert kinds == {"ServiceAccount", "Role", "RoleBinding", "Service", "Deployment"} | {
        "InferenceNetwork",
        "InferenceConsumer",
        "InferenceProvider",
    }
    assert f"Deployment {namespace}/agn-operator" in report["applied"]
    assert "skipped" not in report  # the namespace exists and the CRDs are installed: all validated
    # Nothing stored, nothing recorded.
    assert labelled(kube, namespace) == [] and kube.list(PROVIDERS, namespace)[0] == []
    assert not (tmp_path / "state").exists()


def test_dry_run_into_a_namespace_that_does_not_exist_says_what_it_could_not_validate(user, kube):
    missing = f"t-{uuid.uuid4().hex[:10]}"
    proc = user(missing, "env", "up", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "nothing was changed" in proc.stdout
    assert f"not validated: Deployment {missing}/agn-operator (namespace {missing} does not exist yet)" in proc.stdout
    assert not kube.namespace_exists(missing)


def test_up_applies_labelled_objects_and_down_removes_only_those(user, kube, namespace, control_plane):
    # Objects up does not own: one nobody labelled, one of another env; both must survive down.
    kube.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "bystander"}}, namespace=namespace)
    other = {LABEL: "other", "app.kubernetes.io/managed-by": "agn-xtask"}
    kube.apply(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "other-env", "labels": other}},
        namespace=namespace,
    )

    proc = user(namespace, "env", "up", "--no-wait", "--output", "json")
    assert proc.returncode == 0, proc.stderr
    report = parse_report(proc.stdout, ENV_UP)
    assert report["context"] == control_plane.context and "deployment agn-operator" in report["started"]
    assert "Deployment agn-operator" in labelled(kube, namespace)
    assert {o["metadata"]["name"] for o in kube.list(CONSUMERS, namespace)[0]} == {"consumer-a", "consumer-b"}
    # The namespace existed: it was used, not taken over.
    assert LABEL not in (kube.core.read_namespace(namespace).metadata.labels or {})

    status = user(namespace, "env", "status", "--output", "json")
    assert status.returncode == 0, status.stderr
    data = json.loads(status.stdout)
    assert (data["runtime"], data["context"], data["state"]) == ("cluster", control_plane.context, "degraded")
    operator = next(c for c in data["components"] if c["name"] == "agn-operator")
    assert (operator["replicas"], operator["healthy"]) == ("0/1", False)  # no kubelet here

    again = user(namespace, "env", "up", "--no-wait", "--output", "json")  # a repair: nothing new
    assert again.returncode == 0 and parse_report(again.stdout, ENV_UP)["started"] == []

    down = user(namespace, "env", "down", "--output", "json")
    assert down.returncode == 0, down.stderr
    result = parse_report(down.stdout, ENV_DOWN)
    assert f"Deployment {namespace}/agn-operator" in result["stopped"] and result["errors"] == []
    assert labelled(kube, namespace) == []
    assert kube.list(PROVIDERS, namespace)[0] == []
    survivors = {o["metadata"]["name"] for o in kube.list_objects("v1", "ServiceAccount", namespace=namespace)}
    assert {"bystander", "other-env"} <= survivors
    assert kube.namespace_exists(namespace)  # not created by up: never deleted
    assert kube.crd_established("inferenceproviders.agn.dev")  # CRDs are never deleted

    second = user(namespace, "env", "down", "--output", "json")  # idempotent
    assert second.returncode == 0 and parse_report(second.stdout, ENV_DOWN)["wasUp"] is False


def test_a_namespace_up_created_is_deleted_by_down(user, kube):
    fresh = f"t-{uuid.uuid4().hex[:10]}"
    try:
        proc = user(fresh, "env", "up", "--no-wait")
        assert proc.returncode == 0, proc.stderr
        assert kube.core.read_namespace(fresh).metadata.labels[LABEL] == "example"
        down = user(fresh, "env", "down", "--output", "json")
        assert down.returncode == 0, down.stderr
        assert f"Namespace {fresh}" in parse_report(down.stdout, ENV_DOWN)["stopped"]
        # Gone, or terminating (no namespace controller runs here to finish it).
        assert not kube.namespace_exists(fresh) or kube.core.read_namespace(fresh).metadata.deletion_timestamp
    finally:
        kube.delete_namespace(fresh)


def test_a_bounded_wait_names_the_deployments_and_rolls_a_fresh_up_back(user, kube, namespace, tmp_path):
    proc = user(namespace, "env", "up", "--timeout", "2")
    assert proc.returncode == 1
    assert "deployments not rolled out within 2s:" in proc.stderr
    assert "agn-operator: its controller has not seen the new spec yet" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert labelled(kube, namespace) == []  # what this run applied is removed again
    assert not (tmp_path / "state" / "example").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (("--context", "nope"), "context 'nope'"),
        ((), "no --context given"),
    ],
)
def test_unusable_context_is_named_and_nothing_changes(tmp_path, control_plane, args, message):
    cli = Cli(tmp_path)
    proc = cli("env", "up", "--runtime", "cluster", "--kubeconfig", str(control_plane.kubeconfig), *args)
    assert proc.returncode == 1, proc.stdout
    assert "the cluster runtime cannot be used:" in proc.stderr and message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "state").exists()


def test_unreachable_cluster_is_named(tmp_path, control_plane):
    from xtask.runtime.controlplane import free_port

    config = yaml.safe_load(Path(control_plane.kubeconfig).read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"
    path = tmp_path / "unreachable"
    path.write_text(yaml.safe_dump(config))
    proc = Cli(tmp_path)("env", "up", "--runtime", "cluster", "--kubeconfig", str(path), "--context", "local-tests")
    assert proc.returncode == 1
    assert "the cluster runtime cannot be used: context local-tests:" in proc.stderr
    assert not (tmp_path / "state").exists()


def test_flags_of_the_cluster_runtime_are_refused_by_the_others(tmp_path):
    proc = Cli(tmp_path)("env", "up", "--runtime", "local", "--context", "x")
    assert proc.returncode == 2
    assert "--context: not an option of the local runtime" in proc.stderr
    assert "runtimes that take it: cluster" in proc.stderr
    assert not (tmp_path / "state").exists()
