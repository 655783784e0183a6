"""The pure overlay model (docs/overlays.md): providers + network + consumer -> overlay.

This module is the single statement of overlay semantics, shared by the operator (which
publishes overlays) and the xtask (capacity guard, convergence reasons). It does no I/O and
reads no clock: callers pass ``now``.

Rules, per consumer, per provider selected by the consumer's network:
1. invalid, unavailable, stale, untrusted or explicitly excluded -> not in the overlay
   (hard failures always win; drain never makes an unusable provider routable);
2. else drained -> ``existing_only``;
3. else -> ``admitted``.
The digest covers semantic content only; the revision increases by one exactly when the
digest changes.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from urllib.parse import urlsplit

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
    # spec.capacity.maxConcurrent: how many requests it serves at once (None: none declared).
    # Read by the drain's load-aware capacity guard (xtask.drain.core.capacity); the operator
    # publishes the load of a provider that declares it.
    max_concurrent: int | None = None


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

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "provider": self.provider,
            "endpoint": self.endpoint,
            "selectionGroup": self.selection_group,
            "rank": self.rank,
            "admission_state": self.admission_state,
        }

    @functools.cached_property
    def row(self) -> str:
        """This candidate's row in :func:`overlay_digest`'s input, as JSON text. Computed once per
        Candidate object: a planner that keeps unchanged candidates digests a fleet by joining
        these (:func:`digest_of_rows`) instead of serialising every candidate again."""
        return json.dumps(
            [self.id, self.provider, self.endpoint, self.selection_group, self.rank, self.admission_state],
            separators=(",", ":"),
        )

    @classmethod
    def from_dict(cls, data: Mapping) -> Candidate:
        return cls(
            id=str(data["id"]),
            provider=str(data["provider"]),
            endpoint=str(data["endpoint"]),
            selection_group=str(data.get("selectionGroup", "")),
            rank=int(data.get("rank", 0)),
            admission_state=str(data["admission_state"]),
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
        return provider.metrics_observed_at + network.metrics_max_age_seconds
    return float("inf")


def candidate_for(provider: ProviderView, failure: Exclusion | None, consumer: ConsumerView) -> Candidate | None:
    """The consumer's candidate for a selected provider whose hard failure (for the consumer's
    network) is ``failure``: rules 1–3 of the module docstring, given rule 1's network part."""
    if failure is not None or provider.name in consumer.excluded_providers:
        return None
    state = EXISTING_ONLY if provider.drain else ADMITTED
    p = provider
    return Candidate(p.candidate_id, p.name, p.endpoint, p.selection_group, p.rank, state)


def compute_candidates(
    providers: Iterable[ProviderView], network: NetworkView, consumer: ConsumerView, *, now: float
) -> tuple[Candidate, ...]:
    out = []
    for p in providers:
        if not selects(network, p.labels):
            continue
        c = candidate_for(p, hard_failure(p, network, now=now), consumer)
        if c is not None:
            out.append(c)
    return tuple(sorted(out, key=lambda c: (c.id, c.provider)))


def overlay_digest(candidates: Iterable[Candidate]) -> str:
    """Digest over semantic content only: membership, ids, endpoints, groups, ranks, states.

    Order-independent (the candidates are sorted first); no timestamps or load numbers exist
    in a :class:`Candidate`, so they cannot leak in.
    """
    rows = sorted([c.id, c.provider, c.endpoint, c.selection_group, c.rank, c.admission_state] for c in candidates)
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
