"""The ``cluster`` runtime: an AGN environment deployed into an existing cluster, named by
``--context`` (and ``--kubeconfig``): a shared dev cluster, EKS, GKE, or a kind cluster made
elsewhere. It never creates or deletes the cluster itself.

``up`` is an ordered list of steps (:mod:`xtask.runtime.steps`): connect with the context,
record the env, server-side apply the AGN CRDs, then the objects :func:`xtask.manifests.render`
gives (with ``--image``), each labelled ``agn.dev/env=<env>`` and
``app.kubernetes.io/managed-by=agn-xtask``, wait for every Deployment to roll out and for
every consumer to serve its first overlay. ``--dry-run`` sends every object as a server-side
dry run instead (the API server validates and admits it; nothing is stored, nothing recorded).
``--no-wait`` stops after the apply. A fresh ``up`` that fails removes what it applied (unless
``--retain``); a repair leaves things as they were.

``down`` deletes only what carries the env's label, kind by kind (AGN objects, Deployments,
Services, RBAC, ServiceAccounts), so objects it did not apply — unlabelled ones, another env's
— stay. The CRDs are never deleted: they are cluster-wide and every env's objects depend on
them. The namespace is deleted only when this env's ``up`` created it: an existing namespace
is never applied to (so it never gets the env's label), a namespace ``up`` created carries the
label. Overlays the operator wrote are owned by their consumers and go with them (the
cluster's garbage collector).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import ClassVar

from agn.kube import Forbidden, Kube, KubeError, NotFound
from agn.kubeconfig import kubeconfig_path
from agn.objects import Obj, name_of
from xtask.crds import crd_documents, install_crds, policy_documents
from xtask.envdef import EnvDef
from xtask.errors import RuntimeUnavailable, XtaskError
from xtask.manifests import IMAGE, deployment_names, render
from xtask.progress import Progress
from xtask.runtime.base import FIELD_MANAGER, Flag, Options, Runtime, refuse_other_runtime
from xtask.runtime.deployments import DEPLOYMENTS, IMAGE_FLAG, component, wait_rolled_out
from xtask.runtime.steps import Step, UpContext, readiness_step, run_steps
from xtask.state import EnvRecord, remove_env_dir

RUNTIME = "cluster"
ENV_LABEL = "agn.dev/env"
MANAGED_BY = ("app.kubernetes.io/managed-by", "agn-xtask")
# Every kind `render` produces, in the order `down` deletes them (the reverse of applying):
# what uses a thing goes before it, the namespace last.
KINDS: tuple[tuple[str, str], ...] = (
    ("agn.dev/v1alpha1", "InferenceProvider"),
    ("agn.dev/v1alpha1", "InferenceConsumer"),
    ("agn.dev/v1alpha1", "InferenceNetwork"),
    ("apps/v1", "Deployment"),
    ("v1", "Service"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("v1", "ServiceAccount"),
    ("v1", "Namespace"),
)


def selector(env: str) -> str:
    """The label selector of everything ``up`` applied for ``env``."""
    return f"{ENV_LABEL}={env},{MANAGED_BY[0]}={MANAGED_BY[1]}"


def labelled(obj: Obj, env: str) -> Obj:
    """A copy of ``obj`` carrying the env's labels (``down`` finds it by them)."""
    out = copy.deepcopy(obj)
    labels = out.setdefault("metadata", {}).setdefault("labels", {})
    labels.update({ENV_LABEL: env, MANAGED_BY[0]: MANAGED_BY[1]})
    return out


def _ref(obj: Obj) -> str:
    ns = obj["metadata"].get("namespace")
    return f"{obj['kind']} {ns}/{name_of(obj)}" if ns else f"{obj['kind']} {name_of(obj)}"


CONTEXT = Flag("--context", metavar="CONTEXT", help="The kube context of an existing cluster to deploy into.")
KUBECONFIG = Flag(
    "--kubeconfig", metavar="FILE", help="The kubeconfig file holding --context (default: as kubectl finds it)."
)
DRY_RUN = Flag("--dry-run", type=bool, help="Send every object as a server-side dry run; change nothing.")
NO_WAIT = Flag("--no-wait", type=bool, help="Return once applied; do not wait for rollouts or overlays.")


class ClusterEnv(Runtime):
    """One environment in an existing cluster."""

    name: ClassVar[str] = RUNTIME
    auto: ClassVar[bool] = False  # it deploys into somebody's cluster: only when asked by name
    flags: ClassVar[tuple[Flag, ...]] = (CONTEXT, KUBECONFIG, IMAGE_FLAG, DRY_RUN, NO_WAIT)

    def __init__(
        self,
        env: str,
        *,
        context: str | None = None,
        kubeconfig: str | None = None,
        image: str = IMAGE,
        dry_run: bool = False,
        wait: bool = True,
    ) -> None:
        self.env = env
        record = EnvRecord.load(env)
        # A repair (or down, or status) of a recorded env uses the recorded context by default.
        recorded = record if record is not None and record.runtime == RUNTIME else None
        self.context = context or (recorded.context if recorded else None)
        self.kubeconfig = kubeconfig or (recorded.kubeconfig if recorded else None)
        self.image = image
        self.dry_run = dry_run
        self.wait = wait

    @classmethod
    def create(cls, env: str, options: Options) -> ClusterEnv:
        return cls(
            env,
            context=options.text(CONTEXT),
            kubeconfig=options.text(KUBECONFIG),
            image=options.text(IMAGE_FLAG) or IMAGE,
            dry_run=options.switch(DRY_RUN),
            wait=not options.switch(NO_WAIT),
        )

    def _connect(self) -> Kube:
        return Kube.from_kubeconfig(kubeconfig=self.kubeconfig, context=self.context, field_manager=FIELD_MANAGER)

    def problems(self) -> list[str]:
        if not self.context:
            return ["no --context given: name the kube context of the existing cluster to deploy into"]
        try:
            kube = self._connect()
        except KubeError as exc:
            return [str(exc)]
        try:
            kube.namespace_exists("default")
        except Forbidden:
            pass  # reachable and authenticated; what it may do shows when applying
        except KubeError as exc:
            return [f"context {self.context}: {exc}"]
        finally:
            kube.close()
        return []

    # -- up ---------------------------------------------------------------------------------
    def up(self, envdef: EnvDef, *, progress: Progress, retain: bool = False, wait_timeout: float = 60.0) -> dict:
        record = refuse_other_runtime(self.env, RUNTIME)
        if record is not None and self.context != record.context:
            raise XtaskError(
                f"environment {self.env} is up in context {record.context}, not {self.context}",
                hint=f"run `python -m xtask env down --env {self.env}` first",
            )
        problems = self.problems()
        if problems:
            raise RuntimeUnavailable(
                "the cluster runtime cannot be used: " + "; ".join(problems),
                hint="list the contexts with `kubectl config get-contexts`",
            )
        assert self.context is not None  # problems() says so otherwise
        ctx = UpContext(
            env=self.env,
            envdef=envdef,
            context=self.context,
            kubeconfig=Path(kubeconfig_path(self.kubeconfig)),
            fresh=record is None,
            wait_timeout=wait_timeout,
            retain=retain,
            reused=True,  # the cluster is somebody's: nothing here ever removes it
            dry_run=self.dry_run,
        )
        try:
            run_steps(self.up_steps(ctx), ctx, progress=progress, retain=retain)
        finally:
            ctx.close()
        return ctx.summary()

    def up_steps(self, ctx: UpContext) -> list[Step]:
        """Connect, record, CRDs, labelled manifests; then, unless a dry run or ``--no-wait``,
        the rollouts and the first overlays."""
        how = "server-side dry run of" if ctx.dry_run else "apply"
        steps = [Step(f"connect with context {ctx.context}", self._connect_step)]
        if not ctx.dry_run:
            steps.append(Step(f"record environment {self.env}", self._record, undo=self._remove_applied))
        steps += [
            Step(f"{how} the AGN CRDs", self._crds),
            Step(
                f"{how} manifests (image {self.image}), labelled {ENV_LABEL}={self.env}, in namespace "
                f"{ctx.envdef.namespace}",
                self._apply,
            ),
        ]
        if self.wait and not ctx.dry_run:
            steps += [
                Step("wait for every deployment to roll out", self._rollouts),
                readiness_step(diagnose=self._unready),
            ]
        return steps

    def _connect_step(self, ctx: UpContext) -> None:
        ctx.kube = self._connect()

    def _record(self, ctx: UpContext) -> None:
        EnvRecord(self.env, RUNTIME, ctx.context, str(ctx.kubeconfig), ctx.envdef.namespace).save()

    def _remove_applied(self, ctx: UpContext) -> None:
        """Undo of a fresh bring-up: what it applied (found by label, as ``down`` does) and its record."""
        if not ctx.fresh:
            return
        errors = self._delete_labelled(ctx.connected(), ctx.envdef.namespace, progress=lambda line: None)[1]
        if errors:
            raise XtaskError("could not remove everything this run applied: " + "; ".join(errors))
        remove_env_dir(self.env)

    def _crds(self, ctx: UpContext) -> None:
        kube = ctx.connected()
        if ctx.dry_run:
            for doc in crd_documents() + policy_documents():
                kube.apply(doc, dry_run=True)
        else:
            install_crds(kube, namespace=ctx.envdef.namespace)

    def _apply(self, ctx: UpContext) -> None:
        kube, ns = ctx.connected(), ctx.envdef.namespace
        objects = [labelled(o, self.env) for o in render(ctx.envdef, image=self.image)]
        before = {name_of(d) for d in kube.list(DEPLOYMENTS, ns, label_selector=selector(self.env))[0]}
        namespace_exists = kube.namespace_exists(ns)
        for obj in objects:
            if obj["kind"] == "Namespace" and namespace_exists and not self._namespace_is_ours(kube, ns):
                continue  # somebody else's namespace: used, never labelled, never deleted
            if ctx.dry_run and not namespace_exists and obj["metadata"].get("namespace"):
                # The API server admits nothing into a namespace that does not exist yet.
                ctx.skipped.append(f"{_ref(obj)} (namespace {ns} does not exist yet)")
                continue
            try:
                kube.apply(obj, dry_run=ctx.dry_run)
            except NotFound:
                if not ctx.dry_run:
                    raise
                ctx.skipped.append(f"{_ref(obj)} (its CRD is not installed yet)")
                continue
            ctx.applied.append(_ref(obj))
        ctx.deployments = deployment_names(objects)
        if not ctx.dry_run:
            ctx.started.extend(f"deployment {name}" for name in ctx.deployments if name not in before)

    def _namespace_is_ours(self, kube: Kube, namespace: str) -> bool:
        found = kube.list_objects("v1", "Namespace", label_selector=selector(self.env))
        return any(name_of(n) == namespace for n in found)

    def _rollouts(self, ctx: UpContext) -> None:
        wait_rolled_out(ctx.connected(), ctx.envdef.namespace, ctx.deployments, timeout=ctx.wait_timeout)

    def _unready(self) -> list[str]:
        return [f"{c['name']}: {c.get('replicas', 'not ready')} ready" for c in self.status() if not c["healthy"]]

    # -- down -------------------------------------------------------------------------------
    def down(self, *, progress: Progress) -> dict:
        """Delete what carries the env's label, then the env's record; idempotent, collects errors."""
        record = EnvRecord.load(self.env)
        if record is None:
            remove_env_dir(self.env)
            return {"stopped": [], "errors": [], "was_up": False}
        errors: list[str] = []
        deleted: list[str] = []
        try:
            kube = self._connect()
        except KubeError as exc:
            return {"stopped": [], "errors": [f"context {record.context}: {exc}"], "was_up": True}
        try:
            deleted, errors = self._delete_labelled(kube, record.namespace, progress=progress)
        finally:
            kube.close()
        if not errors:
            # Kept while labelled objects may remain, so `env down` can be retried.
            try:
                remove_env_dir(self.env)
            except XtaskError as exc:
                errors.append(str(exc))
        return {"stopped": deleted, "errors": errors, "was_up": True}

    def _delete_labelled(self, kube: Kube, namespace: str, *, progress: Progress) -> tuple[list[str], list[str]]:
        deleted: list[str] = []
        errors: list[str] = []
        for api_version, kind in KINDS:
            try:
                found = kube.list_objects(api_version, kind, namespace=namespace, label_selector=selector(self.env))
            except NotFound:
                continue  # the kind is not served (the AGN CRDs were never installed): nothing of it to delete
            except KubeError as exc:
                errors.append(f"list {kind}: {exc}")
                continue
            for obj in sorted(found, key=name_of):
                ref = _ref({**obj, "kind": kind})
                try:
                    if kube.delete_object(api_version, kind, name_of(obj), namespace=namespace):
                        progress(f"delete {ref}")
                        deleted.append(ref)
                except KubeError as exc:
                    errors.append(f"delete {ref}: {exc}")
        return deleted, errors

    # -- inspection -------------------------------------------------------------------------
    def status(self) -> list[dict]:
        """One entry per Deployment the env applied (:func:`xtask.runtime.deployments.component`)."""
        record = EnvRecord.load(self.env)
        if record is None:
            return []
        try:
            kube = self._connect()
            try:
                items = kube.list(DEPLOYMENTS, record.namespace, label_selector=selector(self.env))[0]
            finally:
                kube.close()
        except KubeError as exc:
            return [
                {
                    "name": f"cluster context {record.context}",
                    "pid": None,
                    "running": False,
                    "healthy": False,
                    "detail": str(exc),
                }
            ]
        return [component(d, record.namespace) for d in sorted(items, key=name_of)]
