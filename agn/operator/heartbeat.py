"""The probes heartbeat: one small Lease per namespace that vouches for every provider status.

Provider status is written only when its meaning changes (:mod:`.provider_status`): an
availability or hard-failure transition, a drained provider's changed load counts. A status that
does not change is not rewritten, so its ``probe.metricsObservedAt`` is the time of the probe
that last *changed* it, not of the last probe. What tells a reader the status is still current
is this heartbeat (as a kubelet's Lease does for its unchanged NodeStatus, KEP-589): the
Lease ``agn-probes``, which the leading operator renews every :data:`HEARTBEAT_SECONDS` once
every provider known at the start of its leadership term has been probed in that term, and
while no status write has failed.

Its ``spec.renewTime`` is not the clock but the prober's *watermark* T: the start of the least
recent last probe of any provider whose status write, if it called for one, is done
(:meth:`agn.operator.probe_recorder.ProbeRecorder.watermark`: a probe counts only once written). It says:
every provider has been probed since T, and every change of meaning those probes saw is
written. So a status whose ``MetricsFresh`` condition is True had a fresh reading at T: its
metrics count as observed at T (:func:`agn.objects.provider_view` with ``heartbeat``). A
prober that falls behind moves T less, so readings age exactly as its probes do; when the
operator stops or loses the API, T stops and every reading expires ``metricsMaxAgeSeconds``
after it, as before: nothing is vouched for that was not probed.

The cost is one write per :data:`HEARTBEAT_SECONDS` per namespace, whatever the fleet size.

Pure apart from :func:`read_heartbeat` (one GET).
"""

from __future__ import annotations

from typing import Any

from agn.kube import LEASES, Kube, NotFound
from agn.objects import Obj, parse_time, rfc3339

HEARTBEAT_LEASE = "agn-probes"
HEARTBEAT_SECONDS = 2.0
# What the Lease says its record is good for: a reader that sees an older renewal knows the
# operator stopped vouching (readings then age from the renewal, as the model does anyway).
HEARTBEAT_DURATION_SECONDS = 10


def heartbeat_body(identity: str, now: float, *, current: Obj | None = None) -> dict[str, Any]:
    """The Lease as the operator writes it at ``now`` (an update when ``current`` is given)."""
    metadata: dict[str, Any] = {"name": HEARTBEAT_LEASE}
    if current is not None:
        metadata["resourceVersion"] = current["metadata"]["resourceVersion"]
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": {
            "holderIdentity": identity,
            "leaseDurationSeconds": HEARTBEAT_DURATION_SECONDS,
            "renewTime": rfc3339(now),
        },
    }


def heartbeat_time(lease: Obj | None) -> float | None:
    """Unix seconds of the Lease's last renewal; None without a Lease or a renewal."""
    if lease is None:
        return None
    value = (lease.get("spec") or {}).get("renewTime")
    return parse_time(value) if isinstance(value, str) else None


def read_heartbeat(kube: Kube, namespace: str) -> float | None:
    """The namespace's last probes heartbeat (unix seconds), or None when there is none."""
    try:
        return heartbeat_time(kube.get(LEASES, namespace, HEARTBEAT_LEASE))
    except NotFound:
        return None
