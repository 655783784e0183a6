"""The providers a drain's guards weigh, read without the whole fleet where it can.

The budget, the load-aware capacity guard and the last-provider guard each look only at the
selection groups of the providers a run changes (:mod:`xtask.drain.core.budget`,
:mod:`xtask.drain.core.capacity`, :mod:`xtask.drain.core.guard`). A drain of one provider among
thousands therefore reads that provider's group, not the fleet: the InferenceProvider CRD
declares ``spec.selectionGroup`` a selectable field, so one LIST with
``fieldSelector=spec.selectionGroup=G`` per group returns exactly its members (a provider
without the field is in group ``""``, which the empty value selects, as the guards count it).

What is read is checked, never trusted: the items are filtered by group here too (a server
that ignored the selector gives a superset); a read that lacks a selected provider in its group
(it moved meanwhile, or the API server still serves the CRD as it was before the field was
declared) and a server that does not know the field (a cluster before Kubernetes 1.31: 400) get
the one LIST of every provider a run made before. Reads only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agn.kube import PROVIDERS, Kube, KubeError
from agn.objects import Obj
from xtask.drain.core.guard import group_of

# More groups than this are read with one LIST of every provider: a whole gateway's drain
# usually touches most groups, and one LIST is then fewer requests for the same bytes.
MAX_GROUP_READS = 4


def field_value(text: str) -> str:
    """``text`` as a field selector's value (Kubernetes' ``fields.EscapeValue``)."""
    return text.replace("\\", "\\\\").replace(",", "\\,").replace("=", "\\=")


def group_selector(group: str) -> str:
    return "spec.selectionGroup=" + field_value(group)


def read_members(kube: Kube, namespace: str, scope: Mapping[str, str]) -> list[Obj]:
    """Every provider of ``namespace`` in the groups of ``scope``: :func:`read_members_listed`'s items."""
    return read_members_listed(kube, namespace, scope)[0]


def read_members_listed(kube: Kube, namespace: str, scope: Mapping[str, str]) -> tuple[list[Obj], str]:
    """Every provider of ``namespace`` in the groups of ``scope`` (the selected providers' names ->
    the group each was read in), sorted by name as a LIST returns them: one LIST per group; or
    every provider (one LIST; the guards look only at the groups of what a run changes) past
    :data:`MAX_GROUP_READS` groups, on a server that cannot select by the field, or when a
    selected provider is not in its group (it moved meanwhile, or the server's selector lags a
    CRD update). With the items, the resourceVersion of the one LIST they come from (a watch of
    the selected providers may start there), or "" when they come from several."""
    wanted = set(scope.values())
    items: list[Obj] | None = None
    version = ""
    if len(wanted) <= MAX_GROUP_READS:
        try:
            items = []
            for g in sorted(wanted):
                got, version = kube.list(PROVIDERS, namespace, field_selector=group_selector(g))
                items += got
        except KubeError as exc:
            if exc.status != 400:  # 400: "field label not supported" (the field is not selectable there)
                raise
            items = None
    if items is None or not _holds(items, scope):
        return kube.list(PROVIDERS, namespace)  # every provider: the guards pick the groups themselves
    kept = {p["metadata"]["name"]: p for p in items if group_of(p) in wanted}
    return [kept[name] for name in sorted(kept)], version if len(wanted) == 1 else ""


def _holds(members: Iterable[Mapping[str, Any]], scope: Mapping[str, str]) -> bool:
    found = {p["metadata"]["name"]: group_of(p) for p in members}
    return all(found.get(name) == group for name, group in scope.items())
