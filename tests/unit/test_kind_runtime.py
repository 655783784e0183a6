"""The kind runtime's command sequence and state, driven by the fake runner (standing in for
docker/podman and kind) and a fake Kube (no engine, no cluster).

:class:`FakeEngine` keeps what the commands change — images, networks, clusters — so what one
step does is what the next one sees, as on a real engine; :class:`FakeKube` keeps the applied
Deployments (rolled out unless told otherwise) and reads the AGN objects as the real operator
and gateways would leave them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path

import pytest
import yaml

from agn import GROUP, kubeconfig
from agn.kube import CONSUMERS, NETWORKS, OVERLAYS, PROVIDERS, Kube, KubeError
from agn.kubeconfig import kubeconfig_path
from agn.model import compute_candidates, next_overlay
from agn.objects import consumer_view, network_view, provider_view, rfc3339
from fakes import FakeCmdRunner
from reportschema import check_report
from xtask.cli.env.status import render_table
from xtask.crds import crd_documents, policy_documents
from xtask.envdef import ENVS_DIR, load_env, parse_env
from xtask.errors import CommandFailed, EnvDefinitionError, RuntimeUnavailable, XtaskError
from xtask.host import Host
from xtask.images.agn_image import ImageBuilder
from xtask.images.nodeimage import KUBEADM_PATCH_LABEL, NodeImageBuilder
from xtask.manifests import deployment_names, render
from xtask.reports import ENV_STATUS, envelope
from xtask.runtime import kind as kind_module
from xtask.runtime.deployments import DEPLOYMENTS
from xtask.runtime.kind import KindEnv, pinned
from xtask.runtime.kind_host import host_cgroup_v1, kind_problems, pod_row, podman_host_problems, render_kind_config
from xtask.runtime.local import LocalEnv
from xtask.runtime.steps import UpContext
from xtask.state import EnvRecord, env_dir

ENV = "example"
CONTEXT = "kind-example"
NODE_TAG = "localhost/agn/kind-node:v1.37.2-0123456789ab"
ETCD_PATCH = 'kind: ClusterConfiguration\netcd:\n  local:\n    imageTag: "3.6.16-0"\n'
CGROUP_V1_PATCH = "kind: KubeletConfiguration\nfailCgroupV1: false\n"
INFO = {
    "docker": ["docker", "info", "--format", "{{.ServerVersion}}"],
    "podman": ["podman", "info", "--format", "{{.Version.Version}}"],
}
BASE_CONFIG = yaml.safe_load((ENVS_DIR / "kind-example.yaml").read_text())


# -- fakes ----------------------------------------------------------------------------------------
class FakeEngine:
    """docker or podman, and kind on it, as the runtime sees them through the fake runner."""

    def __init__(
        self,
        cli: str,
        *,
        clusters=(),
        networks=(),
        images=None,
        in_use=(),
        parents=None,
        fail=None,
        kubeconfig_path: Path,
    ) -> None:
        self.cli = cli
        self.clusters = list(clusters)
        self.networks = set(networks)
        self.images: dict[str, set[str]] = {k: set(v) for k, v in (images or {}).items()}  # id -> references
        self.labels: dict[str, dict] = {}  # id -> labels
        self.in_use = set(in_use)  # ids a container of someone else uses
        self.parents = dict(parents or {})  # id -> the id of an image built on it (rm fails while it exists)
        self.network_in_use = False
        self.fail = fail  # an argv prefix that exits 1 ("boom")
        self.kubeconfig = kubeconfig_path
        self.archive_seen: bool | None = None  # did the archive exist when kind loaded it?
        self.runner = FakeCmdRunner(
            handlers={(cli,): self._engine, ("kind",): self._kind, ("dpkg",): lambda argv: (0, "amd64\n")}
        )

    # helpers for tests
    def add_image(self, image_id: str, *refs: str, labels: dict | None = None) -> None:
        self.images.setdefault(image_id, set()).update(refs)
        if labels:
            self.labels[image_id] = labels

    def _find(self, ref: str) -> str | None:
        if ref in self.images:
            return ref
        return next((i for i, refs in self.images.items() if ref in refs), None)

    def _failing(self, argv: list[str]) -> bool:
        return self.fail is not None and tuple(argv[: len(self.fail)]) == tuple(self.fail)

    def _engine(self, argv: list[str]) -> tuple[int, str]:
        if self._failing(argv):
            return 1, "boom"
        args = argv[1:]
        if args[0] == "info":
            if "json" in args:
                return 0, json.dumps({"host": {"cgroupVersion": "v2", "ociRuntime": {"name": "crun"}}})
            return 0, "5.4.2\n"
        if args[:2] == ["network", "inspect"]:
            return (0, "[{}]") if args[2] in self.networks else (1, f"network {args[2]} not found")
        if args[:2] == ["network", "rm"]:
            if args[2] not in self.networks:
                return 1, "network not found"
            if self.network_in_use:
                return 1, f"network {args[2]} is being used"
            self.networks.discard(args[2])
            return 0, ""
        if args[0] == "images":
            return 0, "".join(f"{i}\n" for i in sorted(self.images))
        if args[:2] == ["image", "ls"]:
            return 0, "".join(f"{r.rsplit(':', 1)[0]}\n" for refs in self.images.values() for r in sorted(refs))
        if args[:2] == ["image", "inspect"]:
            found = self._find(args[-1])
            if found is None:
                return 1, f"Error: {args[-1]}: image not known"
            if "{{.Id}}" in args:
                return 0, f"{found}\n"
            if "{{json .Config.Labels}}" in args:
                return 0, json.dumps(self.labels.get(found)) + "\n"
            return 0, "[{}]"
        if args[:2] == ["image", "rm"]:
            found = self._find(args[2])
            if found is None:
                return 1, "image not known"
            if found in self.in_use or self.parents.get(found) in self.images:
                return 1, f"image {found} is in use by a container"
            del self.images[found]
            return 0, ""
        if args[0] == "build":
            tag = args[args.index("-t") + 1]
            self.add_image("sha256:" + "b" * 64)  # an intermediate image
            self.add_image("sha256:" + "a" * 64, tag)
            return 0, ""
        if args[0] == "save":
            Path(args[args.index("-o") + 1]).write_bytes(b"an image archive")
            return 0, ""
        return 0, ""

    def _kind(self, argv: list[str]) -> tuple[int, str]:
        if self._failing(argv):
            return 1, "boom"
        args = argv[1:]
        name = args[args.index("--name") + 1] if "--name" in args else "kind"
        if args[:2] == ["get", "clusters"]:
            return 0, "".join(f"{c}\n" for c in self.clusters)
        if args[:2] == ["create", "cluster"]:
            self.clusters.append(name)
            self.networks.add("kind")
            self._write_context(f"kind-{name}")
        elif args[:2] == ["delete", "cluster"]:
            if name in self.clusters:
                self.clusters.remove(name)
        elif args[:2] == ["export", "kubeconfig"]:
            self._write_context(f"kind-{name}")
        elif args[:2] == ["load", "image-archive"]:
            self.archive_seen = Path(args[2]).is_file()
        return 0, ""

    def _write_context(self, context: str) -> None:
        """What kind writes: a context with no namespace."""
        kubeconfig.add_context(
            self.kubeconfig,
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": context, "runtimeDetail": {"server": "https://127.0.0.1:40000"}}],
                "users": [{"name": context, "user": {"token": "t"}}],
                "contexts": [{"name": context, "context": {"runtimeDetail": context, "user": context}}],
                "current-context": context,
            },
        )


def rolled_out(name: str) -> dict:
    return {
        "metadata": {"name": name, "generation": 1},
        "spec": {"replicas": 1},
        "status": {
            "observedGeneration": 1,
            "replicas": 1,
            "readyReplicas": 1,
            "updatedReplicas": 1,
            "availableReplicas": 1,
        },
    }


class FakeKube:
    """Records applied objects; keeps the Deployments (rolled out once applied, unless ``stuck``,
    whose progress deadline passes). Reads of the AGN objects show the env as the real operator
    and gateways would leave it: every provider probed healthy, every consumer serving overlay
    revision 1, computed by the operator's own model."""

    def __init__(self, envdef, *, deployments=(), stuck=(), pods=(), unreachable=False) -> None:
        self.envdef = envdef
        self.applied: list[dict] = []
        self.deployments = {name: rolled_out(name) for name in deployments}
        self.stuck = set(stuck)
        self.pods = list(pods)
        self.unreachable = unreachable
        self.selectors: list[tuple[str, str | None]] = []  # (what, label selector) of each read
        self.closed = False

    def apply(self, body, *, namespace=None, dry_run=False):
        self.applied.append(body)
        if body.get("kind") == "Deployment":
            name = body["metadata"]["name"]
            obj = rolled_out(name)
            if name in self.stuck:
                obj["status"] = {
                    "conditions": [
                        {"type": "Progressing", "reason": "ProgressDeadlineExceeded", "message": "image pull failed"}
                    ]
                }
            self.deployments[name] = obj
        return body

    def crd_established(self, name):
        return True

    def ensure_namespace(self, name):
        pass

    def list_objects(self, api_version, kind, *, namespace=None, label_selector=None):
        if api_version.startswith(f"{GROUP}/"):
            return []  # install_crds: each CRD served (a LIST answered)
        assert (api_version, kind, namespace) == ("v1", "Pod", self.envdef.namespace)
        self.selectors.append(("pods", label_selector))
        if self.unreachable:
            raise KubeError("connection refused")
        return self.pods

    def watch(self, res, namespace, **_):
        raise AssertionError("a rolled-out deployment needs no watch")

    def get(self, res, namespace, name):
        """No probes heartbeat Lease: readers judge freshness by each status's own reading."""
        from agn.kube import NotFound

        raise NotFound(f"{res.plural} {name} not found", status=404)

    def list(self, res, namespace, *, label_selector=None, **_):
        if self.unreachable:
            raise KubeError("connection refused")
        if res is DEPLOYMENTS:
            assert namespace == self.envdef.namespace
            self.selectors.append(("deployments", label_selector))
            return list(self.deployments.values()), "1"
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


# -- fixtures ---------------------------------------------------------------------------------------
NOFILE = 20000  # the hard limit of open files of the test hosts (a Debian login's)


def prepared_host_root(root: Path) -> Path:
    """A host root as ``scripts/kind-host-setup.sh`` leaves it: ``/lib/modules``, a containers.conf
    that sets ``default_ulimits`` nofile, and cgroup v2."""
    (root / "lib" / "modules").mkdir(parents=True)
    (root / "etc" / "containers").mkdir(parents=True)
    (root / "etc" / "containers" / "containers.conf").write_text(
        f'[containers]\ndefault_ulimits = ["nofile={NOFILE}:{NOFILE}"]\n'
    )
    (root / "sys" / "fs" / "cgroup").mkdir(parents=True)
    (root / "sys" / "fs" / "cgroup" / "cgroup.controllers").write_text("cpu memory pids\n")
    return root


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    """A state folder and kubeconfig of the test's own; a host root (``host_root``) of a cgroup v2
    host that meets podman's needs; the app image built with ``<engine> build``; no node image
    built unless a test says so."""
    monkeypatch.setenv("AGN_XTASK_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    monkeypatch.delenv("KIND_EXPERIMENTAL_PROVIDER", raising=False)
    prepared_host_root(tmp_path / "host")
    monkeypatch.setattr(ImageBuilder, "debootstrap_problems", lambda self: ["no debootstrap here (a unit test)"])

    def no_build(self):
        raise AssertionError("the node image was built")

    monkeypatch.setattr(NodeImageBuilder, "load", no_build)
    return tmp_path


@pytest.fixture
def envdef():
    return load_env(ENV)


@dataclasses.dataclass
class Setup:
    kind: KindEnv
    engine: FakeEngine
    kube: FakeKube
    probes: list

    @property
    def runner(self) -> FakeCmdRunner:
        return self.engine.runner


def make(
    envdef,
    *,
    cli="docker",
    clusters=(),
    deployments=(),
    fail=None,
    tools=None,
    environ=None,
    registry=True,
    stuck=(),
    pods=(),
    unreachable=False,
    **engine,
) -> Setup:
    """A KindEnv on a fake engine ``cli`` (with kind and kubectl on PATH unless ``tools`` says
    otherwise). ``registry``: what the registry probe answers."""
    tools = tools if tools is not None else (cli, "kind", "kubectl")
    fake = FakeEngine(cli, clusters=clusters, fail=fail, kubeconfig_path=Path(kubeconfig_path()), **engine)
    kube = FakeKube(envdef, deployments=deployments, stuck=stuck, pods=pods, unreachable=unreachable)
    probes: list = []

    def probe() -> bool:
        probes.append(True)
        return registry

    kind = KindEnv(
        ENV,
        runner=fake.runner,
        kube_factory=lambda kubeconfig, context: kube,
        host=Host.fake(host_root(), tools=tools, environ=environ, nofile_hard=NOFILE),
        registry_probe=probe,
    )
    return Setup(kind, fake, kube, probes)


def host_root() -> Path:
    """The test's host root (made by the ``home`` fixture)."""
    return Path(os.environ["AGN_XTASK_HOME"]).parent / "host"


def commands(runner) -> list[str]:
    """Each call as its first three words, for readable assertions."""
    return [" ".join(argv[:3]) for argv in runner.calls]


def call(runner, *prefix: str) -> list[str]:
    [found] = [argv for argv in runner.calls if argv[: len(prefix)] == list(prefix)]
    return found


def up(s: Setup, envdef, **kwargs):
    lines: list[str] = []
    result = s.kind.up(envdef, progress=lines.append, wait_timeout=5, **kwargs)
    return result, lines


def state() -> dict:
    return json.loads((env_dir(ENV) / "kind.json").read_text())


def rendered_config() -> dict:
    return yaml.safe_load((env_dir(ENV) / "kind-config.yaml").read_text())


# -- a fresh up -------------------------------------------------------------------------------------
def test_create_runs_the_whole_sequence_and_records_the_env(home, envdef):
    s = make(envdef)
    result, _ = up(s, envdef)

    deployments = deployment_names(render(envdef))
    assert commands(s.runner) == [
        "docker info --format",  # kind_problems: which engine
        "docker info --format",  # the runtime's own choice
        "kind get clusters",
        "docker network inspect",
        "docker image ls",
        "kind create cluster",
        "kind export kubeconfig",
        "docker images -a",
        "docker build -t",
        "docker images -a",
        "docker image inspect",
        "kind load docker-image",
    ]
    create = call(s.runner, "kind", "create")
    assert create[create.index("--name") + 1] == ENV
    assert create[create.index("--kubeconfig") + 1] == str(home / "kubeconfig")
    assert create[create.index("--config") + 1] == str(env_dir(ENV) / "kind-config.yaml")
    assert "--retain" not in create
    assert "--image" not in create  # a registry answers: kind's default node image
    assert call(s.runner, "docker", "build") == ["docker", "build", "-t", "agn:dev", str(kind_module.REPO_ROOT)]
    assert call(s.runner, "kind", "load") == ["kind", "load", "docker-image", "agn:dev", "--name", ENV]
    # Every kind call is told the engine.
    for argv, env in zip(s.runner.calls, s.runner.envs, strict=True):
        if argv[0] == "kind":
            assert env is not None and env["KIND_EXPERIMENTAL_PROVIDER"] == "docker", argv
    # CRDs and the admission policy first, then exactly the rendered objects, carrying the built image's id.
    image_id = "sha256:" + "a" * 64
    assert s.kube.applied == crd_documents() + policy_documents() + render(envdef, image="agn:dev", image_id=image_id)
    assert s.kube.closed
    record = EnvRecord.load(ENV)
    assert (record.runtime, record.context, record.namespace) == ("kind", CONTEXT, envdef.namespace)
    assert record.kubeconfig == str(home / "kubeconfig")
    assert result["context"] == CONTEXT
    assert result["started"] == [f"kind cluster {ENV} (docker)", *(f"deployment {d}" for d in deployments)]
    assert result["served"] == {c.name: 1 for c in envdef.consumers}
    # The context kind wrote has the env's namespace, as the local runtime's has.
    ctx = {c["name"]: c["context"] for c in kubeconfig.read_for_update(home / "kubeconfig")["contexts"]}
    assert ctx[CONTEXT]["namespace"] == envdef.namespace
    # What down needs to remove what this run added to the engine.
    assert state() == {
        "engine": "docker",
        "createdNetwork": True,
        "createdImages": sorted(["sha256:" + "a" * 64, "sha256:" + "b" * 64]),
    }


def test_a_fresh_up_on_podman(home, envdef):
    s = make(envdef, cli="podman")
    result, lines = up(s, envdef)

    assert commands(s.runner) == [
        "podman info --format",  # kind_problems: which engine (docker is not on PATH)
        "podman info --format",  # podman_host_problems: `podman info --format json`
        "podman info --format",  # the runtime's own choice
        "kind get clusters",
        "podman network inspect",
        "podman image ls",
        "kind create cluster",
        "kind export kubeconfig",
        "podman images -a",
        "podman build -t",
        "podman images -a",
        "podman image inspect",
        "podman save --format",
        "kind load image-archive",
    ]
    assert s.runner.calls[1] == ["podman", "info", "--format", "json"]
    # kind runs its nodes on podman: every kind call says so.
    kind_envs = [env for argv, env in zip(s.runner.calls, s.runner.envs, strict=True) if argv[0] == "kind"]
    assert len(kind_envs) == 4
    assert all(env is not None and env["KIND_EXPERIMENTAL_PROVIDER"] == "podman" for env in kind_envs)
    # podman names agn:dev localhost/agn:dev: built, saved and deployed under that name.
    assert call(s.runner, "podman", "build")[:4] == ["podman", "build", "-t", "localhost/agn:dev"]
    archive = str(env_dir(ENV) / "agn-image.tar")
    assert call(s.runner, "podman", "save") == [
        "podman",
        "save",
        "--format",
        "docker-archive",
        "-o",
        archive,
        "localhost/agn:dev",
    ]
    assert call(s.runner, "kind", "load") == ["kind", "load", "image-archive", archive, "--name", ENV]
    assert s.engine.archive_seen is True  # saved before kind loaded it
    assert not Path(archive).exists()  # and removed after
    images = {
        c["image"]
        for o in s.kube.applied
        if o["kind"] == "Deployment"
        for c in o["spec"]["template"]["spec"]["containers"]
    }
    assert images == {"localhost/agn:dev"}
    assert result["started"][0] == f"kind cluster {ENV} (podman)"
    assert lines[0] == f"create kind cluster {ENV} on podman"
    assert state()["engine"] == "podman"


def test_a_podman_save_failure_leaves_no_archive_and_rolls_back(home, envdef):
    s = make(envdef, cli="podman", fail=("kind", "load"))
    with pytest.raises(CommandFailed):
        up(s, envdef)
    assert not (env_dir(ENV) / "agn-image.tar").exists()
    assert s.engine.clusters == []


def test_the_image_is_built_by_the_image_builder_where_debootstrap_works(home, envdef, monkeypatch):
    built = []
    monkeypatch.setattr(ImageBuilder, "debootstrap_problems", lambda self: [])
    monkeypatch.setattr(ImageBuilder, "build", lambda self, tag: built.append((self.docker.cli, tag)))
    s = make(envdef, cli="podman")
    s.engine.add_image("sha256:" + "c" * 64, "localhost/agn:dev")
    up(s, envdef)
    assert built == [("podman", "localhost/agn:dev")]
    assert not any(argv[:2] == ["podman", "build"] for argv in s.runner.calls)


# -- the node image and the rendered kind configuration ---------------------------------------------
def test_kinds_default_node_image_when_a_registry_answers(home, envdef):
    s = make(envdef, registry=True)
    up(s, envdef)
    assert s.probes == [True]
    assert "--image" not in call(s.runner, "kind", "create")
    assert rendered_config() == BASE_CONFIG  # the env's own configuration, nothing added
    assert "nodeImage" not in state()


def test_kinds_default_node_image_when_the_engine_has_a_kindest_node_image(home, envdef):
    s = make(envdef, cli="podman", registry=False)
    s.engine.add_image("sha256:" + "d" * 64, "docker.io/kindest/node:v1.35.0")
    up(s, envdef)
    assert s.probes == []  # no need to ask the registry
    assert "--image" not in call(s.runner, "kind", "create")
    assert rendered_config() == BASE_CONFIG


def test_the_node_image_is_built_when_no_registry_answers(home, envdef, monkeypatch):
    s = make(envdef, cli="podman", registry=False)
    loads = []

    def load(self):
        loads.append(self.cli)
        s.engine.add_image("sha256:" + "e" * 64, NODE_TAG, labels={KUBEADM_PATCH_LABEL: ETCD_PATCH})
        return NODE_TAG

    monkeypatch.setattr(NodeImageBuilder, "load", load)
    up(s, envdef)
    assert loads == ["podman"]
    assert s.probes == [True]
    create = call(s.runner, "kind", "create")
    assert create[create.index("--image") + 1] == NODE_TAG
    # Its labels say what kind must change: no default CNI (the image networks pods) and the etcd tag.
    assert rendered_config() == {
        **BASE_CONFIG,
        "networking": {**BASE_CONFIG["networking"], "disableDefaultCNI": True},
        "kubeadmConfigPatches": [ETCD_PATCH],
    }
    assert state()["nodeImage"] == NODE_TAG
    assert "sha256:" + "e" * 64 in state()["createdImages"]  # down removes the node image it loaded


@pytest.mark.parametrize("where", ["environment", "env file"])
def test_a_chosen_node_image_is_used_as_it_is(home, envdef, where):
    chosen = "localhost/my/node:v1"
    if where == "env file":
        envdef = dataclasses.replace(envdef, sections={"kind": {"nodeImage": chosen}})
        environ = {"KIND_NODE_IMAGE": "not/this:one"}  # the env file wins
    else:
        environ = {"KIND_NODE_IMAGE": chosen}
    s = make(envdef, cli="podman", registry=False, environ=environ)
    s.engine.add_image("sha256:" + "f" * 64, chosen, labels={KUBEADM_PATCH_LABEL: ETCD_PATCH})
    up(s, envdef)
    assert s.probes == []  # no registry, no listing, no build
    assert not any(argv[:3] == ["podman", "image", "ls"] for argv in s.runner.calls)
    create = call(s.runner, "kind", "create")
    assert create[create.index("--image") + 1] == chosen
    assert rendered_config()["kubeadmConfigPatches"] == [ETCD_PATCH]  # its label is honoured too
    assert state()["nodeImage"] == chosen


def test_a_chosen_node_image_without_the_label_gets_the_configuration_as_it_is(home, envdef):
    s = make(envdef, environ={"KIND_NODE_IMAGE": "kindest/node:v1.35.0"})
    up(s, envdef)
    create = call(s.runner, "kind", "create")
    assert create[create.index("--image") + 1] == "kindest/node:v1.35.0"
    assert rendered_config() == BASE_CONFIG


def test_on_a_cgroup_v1_host_the_kubelet_is_told_to_accept_it(home, envdef):
    (host_root() / "sys" / "fs" / "cgroup" / "cgroup.controllers").unlink()
    s = make(envdef)
    up(s, envdef)
    assert rendered_config() == {**BASE_CONFIG, "kubeadmConfigPatches": [CGROUP_V1_PATCH]}


def test_render_kind_config():
    base = {"kind": "Cluster", "apiVersion": "kind.x-k8s.io/v1alpha4", "networking": {"apiServerAddress": "127.0.0.1"}}
    assert render_kind_config(base, kubeadm_patches=[ETCD_PATCH], own_node_image=False, cgroup_v1=False) == base
    assert render_kind_config(None, kubeadm_patches=[], own_node_image=False, cgroup_v1=False) == {
        "kind": "Cluster",
        "apiVersion": "kind.x-k8s.io/v1alpha4",
    }
    mine = render_kind_config(
        {**base, "kubeadmConfigPatches": ["kind: InitConfiguration\n"]},
        kubeadm_patches=[ETCD_PATCH],
        own_node_image=True,
        cgroup_v1=True,
    )
    assert mine == {
        **base,
        "networking": {"apiServerAddress": "127.0.0.1", "disableDefaultCNI": True},
        "kubeadmConfigPatches": ["kind: InitConfiguration\n", ETCD_PATCH, CGROUP_V1_PATCH],  # the env's kept
    }
    assert base == {
        "kind": "Cluster",
        "apiVersion": "kind.x-k8s.io/v1alpha4",
        "networking": {"apiServerAddress": "127.0.0.1"},
    }


def test_host_cgroup_v1(tmp_path):
    host = Host.fake(tmp_path)
    (tmp_path / "sys" / "fs" / "cgroup").mkdir(parents=True)
    assert host_cgroup_v1(host) is True
    (tmp_path / "sys" / "fs" / "cgroup" / "cgroup.controllers").write_text("cpu memory pids\n")
    assert host_cgroup_v1(host) is False


# -- the engine ---------------------------------------------------------------------------------------
def test_a_docker_cli_without_a_daemon_means_podman(home, envdef):
    s = make(envdef, cli="podman", tools=("docker", "podman", "kind", "kubectl"))
    s.runner.handlers[("docker",)] = lambda argv: (1, "Cannot connect to the Docker daemon")
    up(s, envdef)
    assert state()["engine"] == "podman"
    assert call(s.runner, "kind", "load")[:3] == ["kind", "load", "image-archive"]


def test_the_env_files_engine_is_used_without_asking_others(home, envdef):
    envdef = dataclasses.replace(envdef, sections={"kind": {"engine": "podman"}})
    s = make(envdef, cli="podman", tools=("docker", "podman", "kind", "kubectl"))
    up(s, envdef)
    assert not any(argv[0] == "docker" for argv in s.runner.calls)
    assert not any(argv[:2] == ["podman", "info"] and "json" not in argv for argv in s.runner.calls)
    assert state()["engine"] == "podman"


def test_the_recorded_engine_wins_over_detection(home, envdef):
    s = make(envdef, cli="podman")
    up(s, envdef)
    again = make(envdef, cli="podman", tools=("docker", "podman", "kind", "kubectl"))  # docker answers now
    assert again.kind.engine() == "podman"
    assert not any(argv[0] == "docker" for argv in again.runner.calls)


# -- a second up: reuse and repair ------------------------------------------------------------------
def test_existing_cluster_is_reused_not_created(home, envdef):
    deployments = deployment_names(render(envdef))
    s = make(envdef, clusters=["other", ENV], deployments=deployments)
    result, lines = up(s, envdef)
    assert not any(argv[:2] == ["kind", "create"] for argv in s.runner.calls)
    assert lines[0] == f"create kind cluster {ENV} on docker: already done"
    assert result["started"] == []  # the CLI reports "already up; nothing started"
    assert EnvRecord.load(ENV).runtime == "kind"
    assert ("deployments", None) in s.kube.selectors  # what existed before the apply


def test_repair_recreates_only_the_missing_deployment(home, envdef):
    deployments = deployment_names(render(envdef))
    s = make(envdef, clusters=[ENV], deployments=[d for d in deployments if d != "fake-provider-one"])
    result, _ = up(s, envdef)
    assert result["started"] == ["deployment fake-provider-one"]
    assert s.kube.applied[len(crd_documents()) + len(policy_documents()) :] == render(
        envdef, image_id="sha256:" + "a" * 64
    )


def test_recorded_env_whose_cluster_vanished_is_recreated(home, envdef):
    EnvRecord(ENV, "kind", CONTEXT, str(home / "kubeconfig"), envdef.namespace).save()
    s = make(envdef)
    result, _ = up(s, envdef)
    assert len([argv for argv in s.runner.calls if argv[:3] == ["kind", "create", "cluster"]]) == 1
    assert result["started"][0] == f"kind cluster {ENV} (docker)"


# -- failures -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "fail, stuck, error",
    [
        (("kind", "load"), (), CommandFailed),
        (("docker", "build"), (), CommandFailed),
        (("kind", "export"), (), CommandFailed),
        (None, ("fake-provider-one",), XtaskError),  # a rollout that fails for good
    ],
    ids=["load", "build", "export", "rollout"],
)
def test_failure_after_creating_the_cluster_deletes_it(home, envdef, fail, stuck, error):
    s = make(envdef, fail=fail, stuck=stuck)
    with pytest.raises(error):
        up(s, envdef)
    delete = call(s.runner, "kind", "delete")
    assert delete == ["kind", "delete", "cluster", "--name", ENV, "--kubeconfig", str(home / "kubeconfig")]
    assert s.engine.clusters == []
    # What the run added to the engine goes too: the network kind made, the images it built.
    assert "kind" not in s.engine.networks
    assert s.engine.images == {}
    assert EnvRecord.load(ENV) is None
    assert not env_dir(ENV).exists()


def test_the_rollback_of_the_create_step_never_deletes_a_reused_cluster(home, envdef):
    """The step is skipped for a reused cluster, so its undo does not run; the undo refuses too."""
    s = make(envdef, clusters=[ENV])
    ctx = UpContext(
        env=ENV, envdef=envdef, context=CONTEXT, kubeconfig=home / "kubeconfig", fresh=False, wait_timeout=5
    )
    ctx.reused = True
    create = s.kind.up_steps(ctx)[0]
    assert create.check(ctx) is True
    create.undo(ctx)
    assert s.runner.calls == [INFO["docker"]]  # the step titles name the engine; nothing deleted
    assert s.engine.clusters == [ENV]


def test_a_failing_cluster_create_is_deleted_too(home, envdef):
    s = make(envdef, fail=("kind", "create"))
    with pytest.raises(CommandFailed):
        up(s, envdef)
    assert call(s.runner, "kind", "delete")[:5] == ["kind", "delete", "cluster", "--name", ENV]
    assert not env_dir(ENV).exists()


def test_failure_with_retain_keeps_the_cluster_for_debugging(home, envdef):
    s = make(envdef, fail=("kind", "load"))
    with pytest.raises(CommandFailed):
        up(s, envdef, retain=True)
    assert not any(argv[:2] == ["kind", "delete"] for argv in s.runner.calls)
    assert "--retain" in call(s.runner, "kind", "create")
    assert EnvRecord.load(ENV).runtime == "kind"  # so `env down` can remove it later
    assert s.engine.clusters == [ENV]


def test_failure_while_repairing_never_deletes_a_reused_cluster(home, envdef):
    EnvRecord(ENV, "kind", CONTEXT, str(home / "kubeconfig"), envdef.namespace).save()
    s = make(envdef, clusters=[ENV], fail=("docker", "build"))
    with pytest.raises(CommandFailed):
        up(s, envdef)
    assert not any(argv[:2] in (["kind", "delete"], ["docker", "network"]) for argv in s.runner.calls)
    assert not any(argv[:3] == ["docker", "image", "rm"] for argv in s.runner.calls)
    assert s.engine.clusters == [ENV]
    assert EnvRecord.load(ENV) is not None


@pytest.mark.parametrize(
    "tools, missing",
    [
        (("docker", "kubectl"), "`kind` is not on PATH"),
        (("docker", "kind"), "`kubectl` is not on PATH"),
        (("kind", "kubectl"), "no container engine for kind: `docker` is not on PATH; `podman` is not on PATH"),
    ],
)
def test_missing_tool_is_a_clear_error_naming_it_and_the_local_runtime(home, envdef, tools, missing):
    s = make(envdef, tools=tools)
    with pytest.raises(RuntimeUnavailable) as err:
        up(s, envdef)
    assert missing in str(err.value)
    assert "--runtime local" in err.value.hint and "scripts/kind-host-setup.sh" in err.value.hint
    assert not any(argv[0] in ("kind", "kubectl") for argv in s.runner.calls)


def test_unreachable_docker_engine_is_a_clear_error(home, envdef):
    s = make(envdef, fail=("docker", "info"))
    with pytest.raises(RuntimeUnavailable, match=r"no container engine for kind: `docker info` fails: boom"):
        up(s, envdef)
    assert s.runner.calls == [INFO["docker"]]


def test_a_pinned_engine_not_on_path_is_named(home, envdef):
    envdef = dataclasses.replace(envdef, sections={"kind": {"engine": "podman"}})
    s = make(envdef, cli="docker")
    with pytest.raises(RuntimeUnavailable, match=r"the env file pins kind.engine podman, and `podman` is not on PATH"):
        up(s, envdef)
    assert not any(argv[0] == "kind" for argv in s.runner.calls)


def test_podman_host_problems_stop_up_before_anything_is_made(home, envdef):
    (host_root() / "lib" / "modules").rmdir()
    s = make(envdef, cli="podman")
    with pytest.raises(RuntimeUnavailable, match=r"/lib/modules does not exist \(kind mounts it into every node"):
        up(s, envdef)
    assert not any(argv[0] == "kind" for argv in s.runner.calls)
    assert not env_dir(ENV).exists()


def test_env_up_on_the_local_runtime_is_refused(home, envdef):
    EnvRecord(ENV, "local", "local-example", str(home / "kubeconfig"), envdef.namespace).save()
    s = make(envdef)
    with pytest.raises(XtaskError, match="is up on the local runtime"):
        up(s, envdef)
    assert s.runner.calls == []


# -- problems -----------------------------------------------------------------------------------------
def problems(root, *, tools=("docker", "podman", "kind", "kubectl"), down=(), environ=None, engine=None, info=None):
    handlers = {
        ("docker", "info"): lambda argv: (1, "Cannot connect to the Docker daemon") if "docker" in down else (0, "27"),
        ("podman", "info"): lambda argv: (
            (1, "cannot connect to Podman")
            if "podman" in down
            else (0, json.dumps(info or {"host": {"cgroupVersion": "v2"}}) if "json" in argv else "5.4")
        ),
    }
    runner = FakeCmdRunner(handlers=handlers)
    found = kind_problems(runner, host=Host.fake(root, tools=tools, environ=environ), engine=engine)
    return found, runner.calls


def test_no_problems_where_docker_answers():
    assert problems(host_root()) == ([], [INFO["docker"]])


def test_problems_name_each_missing_tool_and_why_no_engine():
    found, _ = problems(host_root(), tools=("docker",), down=("docker",))
    assert found == [
        "`kind` is not on PATH",
        "`kubectl` is not on PATH",
        "no container engine for kind: `docker info` fails: Cannot connect to the Docker daemon; `podman` is not on PATH",
    ]


def test_problems_honour_the_provider_variable():
    found, _ = problems(host_root(), environ={"KIND_EXPERIMENTAL_PROVIDER": "podman"}, down=("podman",))
    assert found == [
        "no container engine for kind: KIND_EXPERIMENTAL_PROVIDER=podman, but `podman info` fails: cannot connect to Podman"
    ]


def test_problems_of_a_pinned_engine():
    found, calls = problems(host_root(), tools=("docker", "kind", "kubectl"), engine="podman")
    assert found == ["the env file pins kind.engine podman, and `podman` is not on PATH"]
    assert calls == []  # nothing else is asked for
    found, calls = problems(host_root(), engine="podman")
    assert found == []
    assert calls == [["podman", "info", "--format", "json"]]  # podman's host needs are checked


def test_podman_host_problems_are_part_of_the_problems_on_podman():
    found, _ = problems(
        host_root(), down=("docker",), info={"host": {"cgroupVersion": "v1", "ociRuntime": {"name": "crun"}}}
    )
    assert found == [
        "podman runs crun, which refuses cgroup v1 hosts: set runtime runc (run scripts/kind-host-setup.sh)"
    ]


def _info_runner(info=None, *, fails=False) -> FakeCmdRunner:
    return FakeCmdRunner(
        handlers={
            ("podman", "info"): lambda argv: (125, "Error: no podman socket") if fails else (0, json.dumps(info or {}))
        }
    )


def bare_root(tmp_path) -> Path:
    """A host root with ``/lib/modules`` and nothing else (no containers.conf)."""
    root = tmp_path / "bare"
    (root / "lib" / "modules").mkdir(parents=True)
    return root


def host_problems(root: Path, info=None, *, fails=False, nofile=-1, environ=None) -> list[str]:
    host = Host.fake(root, environ=environ, nofile_hard=nofile)
    return podman_host_problems(_info_runner(info, fails=fails), host=host)


def test_podman_host_without_problems(tmp_path):
    conf = tmp_path / "c.conf"
    conf.write_text('[containers]\ndefault_ulimits = [\n  "nofile=4096:4096",\n]\n')
    info = {"host": {"cgroupVersion": "v2", "ociRuntime": {"name": "crun"}}}
    assert host_problems(bare_root(tmp_path), info, nofile=4096, environ={"CONTAINERS_CONF": str(conf)}) == []


def test_the_host_roots_containers_conf_files_are_read(tmp_path):
    root = host_root()  # prepared by the autouse fixture
    assert host_problems(root, nofile=NOFILE) == []
    (root / "etc" / "containers" / "containers.conf").unlink()
    assert len(host_problems(root, nofile=NOFILE)) == 1
    (root / "etc" / "containers" / "containers.conf.d").mkdir()
    (root / "etc" / "containers" / "containers.conf.d" / "50-agn.conf").write_text(
        '[containers]\ndefault_ulimits = ["nofile=65536:65536"]\n'
    )
    assert host_problems(root, nofile=NOFILE) == []  # a drop-in counts


def test_a_missing_lib_modules_is_named_with_the_fix(tmp_path):
    found = host_problems(tmp_path)
    assert found == ["/lib/modules does not exist (kind mounts it into every node; run scripts/kind-host-setup.sh)"]


@pytest.mark.parametrize("conf_text", [None, "[containers]\npids_limit = 2048\n"], ids=["no file", "no nofile"])
def test_a_low_nofile_limit_without_containers_conf_is_named(tmp_path, conf_text):
    conf = tmp_path / "c.conf"
    if conf_text is not None:
        conf.write_text(conf_text)
    found = host_problems(bare_root(tmp_path), nofile=20000, environ={"CONTAINERS_CONF": str(conf)})
    assert found == [
        "podman asks for 1048576 open files per container and this host allows 20000: no containers.conf sets "
        "default_ulimits nofile (run scripts/kind-host-setup.sh)"
    ]


def test_a_commented_out_nofile_setting_does_not_count(tmp_path):
    conf = tmp_path / "c.conf"
    conf.write_text('[containers]\n#default_ulimits = [\n#  "nofile=1280:2560",\n#]\n')
    found = host_problems(bare_root(tmp_path), nofile=20000, environ={"CONTAINERS_CONF": str(conf)})
    assert len(found) == 1 and "no containers.conf sets default_ulimits nofile" in found[0]


@pytest.mark.parametrize("hard", [1048576, 4194304, -1])
def test_a_high_nofile_limit_needs_no_containers_conf(tmp_path, hard):
    found = host_problems(bare_root(tmp_path), nofile=hard, environ={"CONTAINERS_CONF": str(tmp_path / "none")})
    assert found == []


@pytest.mark.parametrize(
    "cgroup, runtime, expected",
    [
        (
            "v1",
            "crun",
            ["podman runs crun, which refuses cgroup v1 hosts: set runtime runc (run scripts/kind-host-setup.sh)"],
        ),
        ("v1", "runc", []),
        ("v2", "crun", []),
    ],
)
def test_crun_on_cgroup_v1(tmp_path, cgroup, runtime, expected):
    info = {"host": {"cgroupVersion": cgroup, "ociRuntime": {"name": runtime}}}
    assert host_problems(bare_root(tmp_path), info) == expected


def test_podman_info_failing_is_named(tmp_path):
    [problem] = host_problems(bare_root(tmp_path), fails=True)
    # It names the command and its exit status (not yet podman's own message: see the report).
    assert problem == "`podman info` fails: Error: no podman socket"


# -- down ------------------------------------------------------------------------------------------------
def down(s: Setup) -> tuple[dict, list[str]]:
    lines: list[str] = []
    return s.kind.down(progress=lines.append), lines


def test_down_deletes_the_cluster_and_state_and_is_idempotent(home, envdef):
    EnvRecord(ENV, "kind", CONTEXT, str(home / "kubeconfig"), envdef.namespace).save()
    s = make(envdef, clusters=[ENV])
    first, lines = down(s)
    assert first == {"stopped": [f"kind cluster {ENV}"], "errors": [], "was_up": True}
    assert call(s.runner, "kind", "delete") == [
        "kind",
        "delete",
        "cluster",
        "--name",
        ENV,
        "--kubeconfig",
        str(home / "kubeconfig"),
    ]
    assert lines == [f"delete kind cluster {ENV} on docker (and context {CONTEXT})"]
    assert not env_dir(ENV).exists()

    s = make(envdef, clusters=[])
    second, lines = down(s)
    assert second == {"stopped": [], "errors": [], "was_up": False}
    assert not any(argv[:2] == ["kind", "delete"] for argv in s.runner.calls)
    assert lines == []


def test_down_removes_what_up_added_to_the_engine(home, envdef, monkeypatch):
    s = make(envdef, cli="podman", registry=False)

    def load(self):
        s.engine.add_image("sha256:" + "e" * 64, NODE_TAG, labels={KUBEADM_PATCH_LABEL: ETCD_PATCH})
        return NODE_TAG

    monkeypatch.setattr(NodeImageBuilder, "load", load)
    s.engine.add_image("sha256:" + "0" * 64, "docker.io/library/other:1")  # someone else's
    up(s, envdef)
    assert s.engine.networks == {"kind"}

    result, lines = down(s)
    assert result["errors"] == []
    assert result["stopped"] == [
        f"kind cluster {ENV}",
        "podman network kind",
        "3 podman images this env built or loaded",
    ]
    assert lines[1] == "remove " + ", ".join(result["stopped"][1:])
    assert s.engine.networks == set()
    assert set(s.engine.images) == {"sha256:" + "0" * 64}  # only what this env added is removed
    assert not env_dir(ENV).exists()
    kind_envs = [env for argv, env in zip(s.runner.calls, s.runner.envs, strict=True) if argv[0] == "kind"]
    assert kind_envs and all(env["KIND_EXPERIMENTAL_PROVIDER"] == "podman" for env in kind_envs)

    again, _ = down(make(envdef, cli="podman"))
    assert again == {"stopped": [], "errors": [], "was_up": False}


def test_down_keeps_a_network_it_did_not_make(home, envdef):
    s = make(envdef, cli="podman", networks={"kind"})  # another kind cluster made it
    up(s, envdef)
    assert "createdNetwork" not in state()
    result, _ = down(s)
    assert result["errors"] == []
    assert s.engine.networks == {"kind"}
    assert not any(argv[:3] == ["podman", "network", "rm"] for argv in s.runner.calls)


def test_down_keeps_the_network_while_other_clusters_use_it(home, envdef):
    s = make(envdef, cli="podman")
    up(s, envdef)
    s.engine.clusters.append("other")
    result, _ = down(s)
    assert result["errors"] == []
    assert s.engine.networks == {"kind"}
    assert not any(argv[:3] == ["podman", "network", "rm"] for argv in s.runner.calls)
    assert s.engine.clusters == ["other"]


def test_an_image_still_in_use_is_kept_and_said_not_an_error(home, envdef):
    s = make(envdef, cli="podman")
    up(s, envdef)
    used = "sha256:" + "a" * 64
    s.engine.in_use.add(used)
    result, _ = down(s)
    assert result["errors"] == []
    assert f"kept podman image {used[:19]} (in use; `podman image rm {used}` once it is not)" in result["stopped"]
    assert set(s.engine.images) == {used}
    assert not env_dir(ENV).exists()


def test_an_image_another_one_needs_is_removed_once_that_one_is_gone(home, envdef):
    parent, child = "sha256:" + "1" * 64, "sha256:" + "2" * 64
    s = make(envdef, cli="podman", parents={parent: child})
    EnvRecord(ENV, "kind", CONTEXT, str(home / "kubeconfig"), envdef.namespace).save()
    s.engine.add_image(parent)
    s.engine.add_image(child)
    (env_dir(ENV) / "kind.json").write_text(json.dumps({"engine": "podman", "createdImages": [parent, child]}))
    result, _ = down(s)
    assert result == {
        "stopped": ["2 podman images this env built or loaded"],
        "errors": [],
        "was_up": True,
    }
    assert s.engine.images == {}


def test_an_image_already_gone_is_not_reported(home, envdef):
    s = make(envdef, cli="podman")
    EnvRecord(ENV, "kind", CONTEXT, str(home / "kubeconfig"), envdef.namespace).save()
    (env_dir(ENV) / "kind.json").write_text(json.dumps({"engine": "podman", "createdImages": ["sha256:gone"]}))
    result, _ = down(s)
    assert result == {"stopped": [], "errors": [], "was_up": True}


def test_a_network_that_cannot_be_removed_is_an_error_and_the_record_is_kept(home, envdef):
    s = make(envdef, cli="podman")
    up(s, envdef)
    s.engine.network_in_use = True
    result, _ = down(s)
    assert result["errors"] == ["podman network rm kind: network kind is being used"]
    assert EnvRecord.load(ENV) is not None  # `env down` can be retried


def test_down_collects_a_failure_and_keeps_the_record_for_a_retry(home, envdef):
    EnvRecord(ENV, "kind", CONTEXT, str(home / "kubeconfig"), envdef.namespace).save()
    s = make(envdef, clusters=[ENV], fail=("kind", "delete"))
    result, _ = down(s)
    assert result["stopped"] == [] and len(result["errors"]) == 1 and "boom" in result["errors"][0]
    assert EnvRecord.load(ENV) is not None


# -- status and describe ------------------------------------------------------------------------------
def test_components_report_each_deployment_readiness(home, envdef):
    EnvRecord(ENV, "kind", CONTEXT, str(home / "kubeconfig"), envdef.namespace).save()
    s = make(envdef)
    s.kube.deployments = {
        "fake-provider-one": {"metadata": {"name": "fake-provider-one"}, "spec": {"replicas": 1}, "status": {}},
        "agn-operator": rolled_out("agn-operator"),
    }
    comps = s.kind.status()
    assert [(c["name"], c["running"], c["healthy"], c["replicas"]) for c in comps] == [
        ("agn-operator", True, True, "1/1"),
        ("fake-provider-one", False, False, "0/1"),
    ]
    # env status shows where the operator's /metrics is (through its Service); fakes have none.
    assert comps[0]["metricsUrl"] == f"http://agn-operator.{envdef.namespace}.svc:8080/metrics"
    assert "metricsUrl" not in comps[1]
    assert ("deployments", "app.kubernetes.io/part-of=agn") in s.kube.selectors
    assert s.kube.closed
    check_report(  # what `env status -o json` prints for a kind env matches its schema
        envelope(ENV_STATUS, {**EMPTY_STATUS, "env": ENV, "state": "degraded", "runtime": "kind", "components": comps})
    )
    assert s.runner.calls == []  # read through the API, no command


EMPTY_STATUS = {"context": None, "kubeconfig": None, "namespace": None, "objects": None}


def test_components_when_the_cluster_is_unreachable(home, envdef):
    EnvRecord(ENV, "kind", CONTEXT, str(home / "kubeconfig"), envdef.namespace).save()
    s = make(envdef, unreachable=True)
    assert s.kind.status() == [
        {
            "name": f"kind cluster {ENV}",
            "pid": None,
            "running": False,
            "healthy": False,
            "detail": "connection refused",
        }
    ]
    assert s.kube.closed


def test_components_of_an_env_that_is_down():
    assert KindEnv(ENV, runner=FakeCmdRunner()).status() == []


def test_pod_row_is_what_kubectl_get_pods_shows():
    pod = {
        "metadata": {"name": "agn-operator-7d9f"},
        "spec": {"nodeName": "example-control-plane", "containers": [{"name": "a"}, {"name": "b"}]},
        "status": {
            "phase": "Running",
            "containerStatuses": [{"ready": True, "restartCount": 2}, {"ready": False, "restartCount": 1}],
        },
    }
    assert pod_row(pod) == {
        "name": "agn-operator-7d9f",
        "ready": "1/2",
        "phase": "Running",
        "restarts": 3,
        "node": "example-control-plane",
    }
    assert pod_row({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}]}}) == {
        "name": "p",
        "ready": "0/1",
        "phase": "Unknown",
        "restarts": 0,
        "node": None,
    }


PODS = [
    {
        "metadata": {"name": "fake-provider-one-5c8"},
        "spec": {"containers": [{"name": "p"}]},
        "status": {"phase": "Pending", "containerStatuses": [{"ready": False, "restartCount": 0}]},
    },
    {
        "metadata": {"name": "agn-operator-7d9f"},
        "spec": {"nodeName": "example-control-plane", "containers": [{"name": "operator"}]},
        "status": {"phase": "Running", "containerStatuses": [{"ready": True, "restartCount": 4}]},
    },
]


def test_describe_shows_engine_node_image_and_pods(home, envdef):
    s = make(envdef, cli="podman", pods=PODS)
    up(s, envdef)
    s.kube.selectors.clear()
    cluster = s.kind.describe()
    assert cluster == {
        "engine": "podman",
        "nodeImage": "kind's default",
        "pods": [
            {
                "name": "agn-operator-7d9f",
                "ready": "1/1",
                "phase": "Running",
                "restarts": 4,
                "node": "example-control-plane",
            },
            {"name": "fake-provider-one-5c8", "ready": "0/1", "phase": "Pending", "restarts": 0, "node": None},
        ],
    }
    assert ("pods", "app.kubernetes.io/part-of=agn") in s.kube.selectors
    report = envelope(
        ENV_STATUS,
        {
            **EMPTY_STATUS,
            "env": ENV,
            "state": "up",
            "runtime": "kind",
            "components": s.kind.status(),
            "runtimeDetail": cluster,
        },
    )
    check_report(report)


def test_describe_without_a_reachable_cluster_has_no_pods(home, envdef):
    s = make(envdef, environ={"KIND_NODE_IMAGE": "kindest/node:v1.35.0"})
    up(s, envdef)
    s.kube.unreachable = True
    assert s.kind.describe() == {"engine": "docker", "nodeImage": "kindest/node:v1.35.0"}


def table_rows(text: str) -> list[list[str]]:
    """The cells of each line of a rich table, borders dropped."""
    return [[cell for cell in line.split() if cell not in ("│", "┃", "|")] for line in text.splitlines()]


def test_env_status_shows_the_cluster(home, envdef, monkeypatch):
    """``env status`` adds the runtime's describe() as "runtimeDetail": in the table and in the report."""
    from rich.console import Console

    from xtask.cli.env import status as status_command
    from xtask.runtime import registry

    s = make(envdef, cli="podman", pods=PODS)
    up(s, envdef)
    monkeypatch.setattr(registry, "recorded", lambda env, runtime: s.kind)
    monkeypatch.setattr(Kube, "from_kubeconfig", lambda **_: s.kube)  # the AGN objects, read from the fake
    data = status_command.collect(ENV)
    assert data["runtimeDetail"] == s.kind.describe()
    assert data["state"] == "up" and "error" not in data
    check_report(envelope(ENV_STATUS, data))

    console = Console(record=True, width=200, emoji=False, highlight=False, no_color=True)
    render_table(data, console)
    text = console.export_text()
    assert "engine=podman  node image=kind's default" in text
    rows = table_rows(text)
    assert ["name", "ready", "status", "restarts", "node"] in rows
    assert ["agn-operator-7d9f", "1/1", "Running", "4", "example-control-plane"] in rows
    assert ["fake-provider-one-5c8", "0/1", "Pending", "0", "-"] in rows


def test_env_status_of_an_unreachable_cluster_shows_engine_without_pods(home, envdef, monkeypatch):
    from rich.console import Console

    from xtask.cli.env import status as status_command
    from xtask.runtime import registry

    s = make(envdef, cli="podman", pods=PODS)
    up(s, envdef)
    s.kube.unreachable = True
    monkeypatch.setattr(registry, "recorded", lambda env, runtime: s.kind)
    monkeypatch.setattr(Kube, "from_kubeconfig", lambda **_: s.kube)
    data = status_command.collect(ENV)
    assert data["runtimeDetail"] == {"engine": "podman", "nodeImage": "kind's default"}
    assert data["state"] == "degraded" and data["error"] == "connection refused"
    check_report(envelope(ENV_STATUS, data))
    console = Console(record=True, width=200, emoji=False, highlight=False, no_color=True)
    render_table(data, console)
    text = console.export_text()
    assert "engine=podman  node image=kind's default" in text
    assert ["name", "ready", "status", "restarts", "node"] not in table_rows(text)  # no pods table


def test_env_status_of_a_runtime_without_describe_has_no_cluster(home, envdef, monkeypatch):
    from xtask.cli.env import status as status_command
    from xtask.runtime import registry

    class Plain(LocalEnv):  # a runtime that describes nothing beyond its components
        def status(self):
            return []

        def prometheus(self):
            return {"url": None, "running": False, "detail": "none here"}

    EnvRecord(ENV, "local", "local-example", str(home / "kubeconfig"), envdef.namespace).save()
    monkeypatch.setattr(registry, "recorded", lambda env, runtime: Plain(ENV))
    data = status_command.collect(ENV)
    assert "cluster" not in data
    check_report(envelope(ENV_STATUS, data))


@pytest.mark.parametrize("bad", ["kindest/node:v1 --privileged", "../../etc", "node\x1b[31m", "UPPER/node:v1"])
def test_a_bad_kind_node_image_is_refused_before_anything_is_made(home, envdef, bad):
    s = make(envdef, cli="podman", registry=False, environ={"KIND_NODE_IMAGE": bad})
    with pytest.raises(XtaskError, match="KIND_NODE_IMAGE is not an image reference"):
        up(s, envdef)
    assert not any(argv[:2] == ["kind", "create"] for argv in s.runner.calls)
    assert not env_dir(ENV).exists()


# -- the env file's `kind:` section (the runtime's declared SECTION) ----------------------------------------------------------
def example_env() -> dict:
    return yaml.safe_load((ENVS_DIR / "example.yaml").read_text())


def section_problems(data) -> list[str]:
    with pytest.raises(EnvDefinitionError) as exc:
        parse_env(data, source=Path("envs/bad.yaml"))
    return str(exc.value).split("\n")[1:]


DIGEST = "sha256:" + "0123456789abcdef" * 4


def pins(env) -> tuple:
    """The kind runtime's pins, as it reads them from its section."""
    return pinned(env, "engine"), pinned(env, "nodeImage")


def test_no_kind_section_pins_nothing():
    env = parse_env(example_env(), source=Path("envs/example.yaml"))
    assert pins(env) == (None, None)
    data = example_env()
    data["runtimes"] = {"kind": {}}
    env = parse_env(data, source=Path("envs/example.yaml"))
    assert pins(env) == (None, None)


@pytest.mark.parametrize(
    "section, engine, image",
    [
        ({"engine": "podman"}, "podman", None),
        ({"engine": "docker"}, "docker", None),
        ({"nodeImage": "kindest/node:v1.35.0"}, None, "kindest/node:v1.35.0"),
        (
            {"engine": "podman", "nodeImage": "localhost/agn/kind-node:v1.37.2-0123456789ab"},
            "podman",
            "localhost/agn/kind-node:v1.37.2-0123456789ab",
        ),
        ({"nodeImage": f"kindest/node:v1.35.0@{DIGEST}"}, None, f"kindest/node:v1.35.0@{DIGEST}"),
        ({"nodeImage": "127.0.0.1:5000/node"}, None, "127.0.0.1:5000/node"),
    ],
)
def test_kind_pins_are_parsed(section, engine, image):
    data = example_env()
    data["runtimes"] = {"kind": section}
    env = parse_env(data, source=Path("envs/example.yaml"))
    assert pins(env) == (engine, image)


def test_kind_pins_are_read_from_the_env_file(tmp_path):
    data = example_env()
    data["runtimes"] = {"kind": {"engine": "podman", "nodeImage": "kindest/node:v1.35.0"}}
    (tmp_path / "example.yaml").write_text(yaml.safe_dump(data))
    env = load_env("example", envs_dir=tmp_path)
    assert pins(env) == ("podman", "kindest/node:v1.35.0")


@pytest.mark.parametrize(
    "section, expected",
    [
        ({"engine": "containerd"}, "runtimes.kind.engine: must be one of docker, podman, got 'containerd'"),
        ({"engine": "Podman"}, "runtimes.kind.engine: must be one of docker, podman, got 'Podman'"),
        ({"engine": None}, "runtimes.kind.engine: must be one of docker, podman, got nothing (null)"),
        ({"engine": ["docker"]}, "runtimes.kind.engine: must be one of docker, podman, got list ['docker']"),
        ({"nodeImage": ""}, "runtimes.kind.nodeImage: must be an image reference, got ''"),
        (
            {"nodeImage": "kindest/node:v1 --retain"},
            "runtimes.kind.nodeImage: must be an image reference, got 'kindest/node:v1 --retain'",
        ),
        ({"nodeImage": "-x"}, "runtimes.kind.nodeImage: must be an image reference, got '-x'"),
        ({"nodeImage": "Kindest/node"}, "runtimes.kind.nodeImage: must be an image reference, got 'Kindest/node'"),
        ({"nodeImage": 7}, "runtimes.kind.nodeImage: must be an image reference, got 7"),
        (
            {"nodeImage": "node@sha256:abc"},
            "runtimes.kind.nodeImage: must be an image reference, got 'node@sha256:abc'",
        ),
        ({"registry": "localhost:5000"}, "runtimes.kind.registry: unknown field (allowed: engine, nodeImage)"),
    ],
)
def test_a_bad_kind_section_names_the_field_and_value(section, expected):
    data = example_env()
    data["runtimes"] = {"kind": section}
    assert section_problems(data) == [f"  {expected}"]


def test_a_kind_section_that_is_not_a_mapping_is_named():
    data = example_env()
    data["runtimes"] = {"kind": "podman"}
    assert section_problems(data) == ["  runtimes.kind: must be a mapping, got 'podman'"]


def test_a_too_long_node_image_is_refused():
    data = example_env()
    data["runtimes"] = {"kind": {"nodeImage": "a" * 256}}
    [problem] = section_problems(data)
    assert problem.startswith("  runtimes.kind.nodeImage: must be an image reference, got 'aaaa")


def test_every_kind_problem_is_reported_together():
    data = example_env()
    data["runtimes"] = {"kind": {"engine": "lxc", "nodeImage": "bad image", "extra": 1}}
    assert section_problems(data) == [
        "  runtimes.kind.extra: unknown field (allowed: engine, nodeImage)",
        "  runtimes.kind.engine: must be one of docker, podman, got 'lxc'",
        "  runtimes.kind.nodeImage: must be an image reference, got 'bad image'",
    ]
