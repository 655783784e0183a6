"""The kind runtime's command sequence, driven by the fake runner and a fake Kube (no Docker, no cluster)."""

from __future__ import annotations

import json
import time

import pytest

from agn.kube import CONSUMERS, NETWORKS, OVERLAYS, PROVIDERS
from agn.model import compute_candidates, next_overlay
from agn.objects import consumer_view, network_view, provider_view, rfc3339
from fakes import FakeCmdRunner
from reportschema import check_report
from xtask.crds import crd_documents
from xtask.envdef import ENVS_DIR, load_env
from xtask.errors import CommandFailed, RuntimeUnavailable, XtaskError
from xtask.manifests import deployment_names, render
from xtask.reports import ENV_STATUS, envelope
from xtask.runtime.kind import KindEnv
from xtask.state import EnvRecord, env_dir

ENV = "example"


class FakeKube:
    """Records applied objects. Reads show the env as the real operator and gateways would leave
    it: every provider probed healthy, every consumer serving overlay revision 1, computed by
    the operator's own model."""

    def __init__(self, envdef) -> None:
        self.envdef = envdef
        self.applied: list[dict] = []
        self.closed = False

    def apply(self, body, *, namespace=None, dry_run=False):
        self.applied.append(body)
        return body

    def crd_established(self, name):
        return True

    def ensure_namespace(self, name):
        pass

    def list(self, res, namespace, **_):
        now = time.time()
        providers = self.envdef.provider_objects({p.name: f"http://{p.name}.svc:8000" for p in self.envdef.providers})
        for p in providers:
            p["status"] = {"probe": {"healthy": True, "metricsObservedAt": rfc3339(now)}}
        networks = self.envdef.network_objects()
        consumers = self.envdef.consumer_objects()
        for c in consumers:
            c["status"] = {"acceptedRevision": 1, "servingRevision": 1}
        if res is PROVIDERS:
            return providers, "1"
        if res is NETWORKS:
            return networks, "1"
        if res is CONSUMERS:
            return consumers, "1"
        assert res is OVERLAYS
        views = [provider_view(p) for p in providers]
        overlays = []
        for c in consumers:
            view = consumer_view(c)
            network = next(network_view(n) for n in networks if n["metadata"]["name"] == view.network)
            overlay = next_overlay(
                None, compute_candidates(views, network, view, now=now), network=network.name, consumer=view.name
            )
            overlays.append({"metadata": {"name": view.name}, "spec": overlay.to_spec()})
        return overlays, "1"

    def close(self):
        self.closed = True


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("AGN_XTASK_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    return tmp_path


@pytest.fixture
def envdef():
    return load_env(ENV)


def deployment_list(names):
    return json.dumps(
        {
            "items": [
                {"metadata": {"name": n}, "spec": {"replicas": 1}, "status": {"readyReplicas": 1, "updatedReplicas": 1}}
                for n in names
            ]
        }
    )


def make(envdef, *, clusters=(), deployments=(), fail=None, tools=("docker", "kind", "kubectl")):
    """A KindEnv on a fake runner. ``fail`` is an argv prefix that exits 1."""
    handlers = {
        ("kind", "get", "clusters"): lambda argv: (0, "".join(f"{c}\n" for c in clusters)),
        ("docker", "image", "inspect"): lambda argv: (0, "sha256:abc\n"),
        ("kubectl",): lambda argv: (0, deployment_list(deployments) if "get" in argv else ""),
    }
    if fail:
        handlers[fail] = lambda argv: (1, "boom")
    runner = FakeCmdRunner(handlers=handlers)
    kube = FakeKube(envdef)
    kind = KindEnv(
        ENV,
        runner=runner,
        kube_factory=lambda kubeconfig, context: kube,
        which=lambda tool: f"/usr/bin/{tool}" if tool in tools else None,
    )
    return kind, runner, kube


def commands(runner) -> list[str]:
    """Each call as 'tool subcommand ...' without the long flag values, for readable assertions."""
    out = []
    for argv in runner.calls:
        if argv[0] == "kubectl":
            argv = [a for a in argv[7:] if not a.startswith("--timeout")]  # drop --kubeconfig/--context/--namespace
            out.append("kubectl " + " ".join(argv[:3]))
        else:
            out.append(" ".join(argv[:3]))
    return out


def up(kind, envdef, **kwargs):
    lines: list[str] = []
    result = kind.up(envdef, progress=lines.append, wait_timeout=5, **kwargs)
    return result, lines


def test_create_runs_the_whole_sequence_and_records_the_env(home, envdef):
    kind, runner, kube = make(envdef)
    result, _ = up(kind, envdef)

    deployments = deployment_names(render(envdef))
    assert commands(runner) == [
        "docker info --format",
        "kind get clusters",
        "kind create cluster",
        "kind export kubeconfig",
        "docker build -t",
        "docker image inspect",
        "kind load docker-image",
        "kubectl get deployments -l",
        *(f"kubectl rollout status deployment/{d}" for d in deployments),
    ]
    create = runner.calls[2]
    assert create[create.index("--name") + 1] == ENV
    assert create[create.index("--config") + 1] == str(ENVS_DIR / "kind-example.yaml")
    assert "--retain" not in create
    assert runner.calls[6] == ["kind", "load", "docker-image", "agn:dev", "--name", ENV]
    # CRDs first, then exactly the rendered objects, carrying the built image's id.
    assert kube.applied == crd_documents() + render(envdef, image_id="sha256:abc")
    assert kube.closed
    record = EnvRecord.load(ENV)
    assert (record.runtime, record.context, record.namespace) == ("kind", "kind-example", envdef.namespace)
    assert result["context"] == "kind-example"
    assert result["started"] == [f"kind cluster {ENV}", *(f"deployment {d}" for d in deployments)]
    assert result["served"] == {c.name: 1 for c in envdef.consumers}


def test_existing_cluster_is_reused_not_created(home, envdef):
    deployments = deployment_names(render(envdef))
    kind, runner, _ = make(envdef, clusters=["other", ENV], deployments=deployments)
    result, lines = up(kind, envdef)
    assert not any(argv[:2] == ["kind", "create"] for argv in runner.calls)
    assert lines[0] == f"create kind cluster {ENV}: already done"
    assert result["started"] == []  # the CLI reports "already up; nothing started"
    assert EnvRecord.load(ENV).runtime == "kind"


def test_repair_recreates_only_the_missing_deployment(home, envdef):
    deployments = deployment_names(render(envdef))
    kind, runner, kube = make(envdef, clusters=[ENV], deployments=[d for d in deployments if d != "fake-provider-one"])
    result, _ = up(kind, envdef)
    assert result["started"] == ["deployment fake-provider-one"]
    assert "kubectl rollout status deployment/fake-provider-one" in commands(runner)
    assert kube.applied[len(crd_documents()) :] == render(envdef, image_id="sha256:abc")


def test_recorded_env_whose_cluster_vanished_is_recreated(home, envdef):
    EnvRecord(ENV, "kind", "kind-example", str(home / "kubeconfig"), envdef.namespace).save()
    kind, runner, _ = make(envdef)
    result, _ = up(kind, envdef)
    assert ["kind", "create", "cluster"] == runner.calls[2][:3]
    assert result["started"][0] == f"kind cluster {ENV}"


@pytest.mark.parametrize("fail", [("kind", "load"), ("kubectl", "--kubeconfig"), ("docker", "build")])
def test_failure_after_creating_the_cluster_deletes_it(home, envdef, fail):
    kind, runner, _ = make(envdef, fail=fail)
    with pytest.raises(CommandFailed):
        up(kind, envdef)
    assert runner.calls[-1][:4] == ["kind", "delete", "cluster", "--name"]
    assert runner.calls[-1][4] == ENV
    assert EnvRecord.load(ENV) is None
    assert not env_dir(ENV).exists()


def test_failure_with_retain_keeps_the_cluster_for_debugging(home, envdef):
    kind, runner, _ = make(envdef, fail=("kind", "load"))
    with pytest.raises(CommandFailed):
        up(kind, envdef, retain=True)
    assert not any(argv[:2] == ["kind", "delete"] for argv in runner.calls)
    assert "--retain" in runner.calls[2]
    assert EnvRecord.load(ENV).runtime == "kind"  # so `env down` can remove it later


def test_failure_while_repairing_never_deletes_a_reused_cluster(home, envdef):
    kind, runner, _ = make(envdef, clusters=[ENV], fail=("docker", "build"))
    with pytest.raises(CommandFailed):
        up(kind, envdef)
    assert not any(argv[:2] == ["kind", "delete"] for argv in runner.calls)


@pytest.mark.parametrize(
    "tools, missing",
    [
        (("docker", "kubectl"), "`kind` is not on PATH"),
        (("kind", "kubectl"), "`docker` is not on PATH"),
        (("docker", "kind"), "`kubectl` is not on PATH"),
    ],
)
def test_missing_tool_is_a_clear_error_naming_it_and_the_local_runtime(home, envdef, tools, missing):
    kind, runner, _ = make(envdef, tools=tools)
    with pytest.raises(RuntimeUnavailable) as err:
        up(kind, envdef)
    assert missing in str(err.value)
    assert "--runtime local" in err.value.hint
    assert not any(argv[0] in ("kind", "kubectl") for argv in runner.calls)


def test_unreachable_docker_engine_is_a_clear_error(home, envdef):
    kind, runner, _ = make(envdef, fail=("docker", "info"))
    with pytest.raises(RuntimeUnavailable, match="no Docker engine"):
        up(kind, envdef)
    assert runner.calls == [["docker", "info", "--format", "{{.ServerVersion}}"]]


def test_env_up_on_the_local_runtime_is_refused(home, envdef):
    EnvRecord(ENV, "local", "local-example", str(home / "kubeconfig"), envdef.namespace).save()
    kind, runner, _ = make(envdef)
    with pytest.raises(XtaskError, match="is up on the local runtime"):
        up(kind, envdef)
    assert runner.calls == []


def test_down_deletes_the_cluster_and_state_and_is_idempotent(home, envdef):
    EnvRecord(ENV, "kind", "kind-example", str(home / "kubeconfig"), envdef.namespace).save()
    kind, runner, _ = make(envdef, clusters=[ENV])
    first = kind.down(progress=lambda _: None)
    assert first == {"stopped": [f"kind cluster {ENV}"], "errors": [], "was_up": True}
    assert runner.calls[-1] == ["kind", "delete", "cluster", "--name", ENV, "--kubeconfig", str(home / "kubeconfig")]
    assert not env_dir(ENV).exists()

    kind, runner, _ = make(envdef, clusters=[])
    second = kind.down(progress=lambda _: None)
    assert second == {"stopped": [], "errors": [], "was_up": False}
    assert not any(argv[:2] == ["kind", "delete"] for argv in runner.calls)


def test_down_collects_a_failure_and_keeps_the_record_for_a_retry(home, envdef):
    EnvRecord(ENV, "kind", "kind-example", str(home / "kubeconfig"), envdef.namespace).save()
    kind, _, _ = make(envdef, clusters=[ENV], fail=("kind", "delete"))
    result = kind.down(progress=lambda _: None)
    assert result["stopped"] == [] and len(result["errors"]) == 1 and "boom" in result["errors"][0]
    assert EnvRecord.load(ENV) is not None


def test_components_report_each_deployment_readiness(home, envdef):
    EnvRecord(ENV, "kind", "kind-example", str(home / "kubeconfig"), envdef.namespace).save()
    items = {
        "items": [
            {
                "metadata": {"name": "agn-operator"},
                "spec": {"replicas": 1},
                "status": {"readyReplicas": 1, "updatedReplicas": 1},
            },
            {"metadata": {"name": "fake-provider-one"}, "spec": {"replicas": 1}, "status": {}},
        ]
    }
    runner = FakeCmdRunner(handlers={("kubectl",): lambda argv: (0, json.dumps(items))})
    comps = KindEnv(ENV, runner=runner).status()
    assert [(c["name"], c["running"], c["healthy"]) for c in comps] == [
        ("agn-operator", True, True),
        ("fake-provider-one", False, False),
    ]
    # env status shows where the operator's /metrics is (through its Service); fakes have none.
    assert comps[0]["metricsUrl"] == f"http://agn-operator.{envdef.namespace}.svc:8080/metrics"
    assert "metricsUrl" not in comps[1]
    check_report(  # what `env status -o json` prints for a kind env matches its schema
        envelope(ENV_STATUS, {**EMPTY_STATUS, "env": ENV, "state": "degraded", "runtime": "kind", "components": comps})
    )
    assert runner.calls[0][:7] == [
        "kubectl",
        "--kubeconfig",
        str(home / "kubeconfig"),
        "--context",
        "kind-example",
        "--namespace",
        envdef.namespace,
    ]


EMPTY_STATUS = {"context": None, "kubeconfig": None, "namespace": None, "objects": None}


def test_components_when_the_cluster_is_unreachable(home, envdef):
    EnvRecord(ENV, "kind", "kind-example", str(home / "kubeconfig"), envdef.namespace).save()
    runner = FakeCmdRunner(handlers={("kubectl",): lambda argv: (1, "connection refused")})
    assert KindEnv(ENV, runner=runner).status() == [
        {"name": f"kind cluster {ENV}", "pid": None, "running": False, "healthy": False}
    ]
