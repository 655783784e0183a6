"""Bring-up as an ordered list of small named steps over one typed context (kind's
``create`` actions + ``--retain``, envtest's ``Start``).

Each :class:`Step` owns its check ("already fine?" — a step whose check passes is skipped
and reported as such), its action, and its undo. If a step fails, its own undo (it may have
done part of its work) and then the undos of the steps that ran are executed in reverse
order, unless ``retain``; undo errors are reported and never mask the original error, which
is re-raised. Undos must therefore tolerate work that was only partly done.

The steps the runtimes share — CRDs, the env's namespace and objects, readiness — are
defined once here; each runtime adds its own (processes, or cluster + image + manifests).
Steps pass data to later steps only through :class:`UpContext`, never through a side dict.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from xtask.interrupts import interruptible
from xtask.progress import Progress, step_reporter

if TYPE_CHECKING:
    from agn.kube import Kube
    from xtask.envmodel import EnvDef


@dataclasses.dataclass
class UpContext:
    """Everything one ``env up`` run knows and produces; steps read and fill it."""

    env: str
    envdef: EnvDef
    context: str
    kubeconfig: Path
    fresh: bool  # no record of this env existed: a failure rolls back everything
    wait_timeout: float
    retain: bool = False  # on failure keep what was made (kind passes it on to `kind create cluster`)
    reused: bool = False  # the cluster predates this run: never removed by a rollback
    dry_run: bool = False  # objects are sent as server-side dry runs: nothing is stored
    kube: Kube | None = None
    image_id: str | None = None  # the built image's id: rolls Deployments when a rebuilt tag did not change
    deployments: list[str] = dataclasses.field(default_factory=list)  # of the applied manifests
    applied: list[str] = dataclasses.field(default_factory=list)  # "Kind namespace/name" applied (or dry-run)
    skipped: list[str] = dataclasses.field(default_factory=list)  # what a dry run could not validate, and why
    started: list[str] = dataclasses.field(default_factory=list)
    served: dict[str, int] = dataclasses.field(default_factory=dict)
    excluded: list[str] = dataclasses.field(default_factory=list)
    endpoints: dict[str, str] = dataclasses.field(default_factory=dict)  # provider -> URL of its fake
    prometheus: str | None = None  # the URL of the env's Prometheus (local runtime, when installed)

    def connected(self) -> Kube:
        assert self.kube is not None, "a step that needs the API ran before the connect step"
        return self.kube

    def close(self) -> None:
        if self.kube is not None:
            self.kube.close()
            self.kube = None

    def summary(self) -> dict:
        return {
            "started": self.started,
            "context": self.context,
            "kubeconfig": str(self.kubeconfig),
            "served": self.served,
            "excluded": self.excluded,
            # Reported when set (the cluster runtime lists what it applied or dry-ran).
            **({"applied": self.applied} if self.applied else {}),
            **({"skipped": self.skipped} if self.skipped else {}),
            **({"dryRun": True} if self.dry_run else {}),
            **({"prometheus": self.prometheus} if self.prometheus else {}),
        }


Action = Callable[[UpContext], object]


@dataclasses.dataclass
class Step:
    title: str
    run: Action
    undo: Action | None = None
    check: Callable[[UpContext], bool] | None = None  # True: already fine, skip


def run_steps(steps: list[Step], ctx: UpContext, *, progress: Progress, retain: bool = False) -> list[str]:
    """Run ``steps`` in order, each reported to ``progress`` (a :class:`~xtask.progress.StepReporter`
    hears where each starts and ends); returns the titles of those that ran. Rolls back on failure,
    and on SIGINT or SIGTERM alike (:func:`xtask.interrupts.interruptible`): the rollback itself
    is not cut short by further signals."""
    report = step_reporter(progress)  # each step's start and end, and how long it took
    done: list[Step] = []
    with interruptible():
        try:
            for step in steps:
                if step.check is not None and step.check(ctx):
                    report.skipped(step.title)
                    continue
                report.started(step.title)
                done.append(step)
                began = time.monotonic()
                try:
                    step.run(ctx)
                except BaseException:
                    report.failed(step.title, time.monotonic() - began)
                    raise
                report.finished(step.title, time.monotonic() - began)
        except BaseException as failure:
            if not retain:
                if isinstance(failure, KeyboardInterrupt):
                    report(f"interrupted ({failure or 'SIGINT'}): rolling back what this run started")
                for step in reversed(done):
                    if step.undo is None:
                        continue
                    try:
                        step.undo(ctx)
                    except Exception as exc:  # collected, never masks the original failure
                        report(f"rollback of {step.title!r} failed: {exc}")
            raise
    return [s.title for s in done]


# -- steps both runtimes share ------------------------------------------------------------------
def _install_crds(ctx: UpContext) -> None:
    from xtask.crds import install_crds

    install_crds(ctx.connected(), namespace=ctx.envdef.namespace)
    ctx.connected().ensure_namespace(ctx.envdef.namespace)


def _apply_objects(ctx: UpContext) -> None:
    kube, envdef = ctx.connected(), ctx.envdef
    for obj in envdef.network_objects() + envdef.consumer_objects() + envdef.provider_objects(ctx.endpoints):
        kube.apply(obj, namespace=envdef.namespace)


def _wait_ready(ctx: UpContext, diagnose: Callable[[], list[str]]) -> None:
    from xtask.readiness import wait_ready

    # A fresh env's own fake providers (no endpoint of their own) must answer before it is ready.
    own = frozenset(p.name for p in ctx.envdef.providers if not p.endpoint) if ctx.fresh else frozenset()
    result = wait_ready(ctx.connected(), ctx.envdef, timeout=ctx.wait_timeout, diagnose=diagnose, must_be_healthy=own)
    ctx.served, ctx.excluded = dict(result.served), list(result.excluded)


def install_crds_step() -> Step:
    return Step("install AGN CRDs and the env's namespace", _install_crds)


def apply_objects_step() -> Step:
    return Step("apply the environment's networks, consumers and providers", _apply_objects)


def readiness_step(diagnose: Callable[[], list[str]]) -> Step:
    """Every provider probed, every overlay current, every gateway serving its overlay's revision."""
    return Step(
        "wait until every consumer's gateway serves its current overlay", lambda ctx: _wait_ready(ctx, diagnose)
    )
