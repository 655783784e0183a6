"""Reading an environment's AGN objects for ``env status`` (runtime-independent).

Returns plain dicts ready for JSON; the CLI renders them as tables. Overlays are read whole
(index plus shards, :func:`agn.overlays.list_overlays`); one whose shards still do not match
its index is shown as being assembled — its index's revision and ``overlayPending`` saying
which shards — rather than with candidates of two revisions.
"""

from __future__ import annotations

import time

from agn.kube import CONSUMERS, NETWORKS, PROVIDERS, Kube
from agn.model import SlowStart
from agn.objects import condition, drain_of, name_of, rfc3339
from agn.operator.heartbeat import read_heartbeat
from agn.overlays import list_overlays
from agn.shards import Incomplete
from xtask.drain.core.converge import incomplete_reason


def slow_start_status(provider: dict, *, now: float) -> dict | None:
    """A provider in a slow-start window (``--undrain --slow-start``): the window and the seconds
    left of it at ``now`` (this host's clock); None when it has none, is drained or it has ended."""
    raw = ((provider.get("spec") or {}).get("trafficPolicy") or {}).get("slowStart")
    window = SlowStart.from_dict(raw)
    if window is None or drain_of(provider) or now >= window.end:
        return None
    return {**window.to_dict(), "remainingSeconds": round(window.end - max(now, window.start), 1)}


def agn_objects(kube: Kube, namespace: str) -> dict:
    providers, _ = kube.list(PROVIDERS, namespace)
    consumers, _ = kube.list(CONSUMERS, namespace)
    by_overlay = list_overlays(kube, namespace)
    networks, _ = kube.list(NETWORKS, namespace)
    heartbeat = read_heartbeat(kube, namespace)
    out_providers = []
    for p in sorted(providers, key=name_of):
        spec = p.get("spec") or {}
        avail = condition(p, "Available")
        out_providers.append(
            {
                "name": name_of(p),
                "providerGateway": spec.get("providerGateway"),
                "drain": drain_of(p),
                "drainReason": (p.get("metadata", {}).get("annotations") or {}).get("agn.dev/drain-reason"),
                "available": (avail or {}).get("status", "Unknown"),
                "availableReason": (avail or {}).get("reason"),
                "endpoint": spec.get("endpoint"),
                "selectionGroup": spec.get("selectionGroup"),
                "rank": spec.get("rank"),
                "candidateId": (p.get("status") or {}).get("candidateId"),
                "load": (p.get("status") or {}).get("load"),
                "slowStart": slow_start_status(p, now=time.time()),
            }
        )
    out_consumers = []
    for c in sorted(consumers, key=name_of):
        status = c.get("status") or {}
        found = by_overlay.get(name_of(c))
        pending = found if isinstance(found, Incomplete) else None
        overlay = None if isinstance(found, Incomplete) else found
        out_consumers.append(
            {
                "name": name_of(c),
                "network": (c.get("spec") or {}).get("network"),
                "overlayRevision": pending.revision if pending else overlay.get("revision") if overlay else None,
                "overlayPending": incomplete_reason(pending) if pending else None,
                "acceptedRevision": status.get("acceptedRevision"),
                "servingRevision": status.get("servingRevision"),
                "address": status.get("address"),
                "sessions": status.get("sessions"),  # the gateway's sticky sessions per drained provider
                "candidates": {x["provider"]: x["admission_state"] for x in (overlay or {}).get("candidates", [])},
            }
        )
    return {
        "networks": sorted(name_of(n) for n in networks),
        # Unchanged statuses are not rewritten; this says when the operator last vouched for them.
        "probesHeartbeat": None
        if heartbeat is None
        else {"renewedAt": rfc3339(heartbeat), "ageSeconds": round(max(0.0, time.time() - heartbeat), 3)},
        "providers": out_providers,
        "consumers": out_consumers,
    }
