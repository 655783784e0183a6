"""The env's Deployments on a cluster (kind or an existing one): their readiness as ``env status``
shows it, and the rollout wait of ``env up``.

:func:`component` and :func:`rollout_problem` are pure (a Deployment as the API returns it);
:func:`wait_rolled_out` reads through :class:`agn.kube.Kube` — a list, then a watch from its
resourceVersion — until every named Deployment has rolled out, one fails for good, or the
deadline passes, and then names each one still lagging with what it last showed.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from agn.kube import Gone, Resource
from agn.objects import Obj, name_of
from xtask.errors import XtaskError
from xtask.manifests import IMAGE, OPERATOR, metrics_url
from xtask.runtime.base import Flag

if TYPE_CHECKING:
    from agn.kube import Kube

# The flag of every runtime that runs the env's components as Deployments of an image.
IMAGE_FLAG = Flag("--image", metavar="IMAGE", help=f"The image the Deployments run (default: {IMAGE}).")

# Read through the same generic path as the AGN objects (/apis/apps/v1/...).
DEPLOYMENTS = Resource("Deployment", "deployments", group="apps", version="v1")


def _scraped(deployment: str) -> bool:
    """The operator and the gateways serve /metrics (the fake providers' metrics are their load)."""
    return deployment == OPERATOR or deployment.startswith("agn-gateway-")


def component(deployment: Obj, namespace: str) -> dict:
    """One ``env status`` entry: running = a replica is ready, healthy = all are ready and updated."""
    name = name_of(deployment)
    want = (deployment.get("spec") or {}).get("replicas", 1)
    status = deployment.get("status") or {}
    ready = status.get("readyReplicas", 0)
    return {
        "name": name,
        "pid": None,
        "running": ready > 0,
        "healthy": ready >= want and status.get("updatedReplicas", 0) >= want,
        "replicas": f"{ready}/{want}",
        **({"metricsUrl": metrics_url(name, namespace)} if _scraped(name) else {}),
    }


def rollout_problem(deployment: Obj) -> str | None:
    """Why a Deployment has not rolled out (as ``kubectl rollout status`` judges it), or None."""
    meta, spec, status = deployment.get("metadata") or {}, deployment.get("spec") or {}, deployment.get("status") or {}
    want = spec.get("replicas", 1)
    if status.get("observedGeneration", 0) < meta.get("generation", 1):
        return "its controller has not seen the new spec yet"
    updated, available = status.get("updatedReplicas", 0), status.get("availableReplicas", 0)
    if updated < want:
        return f"{updated}/{want} replicas updated"
    if available < want:
        return f"{available}/{want} replicas available"
    return None


def rollout_failed(deployment: Obj) -> str | None:
    """A terminal failure (the progress deadline passed): waiting longer will not help."""
    for cond in (deployment.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Progressing" and cond.get("reason") == "ProgressDeadlineExceeded":
            return cond.get("message") or "progress deadline exceeded"
    return None


def wait_rolled_out(kube: Kube, namespace: str, names: Iterable[str], *, timeout: float) -> None:
    """Return once every Deployment of ``names`` has rolled out; raise naming the laggards otherwise."""
    waiting = set(names)
    last: dict[str, str] = {name: "not read yet" for name in waiting}
    deadline = time.monotonic() + timeout

    def see(obj: Obj) -> None:
        name = name_of(obj)
        if name not in waiting:
            return
        failed = rollout_failed(obj)
        if failed:
            raise XtaskError(f"deployment {name} in {namespace} failed to roll out: {failed}")
        problem = rollout_problem(obj)
        if problem is None:
            waiting.discard(name)
            last.pop(name, None)
        else:
            last[name] = problem

    while waiting:
        items, version = kube.list(DEPLOYMENTS, namespace)
        for obj in items:
            see(obj)
        for name in waiting - {name_of(o) for o in items}:
            last[name] = "does not exist"
        remaining = deadline - time.monotonic()
        if not waiting:
            return
        if remaining <= 0:
            raise XtaskError(
                f"deployments not rolled out within {timeout:.0f}s: "
                + "; ".join(f"{name}: {last[name]}" for name in sorted(waiting)),
                hint=f"kubectl --namespace {namespace} describe deployments",
            )
        try:
            for _kind, obj in kube.watch(
                DEPLOYMENTS, namespace, resource_version=version, timeout_seconds=max(1, min(int(remaining), 30))
            ):
                see(obj)
                if not waiting or time.monotonic() > deadline:
                    break
        except Gone:
            continue  # listed again from a fresh version
