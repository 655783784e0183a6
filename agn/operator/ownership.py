"""Who owns an overlay: the consumer → overlay ownerReference and what to do with an overlay.

Pure: API objects (dicts) in, verdicts and metadata out. Every overlay is controlled by the
InferenceConsumer of the same name (``controller: true``), so a real cluster's garbage
collector removes it with its consumer. ``blockOwnerDeletion`` is omitted: setting it needs
``update`` on ``inferenceconsumers/finalizers`` (OwnerReferencesPermissionEnforcement), which
the operator does not have, and nothing has to wait for an overlay to go. Where no garbage
collector runs (the local runtime has no kube-controller-manager) the controller deletes
orphans itself, by the same rules as :func:`verdict`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

from agn import GROUP, VERSION
from agn.objects import Obj

CONSUMER_API_VERSION = f"{GROUP}/{VERSION}"
CONSUMER_KIND = "InferenceConsumer"


class Verdict(enum.Enum):
    OWNED = "owned"  # controlled by this consumer: keep
    ADOPT = "adopt"  # the consumer exists, the overlay lacks its controller reference: add it
    ORPHAN = "orphan"  # no consumer of that name: delete
    STALE = "stale"  # controlled by an earlier consumer of the same name (another uid): delete


def owner_reference(consumer: Obj) -> dict[str, Any]:
    """The ownerReference an overlay carries to its consumer."""
    meta = consumer["metadata"]
    return {
        "apiVersion": CONSUMER_API_VERSION,
        "kind": CONSUMER_KIND,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
    }


def _is_consumer_ref(ref: Mapping[str, Any]) -> bool:
    return ref.get("kind") == CONSUMER_KIND and str(ref.get("apiVersion", "")).split("/")[0] == GROUP


def controller_ref(obj: Obj) -> Mapping[str, Any] | None:
    """The ownerReference with ``controller: true``, if any (the API allows at most one)."""
    return next((r for r in (obj.get("metadata") or {}).get("ownerReferences") or () if r.get("controller")), None)


def verdict(overlay: Obj, consumer: Obj | None) -> Verdict:
    """What an overlay is, given the consumer of its name as the cache (or the API) has it."""
    if consumer is None:
        return Verdict.ORPHAN
    ref = controller_ref(overlay)
    if ref is not None and _is_consumer_ref(ref) and ref.get("name") == consumer["metadata"]["name"]:
        return Verdict.OWNED if ref.get("uid") == consumer["metadata"].get("uid") else Verdict.STALE
    return Verdict.ADOPT


def desired_owner_references(overlay: Obj | None, consumer: Obj) -> list[dict[str, Any]]:
    """The overlay's ownerReferences with this consumer as its only controller.

    Other owners are kept, but not as controllers (one controller at most), and references
    to a consumer of this name with another uid are dropped.
    """
    ours = owner_reference(consumer)
    out: list[dict[str, Any]] = []
    for ref in ((overlay or {}).get("metadata") or {}).get("ownerReferences") or ():
        if _is_consumer_ref(ref) and ref.get("name") == ours["name"]:
            continue
        ref = dict(ref)
        ref.pop("controller", None)
        out.append(ref)
    return [*out, ours]


def owner_references_current(overlay: Obj, consumer: Obj) -> bool:
    """True when the overlay's ownerReferences already are :func:`desired_owner_references`."""
    have = (overlay.get("metadata") or {}).get("ownerReferences") or []
    return [dict(r) for r in have] == desired_owner_references(overlay, consumer)
