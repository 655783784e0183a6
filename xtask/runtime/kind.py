"""The ``kind`` runtime: a whole AGN environment in a kind cluster named after the env.

``up`` is an ordered list of steps (:mod:`xtask.runtime.steps`): check Docker/kind/kubectl,
create the cluster from ``envs/kind-<env>.yaml`` (or reuse it), write the ``kind-<env>``
context, build ``agn:dev`` and ``kind load`` it, install the CRDs, server-side apply the
rendered manifests (:mod:`xtask.manifests`), wait for every rollout and for every consumer
to serve its first overlay. Re-running it repairs what is missing. A failure rolls back
only what this run created (the cluster), unless ``retain``. ``down`` deletes the cluster
(idempotent) and the env's state folder, collecting every error.

Every docker/kind/kubectl call goes through a :class:`xtask.procs.CmdRunner` (list
arguments, captured output), so the command sequence is unit-tested with the fake runner.
Objects are applied in-process with :class:`agn.kube.Kube` — the same server-side apply the
local runtime uses and the dry-run test exercises — rather than through ``kubectl apply``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from agn.kube import Kube, kubeconfig_path
from agn.kubeconfig import read_for_update
from agn.objects import name_of
from xtask.envdef import ENVS_DIR, EnvDef
from xtask.errors import CommandFailed, RuntimeUnavailable, XtaskError
from xtask.manifests import IMAGE, deployment_names, render
from xtask.procs import CmdRunner, RealCmdRunner
from xtask.runtime.base import FIELD_MANAGER, Options, context_name, refuse_other_runtime
from xtask.runtime.deployments import component
from xtask.runtime.steps import Progress, Step, UpContext, install_crds_step, readiness_step, run_steps
from xtask.state import REPO_ROOT, EnvRecord, remove_env_dir

RUNTIME = "kind"
KubeFactory = Callable[[str, str], Kube]


def kind_problems(runner: CmdRunner | None = None, *, which: Callable[[str], str | None] = shutil.which) -> list[str]:
    """What keeps the kind runtime from working here (empty when it can be used)."""
    runner = runner or RealCmdRunner()
    problems = []
    if which("kind") is None:
        problems.append("`kind` is not on PATH")
    if which("kubectl") is None:
        problems.append("`kubectl` is not on PATH")
    if which("docker") is None:
        problems.append("`docker` is not on PATH")
    else:
        try:
            runner.run(["docker", "info", "--format", "{{.ServerVersion}}"], timeout=20)
        except CommandFailed:
            problems.append("`docker info` fails: no Docker engine is reachable")
    return problems


def kind_config_path(env: str, *, envs_dir: Path = ENVS_DIR) -> Path:
    return envs_dir / f"kind-{env}.yaml"


def _connect(kubeconfig: str, context: str) -> Kube:
    return Kube.from_kubeconfig(kubeconfig=kubeconfig, context=context, field_manager=FIELD_MANAGER)


class KindEnv:
    """One environment on the kind runtime."""

    name: ClassVar[str] = RUNTIME
    auto: ClassVar[bool] = True
    accepts: ClassVar[frozenset[str]] = frozenset({"image"})

    def __init__(
        self,
        env: str,
        *,
        runner: CmdRunner | None = None,
        kube_factory: KubeFactory = _connect,
        which: Callable[[str], str | None] = shutil.which,
        envs_dir: Path = ENVS_DIR,
        build_context: Path = REPO_ROOT,
        image: str = IMAGE,
    ) -> None:
        self.env = env
        self.context = context_name(RUNTIME, env)
        self.runner = runner or RealCmdRunner()
        self._kube_factory = kube_factory
        self._which = which
        self._envs_dir = envs_dir
        self._build_context = build_context
        self.image = image

    @classmethod
    def create(cls, env: str, options: Options) -> KindEnv:
        return cls(env, image=options.image or IMAGE)

    def problems(self) -> list[str]:
        return kind_problems(self.runner, which=self._which)

    # -- helpers ----------------------------------------------------------------------------
    def clusters(self) -> list[str]:
        """Names of the kind clusters that exist (``kind get clusters``)."""
        out = self.runner.run(["kind", "get", "clusters"], timeout=60).stdout
        return [line.strip() for line in out.splitlines() if line.strip()]

    def _kubectl(self, kubeconfig: str, namespace: str, *args: str) -> list[str]:
        return ["kubectl", "--kubeconfig", kubeconfig, "--context", self.context, "--namespace", namespace, *args]

    def deployments(self, kubeconfig: str, namespace: str) -> list[dict]:
        """The AGN Deployments in ``namespace`` as kubectl reports them (empty when there are none)."""
        res = self.runner.run(
            self._kubectl(
                kubeconfig, namespace, "get", "deployments", "-l", "app.kubernetes.io/part-of=agn", "-o", "json"
            ),
            timeout=60,
        )
        return json.loads(res.stdout or "{}").get("items", [])

    # -- up ---------------------------------------------------------------------------------
    def up(self, envdef: EnvDef, *, progress: Progress, retain: bool = False, wait_timeout: float = 60.0) -> dict:
        """Bring the environment up (or repair it). Returns what was created."""
        record = refuse_other_runtime(self.env, RUNTIME)
        problems = self.problems()
        if problems:
            raise RuntimeUnavailable(
                "the kind runtime cannot be used here: " + "; ".join(problems),
                hint=f"use the embedded control plane instead: python -m xtask env up --runtime local --env {self.env}",
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
        """Cluster, context, image, CRDs, manifests, rollouts, first overlays: in this order."""
        return [
            Step(
                f"create kind cluster {self.env}",
                self._create_cluster,
                undo=self._delete_created_cluster,
                check=lambda ctx: ctx.reused,
            ),
            Step(f"write kube context {self.context} to {ctx.kubeconfig}", self._write_context),
            Step(f"build image {self.image}", self._build_image),
            Step(f"load image {self.image} into kind cluster {self.env}", self._load_image),
            install_crds_step(),
            Step(
                f"apply manifests (namespace {ctx.envdef.namespace}, RBAC, deployments, AGN objects)",
                self._apply_manifests,
            ),
            Step("wait for every deployment to roll out", self._rollouts),
            readiness_step(diagnose=self._unready),
        ]

    def _create_cluster(self, ctx: UpContext) -> None:
        argv = ["kind", "create", "cluster", "--name", self.env, "--kubeconfig", str(ctx.kubeconfig), "--wait", "120s"]
        config = kind_config_path(self.env, envs_dir=self._envs_dir)
        if config.exists():
            argv += ["--config", str(config)]
        if ctx.retain:
            argv.append("--retain")  # kind keeps its own half-created nodes for debugging too
        self.runner.run(argv, timeout=900)
        ctx.started.append(f"kind cluster {self.env}")

    def _delete_created_cluster(self, ctx: UpContext) -> None:
        if ctx.reused:
            return  # a reused cluster predates this run; a failed repair must not destroy it
        self.runner.run(
            ["kind", "delete", "cluster", "--name", self.env, "--kubeconfig", str(ctx.kubeconfig)], timeout=300
        )
        remove_env_dir(self.env)

    def _write_context(self, ctx: UpContext) -> None:
        self.runner.run(
            ["kind", "export", "kubeconfig", "--name", self.env, "--kubeconfig", str(ctx.kubeconfig)], timeout=60
        )
        EnvRecord(self.env, RUNTIME, self.context, str(ctx.kubeconfig), ctx.envdef.namespace).save()
        ctx.kube = self._kube_factory(str(ctx.kubeconfig), self.context)

    def _build_image(self, ctx: UpContext) -> None:
        self.runner.run(["docker", "build", "-t", self.image, str(self._build_context)], timeout=1800)
        image_id = self.runner.run(["docker", "image", "inspect", "--format", "{{.Id}}", self.image], timeout=60)
        ctx.image_id = image_id.stdout.strip() or None

    def _load_image(self, ctx: UpContext) -> None:
        self.runner.run(["kind", "load", "docker-image", self.image, "--name", self.env], timeout=600)

    def _apply_manifests(self, ctx: UpContext) -> None:
        objects = render(ctx.envdef, image=self.image, image_id=ctx.image_id)
        before = {d["metadata"]["name"] for d in self.deployments(str(ctx.kubeconfig), ctx.envdef.namespace)}
        for obj in objects:
            ctx.connected().apply(obj)
        ctx.deployments = deployment_names(objects)
        ctx.started.extend(f"deployment {name}" for name in ctx.deployments if name not in before)

    def _rollouts(self, ctx: UpContext) -> None:
        for name in ctx.deployments:
            self.runner.run(
                self._kubectl(
                    str(ctx.kubeconfig),
                    ctx.envdef.namespace,
                    "rollout",
                    "status",
                    f"deployment/{name}",
                    f"--timeout={int(ctx.wait_timeout)}s",
                ),
                timeout=ctx.wait_timeout + 30,
            )

    def _unready(self) -> list[str]:
        return [f"{c['name']}: {c.get('replicas', 'not ready')} ready" for c in self.status() if not c["healthy"]]

    # -- down -------------------------------------------------------------------------------
    def down(self, *, progress: Progress) -> dict:
        """Delete the cluster if it exists and the env's state folder; idempotent, collects errors."""
        record = EnvRecord.load(self.env)
        kubeconfig = record.kubeconfig if record else kubeconfig_path()
        errors: list[str] = []
        stopped: list[str] = []
        existed = False
        try:
            existed = self.env in self.clusters()
            if existed:
                progress(f"delete kind cluster {self.env} (and context {self.context})")
                self.runner.run(
                    ["kind", "delete", "cluster", "--name", self.env, "--kubeconfig", kubeconfig], timeout=300
                )
                stopped.append(f"kind cluster {self.env}")
        except CommandFailed as exc:
            errors.append(f"{exc}: {exc.output.strip()}" if exc.output.strip() else str(exc))
        if not errors:
            # Keep the record while the cluster may still exist, so `env down` can be retried.
            try:
                remove_env_dir(self.env)
            except XtaskError as exc:  # not the env's own folder, or not all removed: says which
                errors.append(str(exc))
        return {"stopped": stopped, "errors": errors, "was_up": record is not None or existed}

    # -- inspection -------------------------------------------------------------------------
    def status(self) -> list[dict]:
        """One entry per AGN Deployment (:func:`xtask.runtime.deployments.component`)."""
        record = EnvRecord.load(self.env)
        if record is None:
            return []
        try:
            items = self.deployments(record.kubeconfig, record.namespace)
        except (CommandFailed, ValueError):
            return [{"name": f"kind cluster {self.env}", "pid": None, "running": False, "healthy": False}]
        return [component(d, record.namespace) for d in sorted(items, key=name_of)]
