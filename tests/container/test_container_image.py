"""The kind manifests' workloads, run for real as containers of the ``agn:dev`` image.

kind itself cannot run where the project is built (its nodes need privileged containers),
but a container engine can. So this suite proves the half of the kind path that is ours:
the image, and what the rendered manifests (:func:`xtask.manifests.render`) claim about the
pods. The operator, one gateway per consumer and the fake providers of ``envs/example`` run
as containers built from the same Deployments, with the security settings read from them
(:mod:`dockerpod`): uid/gid, read-only root filesystem, dropped capabilities,
no-new-privileges, the default seccomp profile, the memory limit. Each workload that gets a
service-account token gets instead a kubeconfig, mounted read-only, holding a real token of
*its* ServiceAccount (TokenRequest), so the least-privilege Roles are exercised too.

Containers use the host network on loopback and the session's local control plane. Checked:
the image's user and entrypoint against the manifests; each container's settings as the
engine reports them and as the kernel enforces them inside it; the probes' endpoints; and a
drain and undrain of gateway ``provider-a`` with targets, converged on both consumers, with
requests routed through the gateway containers to the provider containers.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import socket
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml
from integration.drainenv import DrainEnv  # tests/integration is a namespace package on the path

from agnprocs import http_json, http_status, wait_for
from dockerpod import CREDENTIALS_MOUNT, KUBECONFIG, ContainerRun, container_run, memory_bytes, pod_of, service_account
from kubetest import apply_identities, cluster_entry, service_account_token, token_kubeconfig
from xtask.envdef import load_env
from xtask.manifests import IMAGE, fake_provider_name, gateway_name, render
from xtask.runtime.controlplane import free_port

# The first test also builds the image: a cold build (debootstrap included) takes minutes.
pytestmark = [pytest.mark.container, pytest.mark.timeout(1800)]

ENVDEF = load_env("example")
CONSUMERS = [c.name for c in ENVDEF.consumers]
# What the kernel says about a process in the container: run inside it with `docker exec`.
INSIDE = r"""
import errno, json, os
def write(path):
    try:
        with open(path, "w") as f:
            f.write("x")
        return "written"
    except OSError as exc:
        return errno.errorcode[exc.errno]
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
kubeconfig = os.environ.get("KUBECONFIG")
print(json.dumps({
    "uid": os.getuid(), "gid": os.getgid(), "euid": os.geteuid(), "groups": os.getgroups(),
    "root": write("/agn-probe"), "tmp": write("/tmp/agn-probe"),
    "kubeconfig": kubeconfig and os.path.isfile(kubeconfig), "kubeconfig_write": kubeconfig and write(kubeconfig),
    "token": os.path.exists("/var/run/secrets/kubernetes.io/serviceaccount/token"),
    **{k: status[k].strip() for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp")},
}))
"""


@dataclasses.dataclass
class Workload:
    deployment: dict
    run: ContainerRun
    container: str


@dataclasses.dataclass
class Workloads:
    namespace: str
    items: dict[str, Workload]
    drain: DrainEnv
    server: str  # the control plane's API server

    def of(self, kind: str) -> list[Workload]:
        return [w for w in self.items.values() if component(w.deployment) == kind]

    def url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.items[name].run.port}"


def deployments(objects: list[dict] | None = None) -> list[dict]:
    return [o for o in (render(ENVDEF) if objects is None else objects) if o["kind"] == "Deployment"]


def component(deployment: dict) -> str:
    return deployment["metadata"]["labels"]["app.kubernetes.io/component"]


def _wait_ready(engine, workload: Workload, timeout: float = 90) -> None:
    """Until the readiness probe the manifest declares passes; the container's log on failure."""
    probe = next(p for p in workload.run.probes if p.role == "readiness")
    url = f"http://127.0.0.1:{probe.port}{probe.path}"
    try:
        wait_for(lambda: http_status(url) == 200, timeout=timeout, interval=0.2, what=f"{url} of {workload.run.name}")
    except AssertionError as exc:
        state = engine.inspect(workload.container)["State"]
        raise AssertionError(f"{exc}\nstate: {state}\nlog:\n{engine.logs(workload.container)}") from None


@pytest.fixture(scope="module")
def workloads(docker_engine, agn_image, control_plane, tmp_path_factory):
    """The example env's workloads as containers in a fresh namespace; every container removed after."""
    tmp = tmp_path_factory.mktemp("container-env")
    namespace = f"c-{uuid.uuid4().hex[:10]}"
    envdef = dataclasses.replace(ENVDEF, namespace=namespace)
    objects = render(ENVDEF, namespace=namespace)
    kube = control_plane.kube()
    try:
        # identities and their least-privilege Roles, as the kind runtime applies them
        kube.apply(next(o for o in objects if o["kind"] == "Namespace"))
        apply_identities(kube, namespace, objects)
        cluster = cluster_entry(yaml.safe_load(control_plane.kubeconfig.read_text()), control_plane.context)
        entrypoint = agn_image_config(docker_engine)["Entrypoint"]
        credentials: dict[str, str] = {}
        runs: dict[str, ContainerRun] = {}
        # Providers first (the operator probes them), then the operator, then the gateways.
        order = ("provider", "operator", "gateway")
        for dep in sorted(deployments(objects), key=lambda d: order.index(component(d))):
            name = dep["metadata"]["name"]
            account = service_account(dep)
            if account is not None and account not in credentials:
                credentials[account] = str(_credentials(tmp / account, kube, cluster, namespace, account))
            runs[name] = container_run(
                dep,
                name=f"{namespace}-{name}",
                image_entrypoint=entrypoint,
                host_port=free_port(),
                credentials=credentials,
            )
        # The providers' endpoints are the provider containers on loopback (in kind: Services).
        fakes = [p.name for p in envdef.providers if not p.endpoint]
        endpoints = {p: f"http://127.0.0.1:{runs[fake_provider_name(p)].port}" for p in fakes}
        for obj in envdef.network_objects() + envdef.consumer_objects() + envdef.provider_objects(endpoints):
            kube.apply(obj)

        items: dict[str, Workload] = {}
        by_name = {d["metadata"]["name"]: d for d in deployments(objects)}
        for name, run in runs.items():
            items[name] = Workload(by_name[name], run, docker_engine.run(run.argv))
            if component(by_name[name]) == "provider":
                _wait_ready(docker_engine, items[name])
        for item in items.values():
            _wait_ready(docker_engine, item)
        drain = DrainEnv(kube, namespace, None, control_plane, tmp)
        wait_for(
            lambda: all(drain.serving_all_admitted(c, len(fakes)) for c in CONSUMERS),
            timeout=90,
            what="both consumer gateways serving an overlay with every provider admitted",
        )
        yield Workloads(namespace, items, drain, control_plane.server)
    finally:
        errors = docker_engine.remove_all()
        kube.delete_namespace(namespace)
        kube.close()
        assert not errors, errors


def _credentials(folder: Path, kube, cluster: dict, namespace: str, account: str) -> Path:
    """What the kubelet would mount for ``account`` (its token, the cluster CA), as a kubeconfig.

    Readable by the container's uid, as a mounted token is; mounted read-only."""
    folder.mkdir(mode=0o755)
    (folder / "ca.crt").write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
    config = token_kubeconfig(
        cluster["server"],
        token=service_account_token(kube, namespace, account),
        namespace=namespace,
        name=account,
        ca_file=f"{CREDENTIALS_MOUNT}/ca.crt",
    )
    (folder / "kubeconfig").write_text(yaml.safe_dump(config))
    for path in folder.iterdir():
        path.chmod(0o644)
    return folder


def agn_image_config(engine) -> dict:
    return engine.docker.inspect(IMAGE, kind="image")["Config"]


# -- the image -------------------------------------------------------------------------------------


def test_image_user_and_entrypoint_are_what_the_manifests_expect(docker_engine, agn_image):
    config = agn_image_config(docker_engine)
    for dep in deployments():
        spec, container = pod_of(dep)
        pod_sc = spec["securityContext"]
        name = dep["metadata"]["name"]
        assert container["image"] == agn_image.tag, name
        # runAsNonRoot is only satisfiable by a numeric, non-zero image user, and the manifests
        # run the same uid/gid the image declares.
        assert pod_sc["runAsNonRoot"] is True
        assert config["User"] == f"{pod_sc['runAsUser']}:{pod_sc['runAsGroup']}", name
        assert int(config["User"].split(":")[0]) != 0
        assert config["Entrypoint"] == container["command"], name
    assert docker_engine.docker.inspect(agn_image.tag, kind="image")["Id"] == agn_image.image_id


def test_image_carries_no_pip_wheels_or_sources(docker_engine, agn_image):
    out = docker_engine(
        "run", "--rm", "--network", "none", "--read-only", "--entrypoint", "python", agn_image.tag, "-c",
        "import importlib.util as u, json, os; "
        "print(json.dumps([u.find_spec('pip') is not None, os.path.exists('/src'), os.path.exists('/wheels')]))",
    )  # fmt: skip
    assert json.loads(out.stdout) == [False, False, False]


# -- the containers --------------------------------------------------------------------------------


def test_every_workload_runs_as_a_container(workloads):
    assert sorted(workloads.items) == sorted(d["metadata"]["name"] for d in deployments())
    assert len(workloads.of("gateway")) == len(CONSUMERS) == 2
    assert len(workloads.of("provider")) == 4 and len(workloads.of("operator")) == 1


def test_engine_applies_exactly_the_manifests_security_settings(docker_engine, workloads):
    for name, w in workloads.items.items():
        spec, container = pod_of(w.deployment)
        pod_sc, sc = spec["securityContext"], container["securityContext"]
        info = docker_engine.inspect(w.container)
        host = info["HostConfig"]
        assert info["State"]["Running"], name
        assert info["Config"]["User"] == f"{pod_sc['runAsUser']}:{pod_sc['runAsGroup']}", name
        assert host["ReadonlyRootfs"] is sc["readOnlyRootFilesystem"] is True, name
        assert sorted(host["CapDrop"] or []) == sorted(sc["capabilities"]["drop"]) == ["ALL"], name
        assert not host["CapAdd"] and not host["Privileged"], name
        assert ("no-new-privileges" in (host["SecurityOpt"] or [])) is (sc["allowPrivilegeEscalation"] is False), name
        # seccompProfile RuntimeDefault: the engine's default profile, no override.
        assert not any("seccomp" in opt for opt in host["SecurityOpt"] or []), name
        assert host["NetworkMode"] == "host", name
        emptydirs = {v["name"] for v in spec.get("volumes") or [] if "emptyDir" in v}
        tmpfs = {m["mountPath"] for m in container.get("volumeMounts") or [] if m["name"] in emptydirs}
        assert set(host.get("Tmpfs") or {}) == tmpfs, name
        assert host["Memory"] == memory_bytes(container["resources"]["limits"]["memory"]) > 0, name
        mounts = [(m["Destination"], m["RW"]) for m in info["Mounts"]]
        if spec["automountServiceAccountToken"]:
            assert mounts == [(CREDENTIALS_MOUNT, False)], name
            assert f"KUBECONFIG={KUBECONFIG}" in info["Config"]["Env"], name
        else:
            assert mounts == [], name
        # The image's entrypoint runs the manifest's args (no --entrypoint override).
        assert info["Config"]["Entrypoint"] == container["command"], name
        assert info["Config"]["Cmd"] == w.run.argv[w.run.argv.index(container["image"]) + 1 :], name


def test_kernel_enforces_the_settings_inside_each_container(docker_engine, workloads):
    for name, w in workloads.items.items():
        spec, container = pod_of(w.deployment)
        seen = json.loads(docker_engine("exec", w.container, "python", "-c", INSIDE).stdout)
        uid = spec["securityContext"]["runAsUser"]
        gid = spec["securityContext"]["runAsGroup"]
        assert (seen["uid"], seen["euid"], seen["gid"]) == (uid, uid, gid), name
        assert seen["root"] == "EROFS" and seen["tmp"] == "EROFS", (name, seen)  # no emptyDir: nothing writable
        for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            assert int(seen[cap], 16) == 0, (name, cap, seen[cap])  # drop: [ALL]
        assert seen["NoNewPrivs"] == "1", name
        assert seen["Seccomp"] == "2", name  # a filter is applied: RuntimeDefault
        assert seen["token"] is False, name  # no service-account token mounted: the kubeconfig stands in
        if spec["automountServiceAccountToken"]:
            assert seen["kubeconfig"] is True and seen["kubeconfig_write"] == "EROFS", name
        else:
            assert seen["kubeconfig"] is None, name


def test_probe_endpoints_answer_as_the_manifests_declare(workloads):
    for name, w in workloads.items.items():
        _, container = pod_of(w.deployment)
        declared = {"readiness": container["readinessProbe"], "liveness": container["livenessProbe"]}
        assert {p.role for p in w.run.probes} == set(declared), name
        for probe in w.run.probes:
            if probe.kind == "http":
                assert probe.path == declared[probe.role]["httpGet"]["path"]
                assert http_status(f"http://127.0.0.1:{probe.port}{probe.path}") == 200, (name, probe)
            else:
                assert "tcpSocket" in declared[probe.role]
                with socket.create_connection(("127.0.0.1", probe.port), timeout=5):
                    pass
    # Operator and gateways talk to the control plane through the mounted kubeconfig.
    for w in workloads.of("operator") + workloads.of("gateway"):
        health = http_json(f"http://127.0.0.1:{w.run.port}/healthz")
        assert health["server"] == workloads.server, (w.run.name, health)
    assert http_json(f"http://127.0.0.1:{workloads.of('operator')[0].run.port}/healthz")["leader"] is True


def _route(workloads: Workloads, consumer: str, session: str) -> str:
    """The provider a new session of group ``chat`` is routed to, through the gateway container."""
    req = urllib.request.Request(
        workloads.url(gateway_name(consumer)) + "/v1/completions",
        data=json.dumps({"prompt": "hello"}).encode(),
        method="POST",
        headers={"Content-Type": "application/json", "x-session-id": session, "x-selection-group": "chat"},
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200
        return resp.headers["x-agn-provider"]


def test_drain_and_undrain_converge_on_the_containers(workloads):
    drain = workloads.drain
    for consumer in CONSUMERS:
        assert _route(workloads, consumer, f"before-{consumer}") == "provider-one"  # rank 0 of chat
    targets = ["--network", "production", *sum((["--consumer", c] for c in CONSUMERS), [])]

    code, report = drain.run_json("--gateway", "provider-a", *targets, "--timeout", "120")
    assert code == 0, report
    for consumer in CONSUMERS:
        assert drain.states(consumer) == {
            "provider-one": "existing_only",
            "provider-two": "existing_only",
            "provider-three": "admitted",
            "provider-four": "admitted",
        }
        revision = drain.overlay(consumer)["revision"]
        assert drain.revisions(consumer) == (revision, revision)
        assert _route(workloads, consumer, f"drained-{consumer}") == "provider-three"
        assert _route(workloads, consumer, f"before-{consumer}") == "provider-one"  # a running session stays

    code, report = drain.run_json("--gateway", "provider-a", *targets, "--undrain", "--timeout", "120")
    assert code == 0, report
    for consumer in CONSUMERS:
        assert set(drain.states(consumer).values()) == {"admitted"}
        revision = drain.overlay(consumer)["revision"]
        assert drain.revisions(consumer) == (revision, revision)
        assert _route(workloads, consumer, f"undrained-{consumer}") == "provider-one"
