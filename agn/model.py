"""The pure overlay model (docs/overlays.md): providers + network + consumer -> overlay.

This module is the single statement of overlay semantics, shared by the operator (which
publishes overlays) and the xtask (capacity guard, convergence reasons). It does no I/O and
reads no clock: callers pass ``now``.

Rules, per consumer, per provider selected by the consumer's network:
1. invalid, unavailable, stale, untrusted or explicitly excluded -> not in the overlay
   (hard failures always win; drain never makes an unusable provider routable);
2. else drained -> ``existing_only``;
3. else -> ``admitted``; while the provider's slow-start window (``spec.trafficPolicy.slowStart``,
   :class:`SlowStart`) has not ended, the admitted candidate carries it, and gateways ramp its
   share of new sessions over the window (:func:`ramp`). The window is published once, with the
   undrain, and leaves the candidate when it ends: at most two revisions, never one per step.
   A drained provider's session deadline (``spec.trafficPolicy.sessionDeadline``, written by
   ``provider-drain --session-deadline``) is carried by its ``existing_only`` candidate: from it on
   (on the API server's clock) gateways move that provider's sticky sessions to an admitted
   candidate of the same selection group at their next turn. Written with the drain, it is in
   the drain's revision; an undrain clears it.
The digest covers semantic content only; the revision increases by one exactly when the
digest changes.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import functools
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from urllib.parse import urlsplit

from agn.credentials import SecretRef

ADMITTED = "admitted"
EXISTING_ONLY = "existing_only"
DEFAULT_METRICS_MAX_AGE_SECONDS = 45


class Exclusion(str, enum.Enum):
    """Why a selected provider is not in a consumer's overlay, in precedence order."""

    INVALID = "invalid"
    UNAVAILABLE = "unavailable"
    STALE = "stale"
    UNTRUSTED = "untrusted"
    EXCLUDED = "excluded"


# Slow start (``provider-drain --undrain --slow-start``): a returning provider's share of new
# sessions rises linearly from SLOW_START_FLOOR of its full share to all of it over the window.
SLOW_START_FLOOR = 0.05
MIN_SLOW_START_SECONDS = 1
MAX_SLOW_START_SECONDS = 3600


def rfc3339(at: float) -> str:
    """Unix seconds as RFC 3339 UTC text, whole seconds (as Kubernetes writes times)."""
    return dt.datetime.fromtimestamp(int(at), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclasses.dataclass(frozen=True, order=True)
class SlowStart:
    """A slow-start window: from ``start`` (unix seconds, whole, on the API server's clock) for
    ``seconds``. Written by the drain on the provider's ``spec.trafficPolicy.slowStart``
    (``{startTime, durationSeconds}``) and carried by its admitted candidate while it lasts."""

    start: int
    seconds: int

    @property
    def end(self) -> int:
        return self.start + self.seconds

    def to_dict(self) -> dict:
        return {"startTime": rfc3339(self.start), "durationSeconds": self.seconds}

    @classmethod
    def from_dict(cls, data: object) -> SlowStart | None:
        """The window in ``data`` (``{startTime, durationSeconds}``), or None when it is absent or
        not a window (a bad one is ignored: the provider then gets its full share at once)."""
        if not isinstance(data, Mapping):
            return None
        text, seconds = data.get("startTime"), data.get("durationSeconds")
        if not isinstance(text, str) or not isinstance(seconds, int) or isinstance(seconds, bool):
            return None
        if not MIN_SLOW_START_SECONDS <= seconds <= MAX_SLOW_START_SECONDS:
            return None
        try:
            at = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
        except ValueError:
            return None
        at = at if at.tzinfo else at.replace(tzinfo=dt.UTC)
        return cls(int(at.timestamp()), seconds)


def ramp(window: SlowStart | None, now: float, *, floor: float = SLOW_START_FLOOR) -> float:
    """The fraction of its full share of new sessions a candidate gets at ``now``: 1 without a
    window; inside it, linear from ``floor`` at its start to 1 at its end; ``floor`` before the
    start (a clock behind the server's); 1 from the end on."""
    if window is None:
        return 1.0
    elapsed = now - window.start
    if elapsed >= window.seconds:
        return 1.0
    if elapsed <= 0:
        return floor
    return floor + (1.0 - floor) * elapsed / window.seconds


# Session deadline (``provider-drain --session-deadline``): how far after the drain's write it may lie.
MIN_SESSION_DEADLINE_SECONDS = 1
MAX_SESSION_DEADLINE_SECONDS = 86_400


def parse_deadline(text: object) -> int | None:
    """An RFC 3339 time (a session deadline) as whole unix seconds; None when absent or not a time
    (a bad one is ignored: the provider's sessions then stay until they end)."""
    if not isinstance(text, str):
        return None
    try:
        at = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    at = at if at.tzinfo else at.replace(tzinfo=dt.UTC)
    return int(at.timestamp())


@dataclasses.dataclass(frozen=True)
class ProviderView:
    """What the model needs to know about one provider (spec plus the operator's probe results)."""

    name: str
    endpoint: str
    candidate_id: str
    selection_group: str = ""
    rank: int = 0
    drain: bool = False
    labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    healthy: bool | None = None  # None: never probed
    metrics_observed_at: float | None = None  # unix seconds of the last successful scrape
    # The status's MetricsFresh condition is True: a probes heartbeat (agn.operator.heartbeat)
    # renewed after metrics_observed_at vouches that the reading was still fresh then.
    metrics_fresh_claimed: bool = False
    slow_start: SlowStart | None = None  # spec.trafficPolicy.slowStart
    session_deadline: int | None = None  # spec.trafficPolicy.sessionDeadline (unix seconds, server clock)
    # spec.capacity.maxConcurrent: how many requests it serves at once (None: none declared).
    # Read by the drain's load-aware capacity guard (xtask.drain.core.capacity); the operator
    # publishes the load of a provider that declares it.
    max_concurrent: int | None = None
    # spec.authorization: the Secret key holding the engine's token (agn.credentials); its
    # candidates carry this reference, never the token, and gateways read the Secret themselves.
    authorization: SecretRef | None = None


@dataclasses.dataclass(frozen=True)
class LabelRequirement:
    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist
    values: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class NetworkView:
    name: str
    match_labels: Mapping[str, str] = dataclasses.field(default_factory=dict)
    match_expressions: tuple[LabelRequirement, ...] = ()
    allowed_schemes: tuple[str, ...] = ()  # empty: any of http/https
    allowed_hosts: tuple[str, ...] = ()  # empty: any host
    metrics_max_age_seconds: int = DEFAULT_METRICS_MAX_AGE_SECONDS
    probe_interval_seconds: float | None = None  # None: the operator's --probe-interval
    # spec.disruptionBudget.maxUnavailable as declared: a count (int) or "P%" per selection group;
    # None: no declared budget. Read by the drain (xtask.drain.core.budget); the operator ignores it.
    max_unavailable: int | str | None = None


@dataclasses.dataclass(frozen=True)
class ConsumerView:
    name: str
    network: str
    excluded_providers: frozenset[str] = frozenset()


@dataclasses.dataclass(frozen=True, order=True)
class Candidate:
    id: str
    provider: str
    endpoint: str
    selection_group: str
    rank: int
    admission_state: str
    # Only on an admitted candidate, while its window lasts. Compared and ordered last, and in a
    # digest row only when present, so a candidate without one digests as before it existed.
    slow_start: SlowStart | None = None
    # Only on an existing_only candidate: its provider's session deadline (whole unix seconds on
    # the API server's clock); in a digest row only when present, like the window.
    session_deadline: int | None = None
    # The provider's spec.authorization (a Secret reference only); in a digest row only when present.
    authorization: SecretRef | None = None

    def to_dict(self) -> dict:
        out = {
            "id": self.id,
            "provider": self.provider,
            "endpoint": self.endpoint,
            "selectionGroup": self.selection_group,
            "rank": self.rank,
            "admission_state": self.admission_state,
        }
        if self.slow_start is not None:
            out["slowStart"] = self.slow_start.to_dict()
        if self.session_deadline is not None:
            out["sessionDeadline"] = rfc3339(self.session_deadline)
        if self.authorization is not None:
            out["authorization"] = self.authorization.to_dict()
        return out

    @property
    def row_items(self) -> list:
        """What :func:`overlay_digest` digests of this candidate (a window as its start text and seconds)."""
        items: list = [self.id, self.provider, self.endpoint, self.selection_group, self.rank, self.admission_state]
        if self.slow_start is not None:
            items += [rfc3339(self.slow_start.start), self.slow_start.seconds]
        if self.session_deadline is not None:
            items += [{"sessionDeadline": rfc3339(self.session_deadline)}]
        if self.authorization is not None:
            items += [{"authorization": [self.authorization.name, self.authorization.key]}]
        return items

    @functools.cached_property
    def row(self) -> str:
        """This candidate's row in :func:`overlay_digest`'s input, as JSON text. Computed once per
        Candidate object: a planner that keeps unchanged candidates digests a fleet by joining
        these (:func:`digest_of_rows`) instead of serialising every candidate again."""
        return json.dumps(self.row_items, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: Mapping) -> Candidate:
        return cls(
            id=str(data["id"]),
            provider=str(data["provider"]),
            endpoint=str(data["endpoint"]),
            selection_group=str(data.get("selectionGroup", "")),
            rank=int(data.get("rank", 0)),
            admission_state=str(data["admission_state"]),
            slow_start=SlowStart.from_dict(data.get("slowStart")),
            session_deadline=parse_deadline(data.get("sessionDeadline")),
            authorization=SecretRef.from_dict(data.get("authorization")),
        )


@dataclasses.dataclass(frozen=True)
class Overlay:
    network: str
    consumer: str
    revision: int
    digest: str
    candidates: tuple[Candidate, ...]

    def to_spec(self) -> dict:
        return {
            "network": self.network,
            "consumer": self.consumer,
            "revision": self.revision,
            "digest": self.digest,
            "candidates": [c.to_dict() for c in self.candidates],
        }

    @classmethod
    def from_spec(cls, spec: Mapping) -> Overlay:
        return cls(
            network=str(spec.get("network", "")),
            consumer=str(spec.get("consumer", "")),
            revision=int(spec.get("revision", 0)),
            digest=str(spec.get("digest", "")),
            candidates=tuple(Candidate.from_dict(c) for c in spec.get("candidates") or ()),
        )

    def candidate_for(self, provider: str) -> Candidate | None:
        return self._by_provider.get(provider)

    @functools.cached_property
    def _by_provider(self) -> dict[str, Candidate]:
        """Candidates by provider name, built on first lookup: O(1) per lookup at fleet size."""
        return {c.provider: c for c in self.candidates}


def candidate_id(uid: str) -> str:
    """A provider's stable candidate id: derived from its object UID, never from spec or drain."""
    return "c-" + hashlib.sha256(uid.encode()).hexdigest()[:12]


def selects(network: NetworkView, labels: Mapping[str, str]) -> bool:
    """Kubernetes label-selector semantics; an empty selector selects everything."""
    for key, value in network.match_labels.items():
        if labels.get(key) != value:
            return False
    for req in network.match_expressions:
        present = req.key in labels
        if req.operator == "In" and not (present and labels[req.key] in req.values):
            return False
        if req.operator == "NotIn" and present and labels[req.key] in req.values:
            return False
        if req.operator == "Exists" and not present:
            return False
        if req.operator == "DoesNotExist" and present:
            return False
    return True


def endpoint_valid(endpoint: str) -> bool:
    try:
        parts = urlsplit(endpoint)
        _ = parts.port  # raises on a malformed port
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.hostname)


def endpoint_trusted(network: NetworkView, endpoint: str) -> bool:
    parts = urlsplit(endpoint)
    if network.allowed_schemes and parts.scheme not in network.allowed_schemes:
        return False
    # Host names are case-insensitive; urlsplit already lower-cases the endpoint's.
    if network.allowed_hosts and (parts.hostname or "") not in {h.lower() for h in network.allowed_hosts}:
        return False
    return True


def metrics_fresh(provider: ProviderView, network: NetworkView, *, now: float) -> bool:
    seen = provider.metrics_observed_at
    return seen is not None and now - seen <= network.metrics_max_age_seconds


def hard_failure(provider: ProviderView, network: NetworkView, *, now: float) -> Exclusion | None:
    """The hard failure that keeps ``provider`` out of every overlay of ``network``, or None.

    The same for every consumer of the network (a consumer's own exclusions come after it)."""
    if not endpoint_valid(provider.endpoint):
        return Exclusion.INVALID
    if provider.healthy is not True:
        return Exclusion.UNAVAILABLE
    if not metrics_fresh(provider, network, now=now):
        return Exclusion.STALE
    if not endpoint_trusted(network, provider.endpoint):
        return Exclusion.UNTRUSTED
    return None


def exclusion(provider: ProviderView, network: NetworkView, consumer: ConsumerView, *, now: float) -> Exclusion | None:
    """Why ``provider`` is not in ``consumer``'s overlay (a hard failure first), or None if usable."""
    failure = hard_failure(provider, network, now=now)
    if failure is not None:
        return failure
    if provider.name in consumer.excluded_providers:
        return Exclusion.EXCLUDED
    return None


def admission_state(provider: ProviderView, network: NetworkView, consumer: ConsumerView, *, now: float) -> str | None:
    """``admitted``, ``existing_only``, or None (not in the overlay)."""
    if exclusion(provider, network, consumer, now=now) is not None:
        return None
    return EXISTING_ONLY if provider.drain else ADMITTED


def verdict_until(provider: ProviderView, network: NetworkView, *, now: float) -> float:
    """Until when :func:`hard_failure` keeps its current answer for this provider version if
    only time passes: a usable (fresh) reading goes stale at ``observed_at + maxAge``; every
    other answer changes only with a new provider version or network. ``inf`` if never."""
    if provider.healthy is True and endpoint_valid(provider.endpoint) and metrics_fresh(provider, network, now=now):
        assert provider.metrics_observed_at is not None  # fresh implies observed
        until = float(provider.metrics_observed_at + network.metrics_max_age_seconds)
        window = provider.slow_start
        if window is not None and not provider.drain and now < window.end:
            until = min(until, float(window.end))  # the window leaves the candidate then
        return until
    return float("inf")


def slow_start_of(provider: ProviderView, *, now: float | None) -> SlowStart | None:
    """The window an admitted candidate of ``provider`` carries at ``now``: its own until it ends
    (``now`` None: not judged by time)."""
    window = provider.slow_start
    if window is None or provider.drain or (now is not None and now >= window.end):
        return None
    return window


def candidate_for(
    provider: ProviderView, failure: Exclusion | None, consumer: ConsumerView, *, now: float | None = None
) -> Candidate | None:
    """The consumer's candidate for a selected provider whose hard failure (for the consumer's
    network) is ``failure``: rules 1–3 of the module docstring, given rule 1's network part."""
    if failure is not None or provider.name in consumer.excluded_providers:
        return None
    state = EXISTING_ONLY if provider.drain else ADMITTED
    p = provider
    window = slow_start_of(p, now=now)
    deadline = p.session_deadline if p.drain else None  # a deadline moves a drained provider's sessions only
    return Candidate(
        p.candidate_id, p.name, p.endpoint, p.selection_group, p.rank, state, window, deadline, p.authorization
    )


def compute_candidates(
    providers: Iterable[ProviderView], network: NetworkView, consumer: ConsumerView, *, now: float
) -> tuple[Candidate, ...]:
    out = []
    for p in providers:
        if not selects(network, p.labels):
            continue
        c = candidate_for(p, hard_failure(p, network, now=now), consumer, now=now)
        if c is not None:
            out.append(c)
    return tuple(sorted(out, key=lambda c: (c.id, c.provider)))


def overlay_digest(candidates: Iterable[Candidate]) -> str:
    """Digest over semantic content only: membership, ids, endpoints, groups, ranks, states.

    Order-independent (the candidates are sorted first); no timestamps or load numbers exist
    in a :class:`Candidate`, so they cannot leak in.
    """
    rows = sorted(c.row_items for c in candidates)
    return "sha256:" + hashlib.sha256(json.dumps(rows, separators=(",", ":")).encode()).hexdigest()[:32]


def digest_of_rows(rows: Iterable[str]) -> str:
    """:func:`overlay_digest` from the candidates' :attr:`Candidate.row` texts, given in the order
    :func:`overlay_digest` sorts them (by id, then provider, when no two candidates share both).
    The same value: ``json.dumps`` of a list is its items' texts joined by commas in brackets."""
    return "sha256:" + hashlib.sha256(("[" + ",".join(rows) + "]").encode()).hexdigest()[:32]


def next_revision(previous: Overlay | None, digest: str, *, network: str) -> int:
    """The revision of an overlay with ``digest``: the previous one's while the digest (and network)
    is unchanged, else previous + 1 (1 for a first overlay)."""
    if previous is not None and previous.digest == digest and previous.network == network:
        return previous.revision
    return (previous.revision + 1) if previous is not None else 1


def next_overlay(previous: Overlay | None, candidates: Sequence[Candidate], *, network: str, consumer: str) -> Overlay:
    """The overlay to publish: same revision when the digest is unchanged, else previous + 1."""
    cands = tuple(sorted(candidates, key=lambda c: (c.id, c.provider)))
    digest = overlay_digest(cands)
    return Overlay(network, consumer, next_revision(previous, digest, network=network), digest, cands)


def group_admitted_counts(candidates: Iterable[Candidate]) -> dict[str, int]:
    """Admitted candidates per selection group (groups with only existing_only ones count 0)."""
    counts: dict[str, int] = {}
    for c in candidates:
        counts.setdefault(c.selection_group, 0)
        if c.admission_state == ADMITTED:
            counts[c.selection_group] += 1
    return counts
