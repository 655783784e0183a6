"""The ``kind`` runtime: a whole AGN environment in a kind cluster named after the env.

kind runs its nodes on Docker or Podman and chooses between them itself
(``KIND_EXPERIMENTAL_PROVIDER``, else whichever answers); this runtime makes the same choice
(:func:`xtask.engine.detect_engine`), unless the env file pins one (``kind.engine``), and passes
it on to every kind call. On Podman it also checks the host settings privileged nodes need
(:func:`xtask.runtime.kind_host.podman_host_problems`; ``scripts/kind-host-setup.sh``
makes them).

``up`` is an ordered list of steps (:mod:`xtask.runtime.steps`):

1. the node image: the env file's ``kind.nodeImage`` or ``KIND_NODE_IMAGE``; else kind's own
   default where the engine has it or a registry answers; else the one
   :mod:`xtask.images.nodeimage` builds with no registry (cached, loaded into the engine);
2. the cluster, from ``envs/kind-<env>.yaml`` plus what the node image needs (rendered into
   the env's state folder as ``kind-config.yaml``), or the existing one reused;
3. the ``kind-<env>`` context; the ``agn:dev`` image built on the engine and loaded into the
   nodes (``kind load docker-image``, or ``podman save`` + ``kind load image-archive``);
4. CRDs, the rendered manifests (server-side apply, :class:`agn.kube.Kube`), the rollouts and
   every consumer serving its first overlay.

Re-running it repairs what is missing. A failure rolls back only what this run created,
unless ``retain``. ``down`` deletes the cluster, then what this env added to the engine (the
``kind`` network when it made it, the images it loaded), then the state folder, collecting
every error. What was added is recorded in ``kind.json`` in the state folder.

Every docker/podman/kind call goes through a :class:`xtask.procs.CmdRunner` (list arguments,
captured output), so the command sequence is unit-tested with the fake runner.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import yaml

from agn.kube import Kube, KubeError
from agn.kubeconfig import kubeconfig_path, read_for_update, set_context_namespace
from agn.objects import name_of
from agn.outputfile import write_atomic
from xtask.engine import ENGINES, detect_engine, kind_environ, qualified
from xtask.envdef import EnvDef, load_env
from xtask.envschema import IMAGE_REF
from xtask.errors import CommandFailed, EnvDefinitionError, RuntimeUnavailable, XtaskError
from xtask.host import Host
from xtask.manifests import IMAGE, deployment_names, render
from xtask.procs import CmdRunner, RealCmdRunner
from xtask.progress import Progress
from xtask.runtime.base import FIELD_MANAGER, Flag, Options, Runtime, Section, context_name, refuse_other_runtime
from xtask.runtime.deployments import DEPLOYMENTS, IMAGE_FLAG, component, wait_rolled_out
from xtask.runtime.kind_host import (
    SETUP_HINT,
    host_cgroup_v1,
    image_labels,
    kind_config_path,
    kind_problems,
    node_has_image,
    pod_row,
    registry_reachable,
    render_kind_config,
)
from xtask.runtime.kind_ledger import KIND_NETWORK, KindLedger
from xtask.runtime.steps import Step, UpContext, install_crds_step, readiness_step, run_steps
from xtask.state import REPO_ROOT, EnvRecord, claim_env_dir, env_dir, remove_env_dir

RUNTIME = "kind"
KIND_DEFAULT_IMAGE_PREFIX = "kindest/node"
KubeFactory = Callable[[str, str], Kube]


def _connect(kubeconfig: str, context: str) -> Kube:
    return Kube.from_kubeconfig(kubeconfig=kubeconfig, context=context, field_manager=FIELD_MANAGER)


# The env file's `kind:` section: pins of the container engine and the node image (docs/kind.md).
SECTION = Section(
    "kind",
    {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "engine": {"enum": list(ENGINES), "x-must": f"must be one of {', '.join(ENGINES)}"},
            "nodeImage": {"type": "string", "format": "image-reference", "x-must": "must be an image reference"},
        },
    },
)


def pinned(envdef: EnvDef, key: str) -> str | None:
    """What the env file's ``kind:`` section pins (``engine``, ``nodeImage``); None: nothing."""
    return envdef.section(SECTION.key).get(key)


class KindEnv(Runtime):
    """One environment on the kind runtime."""

    name: ClassVar[str] = RUNTIME
    auto: ClassVar[bool] = True
    flags: ClassVar[tuple[Flag, ...]] = (IMAGE_FLAG,)
    section: ClassVar[Section | None] = SECTION

    def __init__(
        self,
        env: str,
        *,
        runner: CmdRunner | None = None,
        kube_factory: KubeFactory = _connect,
        host: Host | None = None,
        image: str | None = None,
        registry_probe: Callable[[], bool] = registry_reachable,
    ) -> None:
        self.env = env
        self.context = context_name(RUNTIME, env)
        self.runner = runner or RealCmdRunner()
        self._kube_factory = kube_factory
        self._given_host = host
        self._requested_image = image
        self._registry_probe = registry_probe
        self._engine: str | None = None
        self.ledger = KindLedger(env, self.runner)  # what this env added to the engine (kind.json)

    @property
    def _host(self) -> Host:
        """The machine kind runs on: read only when the runtime is used, not when it is made."""
        return self._given_host or Host.real()

    @classmethod
    def create(cls, env: str, options: Options) -> KindEnv:
        return cls(env, image=options.text(IMAGE_FLAG))

    # -- the engine ---------------------------------------------------------------------------
    def _pinned_engine(self, envdef: EnvDef | None = None) -> str | None:
        if envdef is None:
            try:
                envdef = load_env(self.env)
            except (EnvDefinitionError, OSError):
                return None  # up() reports a bad env file itself
        return pinned(envdef, "engine")

    def engine(self, envdef: EnvDef | None = None) -> str:
        """The container engine kind runs this env's nodes on (recorded once the env is up)."""
        if self._engine is None:
            recorded = self.ledger.read().get("engine")
            pinned = self._pinned_engine(envdef)
            if recorded in ("docker", "podman"):
                self._engine = recorded
            elif pinned:
                self._engine = pinned
            else:
                cli, reasons = detect_engine(environ=self._host.environ, which=self._host.which, runner=self.runner)
                if cli is None:
                    raise RuntimeUnavailable("no container engine for kind: " + "; ".join(reasons), hint=SETUP_HINT)
                self._engine = cli
        return self._engine

    @property
    def image(self) -> str:
        """The AGN image as the engine (and so the nodes) name it: podman stores ``agn:dev`` as
        ``localhost/agn:dev``, and the Deployments must name what was loaded."""
        return qualified(self._requested_image or IMAGE, self.engine())

    def _kind_env(self) -> dict[str, str]:
        return kind_environ(self._host.environ, self.engine())

    def _kind(self, *args: str, timeout: float) -> str:
        return self.runner.run(["kind", *args], env=self._kind_env(), timeout=timeout).stdout

    def problems(self) -> list[str]:
        return kind_problems(self.runner, host=self._host, engine=self._pinned_engine())

    def clusters(self) -> list[str]:
        """Names of the kind clusters that exist on this env's engine (``kind get clusters``)."""
        out = self._kind("get", "clusters", timeout=60)
        return [line.strip() for line in out.splitlines() if line.strip()]

    # -- up ---------------------------------------------------------------------------------
    def up(self, envdef: EnvDef, *, progress: Progress, retain: bool = False, wait_timeout: float = 60.0) -> dict:
        """Bring the environment up (or repair it). Returns what was created."""
        record = refuse_other_runtime(self.env, RUNTIME)
        self._chosen_node_image(envdef)  # a bad KIND_NODE_IMAGE is refused before anything else
        engine = pinned(envdef, "engine")
        if self._engine is None and engine and not self.ledger.read().get("engine"):
            self._engine = engine
        problems = kind_problems(self.runner, host=self._host, engine=engine)
        if problems:
            raise RuntimeUnavailable(
                "the kind runtime cannot be used here: " + "; ".join(problems),
                hint=f"run {SETUP_HINT}, or use the embedded control plane: "
                f"python -m xtask env up --runtime local --env {self.env}",
            )
        ctx = UpContext(
            env=self.env,
            envdef=envdef,
            context=self.context,
            kubeconfig=Path(kubeconfig_path()),
            fresh=record is None,
            wait_timeout=wait_timeout,
            retain=retain,
        )
        read_for_update(ctx.kubeconfig)  # not a kubeconfig: fail before creating anything
        ctx.reused = self.env in self.clusters()
        try:
            run_steps(self.up_steps(ctx), ctx, progress=progress, retain=retain)
        finally:
            ctx.close()
        return ctx.summary()

    def up_steps(self, ctx: UpContext) -> list[Step]:
        """Node image, cluster, context, image, CRDs, manifests, rollouts, first overlays: in this order."""
        return [
            Step(
                f"create kind cluster {self.env} on {self.engine()}",
                self._create_cluster,
                undo=self._delete_created_cluster,
                check=lambda ctx: ctx.reused,
            ),
            Step(f"write kube context {self.context} to {ctx.kubeconfig}", self._write_context),
            Step(f"build image {self.image} on {self.engine()}", self._build_image),
            Step(
                f"load image {self.image} into kind cluster {self.env}",
                self._load_image,
                check=lambda ctx: ctx.reused and self._nodes_have(ctx.image_id),
            ),
            install_crds_step(),
            Step(
                f"apply manifests (namespace {ctx.envdef.namespace}, RBAC, deployments, AGN objects)",
                self._apply_manifests,
            ),
            Step("wait for every deployment to roll out", self._rollouts),
            readiness_step(diagnose=self._unready),
        ]

    def _chosen_node_image(self, envdef: EnvDef) -> str | None:
        """The node image the env file or ``KIND_NODE_IMAGE`` names (checked: an image reference)."""
        chosen = pinned(envdef, "nodeImage") or self._host.environ.get("KIND_NODE_IMAGE") or None
        if chosen is not None and not IMAGE_REF.fullmatch(chosen):
            raise XtaskError(
                f"KIND_NODE_IMAGE is not an image reference: {chosen!r}",
                hint="name an image as registry/path:tag (or @sha256:digest), or unset KIND_NODE_IMAGE",
            )
        return chosen

    def node_image(self, envdef: EnvDef) -> tuple[str | None, dict]:
        """The node image for a new cluster (None: kind's default) and, for ours, its labels."""
        chosen = self._chosen_node_image(envdef)
        if chosen:
            return chosen, self._labels(chosen)
        cli = self.engine()
        listed = self.runner.run(
            [cli, "image", "ls", "--format", "{{.Repository}}"], check=False, timeout=60
        ).stdout.split()
        if any(r.endswith(KIND_DEFAULT_IMAGE_PREFIX) for r in listed) or self._registry_probe():
            return None, {}
        from xtask.engine import Engine
        from xtask.images.nodeimage import NodeImageBuilder

        builder = NodeImageBuilder(Engine.from_environ(cli, self._host.environ, runner=self.runner), runner=self.runner)
        before = self.ledger.image_ids(self.engine())
        tag = builder.load()
        self.ledger.note_new_images(self.engine(), before)
        return tag, self._labels(tag)

    def _labels(self, image: str) -> dict:
        return image_labels(self.runner, self.engine(), image)

    def _create_cluster(self, ctx: UpContext) -> None:
        from xtask.images.nodeimage import KUBEADM_PATCH_LABEL

        self.ledger.note(engine=self.engine())
        if not self.ledger.engine_has(self.engine(), "network", KIND_NETWORK):
            self.ledger.note(createdNetwork=True)
        image, labels = self.node_image(ctx.envdef)
        base_path = kind_config_path(self.env)
        base = yaml.safe_load(base_path.read_text()) if base_path.exists() else None
        patch = labels.get(KUBEADM_PATCH_LABEL)
        config = render_kind_config(
            base,
            kubeadm_patches=[patch] if patch else [],
            own_node_image=bool(patch),
            cgroup_v1=host_cgroup_v1(self._host),
        )
        config_file = claim_env_dir(self.env) / "kind-config.yaml"
        write_atomic(config_file, yaml.safe_dump(config, sort_keys=False))
        argv = ["create", "cluster", "--name", self.env, "--kubeconfig", str(ctx.kubeconfig), "--wait", "120s"]
        argv += ["--config", str(config_file)]
        if image:
            argv += ["--image", image]
            self.ledger.note(nodeImage=image)
        if ctx.retain:
            argv.append("--retain")  # kind keeps its own half-created nodes for debugging too
        self._kind(*argv, timeout=900)
        ctx.started.append(f"kind cluster {self.env} ({self.engine()})")

    def _remove_engine_leftovers(self, errors: list[str]) -> list[str]:
        return self.ledger.remove_leftovers(self._engine, clusters=self.clusters, errors=errors)

    def _delete_created_cluster(self, ctx: UpContext) -> None:
        if ctx.reused:
            return  # a reused cluster predates this run; a failed repair must not destroy it
        self._kind("delete", "cluster", "--name", self.env, "--kubeconfig", str(ctx.kubeconfig), timeout=300)
        self._remove_engine_leftovers([])
        remove_env_dir(self.env)

    def _write_context(self, ctx: UpContext) -> None:
        self._kind("export", "kubeconfig", "--name", self.env, "--kubeconfig", str(ctx.kubeconfig), timeout=60)
        # The env's namespace is the context's default, as on the local runtime: the
        # specification's commands name only --context kind-<env>.
        set_context_namespace(ctx.kubeconfig, self.context, ctx.envdef.namespace)
        self.ledger.note(engine=self.engine())  # also for a cluster this run found already made
        EnvRecord(self.env, RUNTIME, self.context, str(ctx.kubeconfig), ctx.envdef.namespace).save()
        ctx.kube = self._kube_factory(str(ctx.kubeconfig), self.context)

    def _build_image(self, ctx: UpContext) -> None:
        from xtask.engine import Engine
        from xtask.images.agn_image import ImageBuilder

        cli = self.engine()
        before = self.ledger.image_ids(self.engine())
        engine = Engine.from_environ(cli, self._host.environ, runner=self.runner)
        builder = ImageBuilder(engine, runner=self.runner, repo=REPO_ROOT, which=self._host.which)
        if builder.debootstrap_problems():
            # Where a registry works: the Dockerfile's own base image.
            self.runner.run([cli, "build", "-t", self.image, str(REPO_ROOT)], timeout=1800)
        else:
            builder.build(self.image)
        self.ledger.note_new_images(self.engine(), before)
        image_id = self.runner.run([cli, "image", "inspect", "--format", "{{.Id}}", self.image], timeout=60)
        ctx.image_id = image_id.stdout.strip() or None

    def _nodes_have(self, image_id: str | None) -> bool:
        """Whether every node's containerd holds the image with this id already (a repeated
        ``up`` then loads nothing)."""
        if not image_id:
            return False
        nodes = self._kind("get", "nodes", "--name", self.env, timeout=60).split()
        return bool(nodes) and all(
            node_has_image(self.runner, self.engine(), node, self.image, image_id) for node in nodes
        )

    def _load_image(self, ctx: UpContext) -> None:
        if self.engine() == "docker":
            self._kind("load", "docker-image", self.image, "--name", self.env, timeout=600)
            return
        archive = env_dir(self.env) / "agn-image.tar"
        try:
            self.runner.run(
                ["podman", "save", "--format", "docker-archive", "-o", str(archive), self.image], timeout=600
            )
            self._kind("load", "image-archive", str(archive), "--name", self.env, timeout=600)
        finally:
            archive.unlink(missing_ok=True)

    def _apply_manifests(self, ctx: UpContext) -> None:
        objects = render(ctx.envdef, image=self.image, image_id=ctx.image_id)
        kube = ctx.connected()
        before = {name_of(d) for d in kube.list(DEPLOYMENTS, ctx.envdef.namespace)[0]} if ctx.reused else set()
        for obj in objects:
            kube.apply(obj)
        ctx.deployments = deployment_names(objects)
        ctx.started.extend(f"deployment {name}" for name in ctx.deployments if name not in before)

    def _rollouts(self, ctx: UpContext) -> None:
        wait_rolled_out(ctx.connected(), ctx.envdef.namespace, ctx.deployments, timeout=ctx.wait_timeout)

    def _unready(self) -> list[str]:
        return [f"{c['name']}: {c.get('replicas', 'not ready')} ready" for c in self.status() if not c["healthy"]]

    # -- down -------------------------------------------------------------------------------
    def down(self, *, progress: Progress) -> dict:
        """Delete the cluster, what this env added to the engine and the env's state folder;
        idempotent, collects errors."""
        record = EnvRecord.load(self.env)
        kubeconfig = record.kubeconfig if record else kubeconfig_path()
        errors: list[str] = []
        stopped: list[str] = []
        existed = False
        try:
            existed = self.env in self.clusters()
            if existed:
                progress(f"delete kind cluster {self.env} on {self.engine()} (and context {self.context})")
                self._kind("delete", "cluster", "--name", self.env, "--kubeconfig", kubeconfig, timeout=300)
                stopped.append(f"kind cluster {self.env}")
            removed = self._remove_engine_leftovers(errors)
            if removed:
                progress("remove " + ", ".join(removed))
            stopped.extend(removed)
        except (CommandFailed, RuntimeUnavailable) as exc:
            errors.append(f"{exc}: {exc.output.strip()}" if isinstance(exc, CommandFailed) and exc.output else str(exc))
        if not errors:
            # Keep the record while the cluster may still exist, so `env down` can be retried.
            try:
                remove_env_dir(self.env)
            except XtaskError as exc:  # not the env's own folder, or not all removed: says which
                errors.append(str(exc))
        return {"stopped": stopped, "errors": errors, "was_up": record is not None or existed}

    # -- inspection -------------------------------------------------------------------------
    def _read(self, record: EnvRecord) -> tuple[list[dict], list[dict]]:
        kube = self._kube_factory(record.kubeconfig, record.context)
        try:
            deployments = kube.list(DEPLOYMENTS, record.namespace, label_selector="app.kubernetes.io/part-of=agn")[0]
            pods = kube.list_objects(
                "v1", "Pod", namespace=record.namespace, label_selector="app.kubernetes.io/part-of=agn"
            )
        finally:
            kube.close()
        return deployments, pods

    def status(self) -> list[dict]:
        """One entry per AGN Deployment (:func:`xtask.runtime.deployments.component`)."""
        record = EnvRecord.load(self.env)
        if record is None:
            return []
        try:
            items, _ = self._read(record)
        except (KubeError, OSError) as exc:
            return [
                {
                    "name": f"kind cluster {self.env}",
                    "pid": None,
                    "running": False,
                    "healthy": False,
                    "detail": str(exc),
                }
            ]
        return [component(d, record.namespace) for d in sorted(items, key=name_of)]

    def describe(self) -> dict:
        """The cluster's engine and node image, and each AGN pod's readiness (``env status``)."""
        record = EnvRecord.load(self.env)
        ledger = self.ledger.read()
        out: dict[str, Any] = {"engine": ledger.get("engine"), "nodeImage": ledger.get("nodeImage") or "kind's default"}
        if record is None:
            return out
        try:
            _, pods = self._read(record)
        except (KubeError, OSError):
            return out
        out["pods"] = [pod_row(p) for p in sorted(pods, key=name_of)]
        return out
