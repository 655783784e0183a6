"""Reading whole overlays from the API: an index (``RoutingOverlay``) plus its shards.

For readers that look at overlays now and then (``env status``, readiness, the drain's
capacity guard, tests). Followers that keep caches (the gateway, the drain waiter) assemble
from their own caches with :func:`agn.shards.assemble` instead.

An index and its shards are separate objects, written shards first and index last, so a read
of both can fall between two of the operator's writes; the read is then repeated (a few
times, promptly). A reader that still cannot assemble gets :class:`agn.shards.Incomplete`.
"""

from __future__ import annotations

from typing import Any

from agn.kube import OVERLAYS, SHARDS, Kube, NotFound
from agn.shards import Incomplete, assemble, is_sharded

ATTEMPTS = 5

Spec = dict[str, Any]


def read_overlay(kube: Kube, namespace: str, consumer: str, *, attempts: int = ATTEMPTS) -> Spec | None:
    """The consumer's whole overlay spec (candidates included), or None when it has no overlay.

    Raises :class:`Incomplete` when its shards do not match its index after ``attempts`` reads."""
    failure: Incomplete | None = None
    for _ in range(attempts):
        try:
            index = kube.get(OVERLAYS, namespace, consumer).get("spec")
        except NotFound:
            return None
        if not index:
            return None
        if not is_sharded(index):
            return dict(index)
        shards: dict[str, Spec | None] = {}
        for entry in index.get("shards") or ():
            name = str(entry.get("name", ""))
            try:
                shards[name] = kube.get(SHARDS, namespace, name).get("spec")
            except NotFound:
                shards[name] = None
        try:
            return assemble(index, shards)
        except Incomplete as exc:
            failure = exc
    assert failure is not None
    raise failure


def list_overlays(kube: Kube, namespace: str, *, attempts: int = ATTEMPTS) -> dict[str, Spec | Incomplete]:
    """Every overlay in ``namespace`` by consumer name: its whole spec, or :class:`Incomplete`
    for one whose shards did not match its index in any of ``attempts`` reads (two LISTs each)."""
    out: dict[str, Spec | Incomplete] = {}
    for _ in range(attempts):
        indexes: dict[str, Spec] = {
            o["metadata"]["name"]: o["spec"] for o in kube.list(OVERLAYS, namespace)[0] if o.get("spec")
        }
        shards = {}
        if any(is_sharded(i) for i in indexes.values()):
            shards = {o["metadata"]["name"]: o.get("spec") for o in kube.list(SHARDS, namespace)[0]}
        out = {}
        for name, index in indexes.items():
            try:
                out[name] = assemble(index, shards)  # it looks up only the shards its index names
            except Incomplete as exc:
                out[name] = exc
        if not any(isinstance(v, Incomplete) for v in out.values()):
            break
    return out
