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
from typing import Any

from agn.kube import Kube, kubeconfig_path
from agn.kubeconfig import read_for_update
from xtask.envdef import ENVS_DIR, EnvDef
from xtask.errors import CommandFailed, RuntimeUnavailable, XtaskError
from xtask.manifests import IMAGE, OPERATOR, deployment_names, metrics_url, render
from xtask.procs import CmdRunner, RealCmdRunner
from xtask.runtime.select import kind_problems
from xtask.runtime.steps import Progress, Step, UpContext, install_crds_step, readiness_step, run_steps
from xtask.state import REPO_ROOT, EnvRecord, remove_env_dir

RUNTIME = "kind"
FIELD_MANAGER = "agn-xtask-env"
KubeFactory = Callable[[str, str], Kube]


def context_name(env: str) -> str:
    return f"kind-{env}"


def kind_config_path(env: str, *, envs_dir: Path = ENVS_DIR) -> Path:
    return envs_dir / f"kind-{env}.yaml"


def _connect(kubeconfig: str, context: str) -> Kube:
    return Kube.from_kubeconfig(kubeconfig=kubeconfig, context=context, field_manager=FIELD_MANAGER)


class KindEnv:
    """One environment on the kind runtime."""

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
        self.context = context_name(env)
        self.runner = runner or RealCmdRunner()
        self._kube_factory = kube_factory
        self._which = which
        self._envs_dir = envs_dir
        self._build_context = build_context
        self.image = image

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
        record = EnvRecord.load(self.env)
        if record is not None and record.runtime != RUNTIME:
            raise XtaskError(
                f"environment {self.env} is up on the {record.runtime} runtime",
                hint=f"run `python -m xtask env down --env {self.env}` first",
            )
        problems = kind_problems(self.runner, which=self._which)
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
        )
        read_for_update(ctx.kubeconfig)  # not a kubeconfig: fail before creating anything
        exists = self.env in self.clusters()
        built: dict[str, Any] = {}

        def create_cluster(ctx: UpContext) -> None:
            argv = [
                "kind",
                "create",
                "cluster",
                "--name",
                self.env,
                "--kubeconfig",
                str(ctx.kubeconfig),
                "--wait",
                "120s",
            ]
            config = kind_config_path(self.env, envs_dir=self._envs_dir)
            if config.exists():
                argv += ["--config", str(config)]
            if retain:
                argv.append("--retain")  # kind keeps its own half-created nodes for debugging too
            self.runner.run(argv, timeout=900)
            ctx.started.append(f"kind cluster {self.env}")

        def delete_created_cluster(ctx: UpContext) -> None:
            if exists:
                return  # a reused cluster predates this run; a failed repair must not destroy it
            self.runner.run(
                ["kind", "delete", "cluster", "--name", self.env, "--kubeconfig", str(ctx.kubeconfig)], timeout=300
            )
            remove_env_dir(self.env)

        def write_context(ctx: UpContext) -> None:
            self.runner.run(
                ["kind", "export", "kubeconfig", "--name", self.env, "--kubeconfig", str(ctx.kubeconfig)], timeout=60
            )
            EnvRecord(self.env, RUNTIME, self.context, str(ctx.kubeconfig), envdef.namespace).save()
            ctx.kube = self._kube_factory(str(ctx.kubeconfig), self.context)

        def build_image(ctx: UpContext) -> None:
            self.runner.run(["docker", "build", "-t", self.image, str(self._build_context)], timeout=1800)
            image_id = self.runner.run(["docker", "image", "inspect", "--format", "{{.Id}}", self.image], timeout=60)
            built["image_id"] = image_id.stdout.strip() or None

        def load_image(ctx: UpContext) -> None:
            self.runner.run(["kind", "load", "docker-image", self.image, "--name", self.env], timeout=600)

        def apply_manifests(ctx: UpContext) -> None:
            objects = render(envdef, image=self.image, image_id=built.get("image_id"))
            before = {d["metadata"]["name"] for d in self.deployments(str(ctx.kubeconfig), envdef.namespace)}
            for obj in objects:
                ctx.connected().apply(obj)
            built["deployments"] = deployment_names(objects)
            ctx.started.extend(f"deployment {name}" for name in built["deployments"] if name not in before)

        def rollouts(ctx: UpContext) -> None:
            for name in built["deployments"]:
                self.runner.run(
                    self._kubectl(
                        str(ctx.kubeconfig),
                        envdef.namespace,
                        "rollout",
                        "status",
                        f"deployment/{name}",
                        f"--timeout={int(wait_timeout)}s",
                    ),
                    timeout=wait_timeout + 30,
                )

        steps = [
            Step(
                f"create kind cluster {self.env}", create_cluster, undo=delete_created_cluster, check=lambda ctx: exists
            ),
            Step(f"write kube context {self.context} to {ctx.kubeconfig}", write_context),
            Step(f"build image {self.image}", build_image),
            Step(f"load image {self.image} into kind cluster {self.env}", load_image),
            install_crds_step(),
            Step(f"apply manifests (namespace {envdef.namespace}, RBAC, deployments, AGN objects)", apply_manifests),
            Step("wait for every deployment to roll out", rollouts),
            readiness_step(
                diagnose=lambda: [
                    f"{c['name']}: {c.get('replicas', 'not ready')} ready"
                    for c in self.components()
                    if not c["healthy"]
                ]
            ),
        ]
        try:
            run_steps(steps, ctx, progress=progress, retain=retain)
        finally:
            ctx.close()
        return ctx.summary()

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
    def components(self) -> list[dict]:
        """One entry per AGN Deployment: running = a replica is ready, healthy = all are ready and updated."""
        record = EnvRecord.load(self.env)
        if record is None:
            return []
        try:
            items = self.deployments(record.kubeconfig, record.namespace)
        except (CommandFailed, ValueError):
            return [{"name": f"kind cluster {self.env}", "pid": None, "running": False, "healthy": False}]
        out = []
        for d in sorted(items, key=lambda d: d["metadata"]["name"]):
            name = d["metadata"]["name"]
            want = (d.get("spec") or {}).get("replicas", 1)
            status = d.get("status") or {}
            ready = status.get("readyReplicas", 0)
            out.append(
                {
                    "name": name,
                    "pid": None,
                    "running": ready > 0,
                    "healthy": ready >= want and status.get("updatedReplicas", 0) >= want,
                    "replicas": f"{ready}/{want}",
                    **({"metricsUrl": metrics_url(name, record.namespace)} if _scraped(name) else {}),
                }
            )
        return out


def _scraped(deployment: str) -> bool:
    """The operator and the gateways serve /metrics (the fake providers' metrics are their load)."""
    return deployment == OPERATOR or deployment.startswith("agn-gateway-")
