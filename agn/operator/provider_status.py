"""Provider status from probe outcomes: the status document, its conditions, and when to write it.

Pure: no I/O, no clock (callers pass times). The prober owns the writes; this module only
says what the status should be and whether writing it is worth an API call, and holds what
the prober remembers of one provider between probes (:class:`ProviderMemory`). The overlay
model reads ``probe.healthy`` and ``probe.metricsObservedAt``; the conditions are for humans
and tools (``kubectl get`` shows ``Available``).
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from agn.engines import AGN_HEALTH_PATH
from agn.model import (
    DEFAULT_METRICS_MAX_AGE_SECONDS,
    NetworkView,
    candidate_id,
    endpoint_trusted,
    endpoint_valid,
    selects,
)
from agn.objects import Obj, parse_time, rfc3339
from agn.operator.prometheus import LoadReading

VALID = "Valid"
AVAILABLE = "Available"
METRICS_FRESH = "MetricsFresh"
TRUSTED = "Trusted"
REFRESH_CAP_SECONDS = 10.0
# A KV-cache usage is published to this many decimals (tenths: 0.0 .. 1.0), and only a change at
# that grain is a new meaning: a long request fills its cache a little on every probe, and a
# drained provider's status must not be rewritten for each step (docs/engines.md).
KV_CACHE_DECIMALS = 1


@dataclasses.dataclass(frozen=True)
class ProbeOutcome:
    """What one probe round saw. ``probed`` is False when the endpoint is invalid (nothing was dialled)."""

    observed_at: float
    probed: bool
    healthy: bool | None = None
    health_error: str | None = None
    metrics_ok: bool = False
    metrics_error: str | None = None
    load: LoadReading | None = None
    health_path: str = AGN_HEALTH_PATH  # where the health answer came from (/healthz, /health, ...)
    health_note: str | None = None  # a healthy answer that was not a 2xx: why it counts (SGLang's 401)
    # A named cause of a failed health probe or scrape, the condition's reason instead of the
    # generic one: the provider's credentials (agn.credentials: Unauthorized, SecretNotFound, ...).
    health_reason: str | None = None
    metrics_reason: str | None = None


def tolerated(outcome: ProbeOutcome, *, failures: int, previously_healthy: bool, threshold: int) -> ProbeOutcome:
    """A failed health probe of a provider that was healthy counts only once ``threshold``
    consecutive ones have failed (kubelet's ``failureThreshold``): one slow answer on a busy
    machine must not pull a provider out of every overlay and back in a second later.
    ``failures`` includes this outcome. A success always counts at once."""
    if outcome.healthy is False and previously_healthy and failures < threshold:
        return dataclasses.replace(outcome, healthy=True, health_error=None)
    return outcome


@dataclasses.dataclass(frozen=True)
class Condition:
    type: str
    status: str  # "True", "False", "Unknown"
    reason: str
    message: str


def selecting_networks(labels: Mapping[str, str], networks: Sequence[NetworkView]) -> list[NetworkView]:
    return [n for n in networks if selects(n, labels)]


def metrics_max_age(networks: Sequence[NetworkView]) -> int:
    """The strictest staleness bound among the networks that select a provider."""
    return min((n.metrics_max_age_seconds for n in networks), default=DEFAULT_METRICS_MAX_AGE_SECONDS)


def refresh_seconds(max_age: float) -> float:
    """How old the last status write may get before it is refreshed even without a semantic change.

    A third of the staleness bound, so a healthy provider's ``metricsObservedAt`` never ages
    past the bound between two writes, and at most :data:`REFRESH_CAP_SECONDS`.
    """
    return min(REFRESH_CAP_SECONDS, max_age / 3.0)


def desired_conditions(
    *, endpoint: str, outcome: ProbeOutcome, metrics_observed_at: float | None, networks: Sequence[NetworkView]
) -> list[Condition]:
    """The four conditions, given the networks that select the provider."""
    valid = endpoint_valid(endpoint)
    out = [
        Condition(VALID, "True", "EndpointValid", "endpoint is an http(s) URL with a host")
        if valid
        else Condition(VALID, "False", "InvalidEndpoint", f"endpoint {endpoint!r} is not an http(s) URL with a host")
    ]
    if not outcome.probed:
        out.append(Condition(AVAILABLE, "Unknown", "NotProbed", "the endpoint is invalid, so it is not probed"))
    elif outcome.healthy:
        passed = f"GET {outcome.health_path}: {outcome.health_note}" if outcome.health_note else None
        passed = passed or f"GET {outcome.health_path} succeeded"
        out.append(Condition(AVAILABLE, "True", "HealthCheckPassed", passed))
    else:
        failed = outcome.health_error or f"GET {outcome.health_path} failed"
        out.append(Condition(AVAILABLE, "False", outcome.health_reason or "HealthCheckFailed", failed))

    max_age = metrics_max_age(networks)
    error = f": {outcome.metrics_error}" if outcome.metrics_error else ""
    # A scrape that succeeded without the engine's metrics says why (vLLM --disable-log-stats).
    note = f"; {outcome.load.note}" if outcome.metrics_ok and outcome.load and outcome.load.note else ""
    if metrics_observed_at is None:
        reason = outcome.metrics_reason or "NoMetrics"
        out.append(Condition(METRICS_FRESH, "False", reason, f"no successful metrics scrape yet{error}"))
    elif outcome.observed_at - metrics_observed_at <= max_age:
        fresh = f"last successful scrape within {max_age}s{note}"
        out.append(Condition(METRICS_FRESH, "True", "MetricsFresh", fresh))
    else:
        reason = outcome.metrics_reason or "MetricsStale"
        out.append(Condition(METRICS_FRESH, "False", reason, f"no successful scrape within {max_age}s{error}"))

    if not valid:
        out.append(Condition(TRUSTED, "Unknown", "InvalidEndpoint", "trust is not evaluated for an invalid endpoint"))
    elif not networks:
        out.append(Condition(TRUSTED, "True", "NoNetwork", "no network selects this provider"))
    else:
        untrusted = sorted(n.name for n in networks if not endpoint_trusted(n, endpoint))
        if untrusted:
            out.append(
                Condition(TRUSTED, "False", "Untrusted", f"endpoint not allowed by network(s) {', '.join(untrusted)}")
            )
        else:
            out.append(Condition(TRUSTED, "True", "Trusted", "endpoint allowed by every network that selects it"))
    return out


def merge_conditions(previous: Sequence[Mapping[str, Any]], desired: Sequence[Condition], *, now: float) -> list[dict]:
    """Desired conditions as API dicts; ``lastTransitionTime`` moves only when a status flips."""
    before = {c.get("type"): c for c in previous or ()}
    out = []
    for cond in desired:
        old = before.get(cond.type)
        since = old.get("lastTransitionTime") if old and old.get("status") == cond.status else None
        out.append(
            {
                "type": cond.type,
                "status": cond.status,
                "reason": cond.reason,
                "message": cond.message,
                "lastTransitionTime": since or rfc3339(now),
            }
        )
    return out


def load_status(reading: LoadReading | None, *, observed_at: float) -> dict[str, Any]:
    """``status.load`` for one successful scrape: the numbers the provider exports, no others."""
    load: dict[str, Any] = {"observedAt": rfc3339(observed_at)}
    if reading is not None and reading.running is not None:
        load["running"] = reading.running
    if reading is not None and reading.waiting is not None:
        load["waiting"] = reading.waiting
    if reading is not None and reading.kv_cache_usage is not None:
        load["kvCacheUsage"] = round(reading.kv_cache_usage, KV_CACHE_DECIMALS)
    return load


def next_status(
    previous: Mapping[str, Any],
    outcome: ProbeOutcome,
    *,
    uid: str,
    generation: int | None,
    endpoint: str,
    networks: Sequence[NetworkView],
) -> dict[str, Any]:
    """The complete status after ``outcome``, carrying over what a failed scrape cannot tell.

    ``metricsObservedAt`` is the time of the last *successful* scrape and the load is the last
    reading, so both survive a failed scrape (and so does ``metricsFormat``, the format that
    reading was read as). Metrics a provider does not export are absent.
    """
    prev_probe = previous.get("probe") or {}
    probe: dict[str, Any] = {"healthObservedAt": rfc3339(outcome.observed_at)}
    if outcome.healthy is not None:
        probe["healthy"] = outcome.healthy
    if outcome.health_error:
        probe["healthError"] = outcome.health_error
    if outcome.metrics_ok:
        metrics_at: float | None = outcome.observed_at
        probe["metricsObservedAt"] = rfc3339(outcome.observed_at)
        load = load_status(outcome.load, observed_at=outcome.observed_at)
        if outcome.load is not None and outcome.load.format is not None:
            probe["metricsFormat"] = outcome.load.format
    else:
        metrics_at = parse_time(prev_probe.get("metricsObservedAt"))
        if metrics_at is not None:
            probe["metricsObservedAt"] = prev_probe["metricsObservedAt"]
        load = dict(previous.get("load") or {})
        if "metricsFormat" in prev_probe:
            probe["metricsFormat"] = prev_probe["metricsFormat"]
    if outcome.metrics_error:
        probe["metricsError"] = outcome.metrics_error

    conditions = desired_conditions(
        endpoint=endpoint, outcome=outcome, metrics_observed_at=metrics_at, networks=networks
    )
    status: dict[str, Any] = {
        "candidateId": candidate_id(uid),
        "probe": probe,
        "conditions": merge_conditions(previous.get("conditions") or (), conditions, now=outcome.observed_at),
    }
    if generation is not None:
        status["observedGeneration"] = generation
    if load:
        status["load"] = load
    return status


def published(status: Mapping[str, Any], *, load: bool) -> dict[str, Any]:
    """The status as written to the API: without ``load`` unless ``load`` (a drained provider,
    the only kind a ``--wait-idle`` waits on, or one that declares ``spec.capacity``, whose load
    the drain's capacity guard weighs). The operator keeps the reading either way, so a
    provider drained later publishes its last reading at once, with its own ``observedAt``."""
    out = dict(status)
    if not load:
        out.pop("load", None)
    return out


def semantic_key(status: Mapping[str, Any]) -> tuple:
    """What a status means, without the timestamps that change on every probe."""
    probe = status.get("probe") or {}
    load = status.get("load") or {}
    conditions = tuple(
        (c.get("type"), c.get("status"), c.get("reason"), c.get("message")) for c in status.get("conditions") or ()
    )
    return (
        status.get("candidateId"),
        status.get("observedGeneration"),
        probe.get("healthy"),
        probe.get("healthError"),
        probe.get("metricsError"),
        probe.get("metricsFormat"),
        "metricsObservedAt" in probe,
        load.get("running"),
        load.get("waiting"),
        load.get("kvCacheUsage"),
        conditions,
    )


def should_write(
    previous: Mapping[str, Any],
    desired: Mapping[str, Any],
    *,
    last_write_at: float | None,
    now: float,
    refresh: float | None,
) -> bool:
    """Write when the meaning changed, and, only with a ``refresh`` (the old write-every-probe
    behaviour, kept for comparison), when the last write is that old.

    With ``refresh=None`` an unchanged status is never rewritten, a drained provider's included:
    a new load reading that says the same (busy with the same counts, or idle again) is no news.
    Its freshness is vouched for by the probes heartbeat (:mod:`agn.operator.heartbeat`), not by
    rewriting it; ``provider-drain --wait-idle`` reads it from there (:mod:`xtask.drain.core.idle`)."""
    if semantic_key(previous) != semantic_key(desired):
        return True
    if last_write_at is None:
        return True
    if refresh is not None:
        return now - last_write_at >= refresh
    return False


def merge_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch (RFC 7386) that turns ``old`` into ``new``.

    Keys that disappeared are explicitly nulled — a merge patch otherwise leaves them in place.
    Lists are replaced whole, as merge patch does.
    """
    patch: dict[str, Any] = {}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            sub = merge_patch(before, value)
            if sub:
                patch[key] = sub
        elif key not in old or before != value:
            patch[key] = value
    for key in old:
        if key not in new:
            patch[key] = None
    return patch


@dataclasses.dataclass
class ProviderMemory:
    """What the prober knows about one provider between probes: its last written status, and
    the status after its last probe (``current``: kept here, written only when its meaning
    changed)."""

    uid: str
    status: Obj
    written_at: float | None  # unix seconds of the last write (or its best guess after a restart)
    failures: int = 0  # consecutive failed health probes
    current: Obj | None = None  # None: not probed in this term yet (``status`` is the truth then)
    probed_at: float | None = None  # unix seconds the last probe of this term started
    recheck_in: float | None = None  # seconds: its last probe failed, but not yet enough to exclude it

    @classmethod
    def of(cls, obj: Obj) -> ProviderMemory:
        """The memory of a provider not probed yet (in this term): after a restart its cached
        status is our predecessor's last write, and that status's probe time is the best guess
        of when it was written."""
        status = copy.deepcopy(obj.get("status") or {})  # ``obj`` is a store's own
        written = parse_time((status.get("probe") or {}).get("healthObservedAt"))
        return cls(uid=obj["metadata"].get("uid", ""), status=status, written_at=written)
