"""Conversions between API objects (plain dicts) and the pure model's views. No I/O.

Also the small shared vocabulary of status fields and timestamps, so the operator, the
gateway and the xtask read and write them the same way.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping
from typing import Any

from agn.credentials import authorization_of
from agn.engines import AUTO
from agn.model import (
    DEFAULT_METRICS_MAX_AGE_SECONDS,
    ConsumerView,
    LabelRequirement,
    NetworkView,
    ProviderView,
    SlowStart,
    candidate_id,
    parse_deadline,
)
from agn.resources import qualified_name

Obj = dict[str, Any]  # an API object as a plain dict; the one definition, imported everywhere


def rfc3339(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def name_of(obj: Mapping[str, Any]) -> str:
    return obj.get("metadata", {}).get("name", "")


def version_of(obj: Mapping[str, Any] | None) -> int | None:
    """An object's resourceVersion as a number (the API server's etcd revision, ordered), or
    None when it is not one: a reader that compares versions then assumes nothing of it."""
    raw = str(((obj or {}).get("metadata") or {}).get("resourceVersion") or "")
    return int(raw) if raw.isascii() and raw.isdigit() else None


def kubectl_name(obj: Mapping[str, Any]) -> str:
    """:func:`qualified_name` of a whole object."""
    return qualified_name(obj["kind"], obj["apiVersion"], name_of(obj))


def list_of(items: list[Any]) -> Obj:
    """``items`` as one ``v1`` ``List``, as ``kubectl get -o json`` prints several objects."""
    return {"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items}


def drain_of(provider: Mapping[str, Any]) -> bool:
    """``spec.trafficPolicy.drain``; omitted means false (today's behaviour)."""
    return bool(((provider.get("spec") or {}).get("trafficPolicy") or {}).get("drain", False))


def metrics_format_of(spec: Mapping[str, Any]) -> str:
    """A provider spec's ``metrics.format``; omitted means ``auto`` (detected from its metrics)."""
    return str((spec.get("metrics") or {}).get("format") or AUTO)


def condition(obj: Obj, type_: str) -> Mapping[str, Any] | None:
    for c in (obj.get("status") or {}).get("conditions") or ():
        if c.get("type") == type_:
            return c
    return None


def provider_view(obj: Mapping[str, Any], heartbeat: float | None = None) -> ProviderView:
    """The model's view of a provider. ``heartbeat``: the namespace's probes heartbeat (unix
    seconds, :mod:`agn.operator.heartbeat`); see :func:`with_heartbeat`."""
    view = _provider_view(obj)
    return with_heartbeat(view, heartbeat) if heartbeat is not None else view


def with_heartbeat(view: ProviderView, heartbeat: float | None) -> ProviderView:
    """``view`` as of the probes heartbeat: a reading its status still calls fresh
    (MetricsFresh True) was fresh at the heartbeat, so it counts as observed then. Anything
    else is left as written: no heartbeat vouches for a reading the status says is stale or
    missing, and a reading is never made newer than the last heartbeat."""
    seen = view.metrics_observed_at
    if heartbeat is None or not view.metrics_fresh_claimed or seen is None or heartbeat <= seen:
        return view
    return dataclasses.replace(view, metrics_observed_at=heartbeat)


def _provider_view(obj: Mapping[str, Any]) -> ProviderView:
    meta = obj.get("metadata", {})
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    probe = status.get("probe") or {}
    return ProviderView(
        name=meta.get("name", ""),
        endpoint=str(spec.get("endpoint", "")),
        candidate_id=status.get("candidateId") or candidate_id(meta.get("uid") or meta.get("name", "")),
        selection_group=str(spec.get("selectionGroup", "")),
        rank=int(spec.get("rank", 0) or 0),
        drain=drain_of(obj),
        slow_start=SlowStart.from_dict((spec.get("trafficPolicy") or {}).get("slowStart")),
        session_deadline=parse_deadline((spec.get("trafficPolicy") or {}).get("sessionDeadline")),
        labels=dict(meta.get("labels") or {}),
        healthy=probe.get("healthy"),
        metrics_observed_at=parse_time(probe.get("metricsObservedAt")),
        metrics_fresh_claimed=any(
            c.get("type") == "MetricsFresh" and c.get("status") == "True" for c in status.get("conditions") or ()
        ),
        max_concurrent=max_concurrent_of(spec),
        authorization=authorization_of(spec),
    )


def max_concurrent_of(spec: Mapping[str, Any]) -> int | None:
    """``spec.capacity.maxConcurrent`` when it is a whole number of at least 1, else None (the
    CRD refuses anything else; an object stored before it counts as declaring nothing)."""
    value = (spec.get("capacity") or {}).get("maxConcurrent")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return None
    return value


def network_view(obj: Mapping[str, Any]) -> NetworkView:
    spec = obj.get("spec") or {}
    selector = spec.get("providerSelector") or {}
    trust = spec.get("trust") or {}
    return NetworkView(
        name=name_of(obj),
        match_labels=dict(selector.get("matchLabels") or {}),
        match_expressions=tuple(
            LabelRequirement(e["key"], e["operator"], tuple(e.get("values") or ()))
            for e in selector.get("matchExpressions") or ()
        ),
        allowed_schemes=tuple(trust.get("allowedSchemes") or ()),
        allowed_hosts=tuple(trust.get("allowedHosts") or ()),
        metrics_max_age_seconds=int(spec.get("metricsMaxAgeSeconds") or DEFAULT_METRICS_MAX_AGE_SECONDS),
        probe_interval_seconds=(
            float(spec["probeIntervalSeconds"]) if spec.get("probeIntervalSeconds") is not None else None
        ),
        max_unavailable=_int_or_string((spec.get("disruptionBudget") or {}).get("maxUnavailable")),
    )


def _int_or_string(value: Any) -> int | str | None:
    """An int-or-string field as stored (a bool is neither; anything else is kept as its text)."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return str(value)


def consumer_view(obj: Mapping[str, Any]) -> ConsumerView:
    spec = obj.get("spec") or {}
    return ConsumerView(
        name=name_of(obj),
        network=str(spec.get("network", "")),
        excluded_providers=frozenset(spec.get("excludedProviders") or ()),
    )


def consumer_revisions(obj: Obj) -> tuple[int | None, int | None]:
    """(acceptedRevision, servingRevision) as the consumer reported them."""
    status = obj.get("status") or {}
    return status.get("acceptedRevision"), status.get("servingRevision")
