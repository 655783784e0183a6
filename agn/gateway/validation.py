"""The pure checks that a RoutingOverlay is fit to serve, before the gateway accepts it.

The CRD schema already enforces types; this adds what a schema cannot say (the overlay is
for *this* consumer, ids and providers are unique, endpoints are dialable URLs) and guards
against objects written without the schema (e.g. an older CRD). No I/O.
A rejected overlay is never half-applied: the caller keeps serving the previous one.

Two forms are checked (see :mod:`agn.shards`):

- an **inline** overlay, whole in one object: :func:`validate_overlay`;
- a **sharded** one, checked in parts so that a new revision costs the gateway only the shards
  that changed: :func:`validate_index` checks the index alone (before any shard is fetched),
  :func:`parse_shard` checks one shard and parses its candidates — once per shard digest: the
  caller keeps the result with the shard and reuses it for every later index that names the
  shard at that digest — and :func:`assemble_overlay` joins the parsed shards of one index
  with C-level work only (concatenate, one set for provider uniqueness, one sort).

Why the parts add up to the whole check: every per-candidate rule is checked in the
candidate's shard; ids are unique within a shard and every id is in the one shard its hash
names (``shard_of(id, shardCount)``), so ids are unique across shards too; providers are
checked across shards at assembly. Each shard's digest must be ``overlay_digest`` of its own
candidates, and the index pins each shard's digest, so the candidates served are exactly the
ones the index's revision names; the whole-overlay digest is therefore not recomputed for a
sharded index (it is the operator's, carried as given).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from operator import attrgetter
from typing import Any, TypeGuard

from agn.credentials import SecretRef
from agn.model import (
    ADMITTED,
    EXISTING_ONLY,
    MAX_SLOW_START_SECONDS,
    MIN_SLOW_START_SECONDS,
    Candidate,
    Overlay,
    SlowStart,
    digest_of_rows,
    endpoint_valid,
    overlay_digest,
    parse_deadline,
)
from agn.netshards import FORMAT_VERSION, NETWORK_INFIX, network_of_shard
from agn.shards import MAX_SHARD_COUNT, SHARD_INFIX, consumer_of_shard, shard_of

ADMISSION_STATES = (ADMITTED, EXISTING_ONLY)


class InvalidOverlay(ValueError):
    """The overlay must not be served; ``problems`` says why, one line each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def _is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _candidate_problems(index: int, cand: Any) -> list[str]:
    where = f"candidates[{index}]"
    if not isinstance(cand, Mapping):
        return [f"{where} is not an object"]
    problems = []
    for key in ("id", "provider", "endpoint"):
        if not isinstance(cand.get(key), str) or not cand.get(key):
            problems.append(f"{where}.{key} must be a non-empty string")
    if isinstance(cand.get("endpoint"), str) and cand.get("endpoint") and not endpoint_valid(cand["endpoint"]):
        problems.append(f"{where}.endpoint {cand['endpoint']!r} is not an http(s) URL")
    if cand.get("admission_state") not in ADMISSION_STATES:
        problems.append(
            f"{where}.admission_state {cand.get('admission_state')!r} is not one of {', '.join(ADMISSION_STATES)}"
        )
    rank = cand.get("rank", 0)
    if not _is_int(rank) or rank < 0:
        problems.append(f"{where}.rank {rank!r} must be a non-negative integer")
    if not isinstance(cand.get("selectionGroup", ""), str):
        problems.append(f"{where}.selectionGroup must be a string")
    if "slowStart" in cand:
        problems += _slow_start_problems(where, cand)
    if "sessionDeadline" in cand:
        if parse_deadline(cand["sessionDeadline"]) is None:
            problems.append(f"{where}.sessionDeadline {cand['sessionDeadline']!r} must be an RFC 3339 time")
        elif cand.get("admission_state") != EXISTING_ONLY:
            problems.append(f"{where}.sessionDeadline is only for an existing_only candidate")
    if "authorization" in cand and SecretRef.from_dict(cand["authorization"]) is None:
        problems.append(f"{where}.authorization must name a Secret: credentials.name and credentials.key")
    return problems


def _slow_start_problems(where: str, cand: Mapping[str, Any]) -> list[str]:
    """A candidate's ``slowStart`` (:class:`agn.model.SlowStart`): on an admitted candidate only,
    ``{startTime: RFC 3339, durationSeconds: 1..3600}``."""
    window = cand["slowStart"]
    if SlowStart.from_dict(window) is None:
        return [
            f"{where}.slowStart {window!r} must be {{startTime: an RFC 3339 time, durationSeconds: "
            f"an integer from {MIN_SLOW_START_SECONDS} to {MAX_SLOW_START_SECONDS}}}"
        ]
    if cand.get("admission_state") != ADMITTED:
        return [f"{where}.slowStart is only for an admitted candidate"]
    return []


def _header_problems(spec: Mapping[str, Any], consumer: str) -> list[str]:
    """What an inline overlay and an index share: for this consumer, a revision, a digest."""
    problems: list[str] = []
    if spec.get("consumer") != consumer:
        problems.append(f"spec.consumer is {spec.get('consumer')!r}, not this consumer {consumer!r}")
    revision = spec.get("revision")
    if not _is_int(revision) or revision <= 0:
        problems.append(f"spec.revision {revision!r} must be an integer > 0")
    if not isinstance(spec.get("digest"), str) or not spec.get("digest"):
        problems.append("spec.digest must be a non-empty string")
    return problems


def validate_overlay(spec: Any, *, consumer: str) -> Overlay:
    """The overlay in ``spec`` if it is fit for ``consumer``; raises :class:`InvalidOverlay` otherwise."""
    if not isinstance(spec, Mapping):
        raise InvalidOverlay(["spec is missing or not an object"])
    problems = _header_problems(spec, consumer)
    candidates = spec.get("candidates")
    if not isinstance(candidates, list):
        problems.append("spec.candidates must be a list")
        candidates = []
    for index, cand in enumerate(candidates):
        problems += _candidate_problems(index, cand)
    if not problems:
        for key in ("id", "provider"):
            seen: set[str] = set()
            for cand in candidates:
                if cand[key] in seen:
                    problems.append(f"duplicate candidate {key} {cand[key]!r}")
                seen.add(cand[key])
    if problems:
        raise InvalidOverlay(problems)
    return Overlay.from_spec(spec)


def digest_matches(overlay: Overlay) -> bool:
    """Whether the published digest is the model's digest of the candidates (a cross-check only)."""
    return overlay.digest == overlay_digest(overlay.candidates)


# -- sharded overlays ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ShardEntry:
    """One shard an index names: its object name, its number (from the name) and its digest."""

    name: str
    number: int
    digest: str


@dataclasses.dataclass(frozen=True)
class ShardedIndex:
    """A checked sharded index: what the overlay will carry, and the shards that hold it."""

    network: str
    consumer: str
    revision: int
    digest: str
    shard_count: int
    shards: tuple[ShardEntry, ...]
    # The network-shard form (agn.netshards): the shards are the network's, shared with its
    # other consumers; ``excluded`` are the ids of their candidates this consumer does not get.
    network_form: bool = False
    excluded: frozenset[str] = frozenset()

    def owns(self, spec: Mapping[str, Any]) -> bool:
        """Whether a fetched shard spec is one this index's shards can be: this consumer's, or
        (network form) its network's, which names no consumer."""
        if self.network_form:
            return spec.get("network") == self.network and "consumer" not in spec
        return spec.get("consumer") == self.consumer


def _entry_problems(i: int, name: str, spec: Mapping[str, Any], consumer: str, network_form: bool) -> list[str]:
    """Whose shard ``name`` is: this consumer's, or in the network form its network's."""
    if network_form:
        if network_of_shard(name) != spec.get("network"):
            return [f"shards[{i}].name {name!r} is not a shard of network {spec.get('network')!r}"]
    elif consumer_of_shard(name) != consumer:
        return [f"shards[{i}].name {name!r} is not a shard of consumer {consumer!r}"]
    return []


def _form_problems(spec: Mapping[str, Any]) -> list[str]:
    """A ``formatVersion`` this gateway does not know (a newer operator's form) is refused, not
    misread; so is an ``excluded`` that is not a list of ids."""
    version = spec.get("formatVersion")
    if version is not None and version != FORMAT_VERSION:
        return [f"spec.formatVersion {version!r} is not one this gateway understands (absent, or {FORMAT_VERSION})"]
    excluded = spec.get("excluded")
    if version == FORMAT_VERSION and not (isinstance(excluded, list) and all(isinstance(i, str) for i in excluded)):
        return ["spec.excluded must be a list of candidate ids"]
    return []


def validate_index(spec: Any, *, consumer: str) -> ShardedIndex:
    """The sharded index in ``spec`` if it is fit for ``consumer``; raises :class:`InvalidOverlay`.

    Checked before any shard is fetched: the overlay's own fields (as for an inline overlay),
    ``shardCount``, and that every ``shards`` entry names one of this consumer's shards, once,
    numbered below ``shardCount`` (the CRD schema types the fields, but a shard of another
    consumer, a duplicate or an out-of-range number can only be caught here)."""
    if not isinstance(spec, Mapping):
        raise InvalidOverlay(["spec is missing or not an object"])
    problems = _header_problems(spec, consumer) + _form_problems(spec)
    network_form = spec.get("formatVersion") == FORMAT_VERSION
    infix = NETWORK_INFIX if network_form else SHARD_INFIX
    count = spec.get("shardCount")
    if not _is_int(count) or not 1 <= count <= MAX_SHARD_COUNT:
        problems.append(f"spec.shardCount {count!r} must be an integer from 1 to {MAX_SHARD_COUNT}")
        count = None
    entries = spec.get("shards")
    if not isinstance(entries, list):
        problems.append("shards must be a list")
        entries = []
    out: list[ShardEntry] = []
    for i, entry in enumerate(entries):
        name = entry.get("name") if isinstance(entry, Mapping) else None
        digest = entry.get("digest") if isinstance(entry, Mapping) else None
        if not isinstance(name, str) or not isinstance(digest, str):
            problems.append(f"shards[{i}] must have a string name and digest")
        elif owner := _entry_problems(i, name, spec, consumer, network_form):
            problems += owner
        elif any(name == seen.name for seen in out):
            problems.append(f"shards[{i}].name {name!r} is listed twice")
        elif count is not None and int(name.rpartition(infix)[2]) >= count:
            problems.append(f"shards[{i}].name {name!r} is numbered beyond shardCount {count}")
        else:
            out.append(ShardEntry(name, int(name.rpartition(infix)[2]), digest))
    if problems:
        raise InvalidOverlay(problems)
    assert count is not None  # a bad count is a problem above
    return ShardedIndex(
        network=str(spec.get("network", "")),
        consumer=consumer,
        revision=spec["revision"],
        digest=spec["digest"],
        shard_count=count,
        shards=tuple(out),
        network_form=network_form,
        excluded=frozenset(spec.get("excluded") or ()) if network_form else frozenset(),
    )


def parse_shard(
    spec: Any, *, entry: ShardEntry, shard_count: int, known: Mapping[str, Candidate] | None = None
) -> tuple[Candidate, ...]:
    """The candidates of one shard if it is fit to serve; raises :class:`InvalidOverlay` naming
    the shard otherwise.

    Every rule :func:`validate_overlay` applies to a candidate, plus what makes shards add up to
    a whole (module docstring): ids and providers unique within the shard, every id placed in
    this shard (``shard_of(id, shard_count) == entry.number``), and the shard's digest equal to
    ``overlay_digest`` of its candidates. ``shard_count`` is the index's (placement depends on
    it, so a parse is reusable only for the same count). The caller has already matched the
    shard's digest field to ``entry.digest``; this checks that field against the content.

    ``known``: candidates by id parsed from an earlier content of this shard (same name, same
    count). A candidate written exactly as one of them (its ``to_dict``) is that candidate, and
    its per-candidate rules are not checked again: a drain that changes one candidate of a
    shard of hundreds parses one. The shard-wide rules and the digest are checked in full."""
    where = f"shard {entry.name}"
    if not isinstance(spec, Mapping):
        raise InvalidOverlay([f"{where}: spec is missing or not an object"])
    raw = spec.get("candidates")
    if not isinstance(raw, list):
        raise InvalidOverlay([f"{where}: candidates must be a list"])
    known = known or {}
    problems: list[str] = []
    parsed: list[Candidate] = []
    for index, cand in enumerate(raw):
        cid = cand.get("id") if isinstance(cand, Mapping) else None
        same = known.get(cid) if isinstance(cid, str) else None
        if same is not None and same.to_dict() == cand:
            parsed.append(same)
            continue
        found = _candidate_problems(index, cand)
        problems += found
        if not found:
            parsed.append(_candidate(cand))
    if problems:
        raise InvalidOverlay([f"{where}: {p}" for p in problems])
    cands = tuple(parsed)
    for key in ("id", "provider"):
        problems += [f"{where}: duplicate candidate {key} {value!r}" for value in _duplicates(cands, key)]
    for c in cands:
        if shard_of(c.id, shard_count) != entry.number:
            problems.append(
                f"{where}: candidate id {c.id!r} belongs in shard {shard_of(c.id, shard_count):02d} "
                f"of {shard_count}, not {entry.number:02d}"
            )
    if not problems and spec.get("digest") != (actual := overlay_digest(cands)):
        problems.append(f"{where}: digest {spec.get('digest')!r} is not the digest of its candidates ({actual})")
    if problems:
        raise InvalidOverlay(problems)
    return cands


def _candidate(c: Mapping[str, Any]) -> Candidate:
    """A candidate from its spec form, once :func:`_candidate_problems` found none."""
    return Candidate(
        c["id"],
        c["provider"],
        c["endpoint"],
        c.get("selectionGroup", ""),
        c.get("rank", 0),
        c["admission_state"],
        SlowStart.from_dict(c.get("slowStart")),
        parse_deadline(c.get("sessionDeadline")),
        SecretRef.from_dict(c.get("authorization")),
    )


def _duplicates(cands: Sequence[Candidate], key: str) -> list[str]:
    """The values of ``key`` that more than one candidate has, in first-seen order."""
    values = list(map(attrgetter(key), cands))
    if len(set(values)) == len(values):  # the common case, all at C speed
        return []
    seen: set[str] = set()
    twice: dict[str, None] = {}
    for value in values:
        if value in seen:
            twice[value] = None
        seen.add(value)
    return list(twice)


BY_ID = attrgetter("id", "provider")


def assemble_overlay(index: ShardedIndex, shards: Iterable[tuple[str, tuple[Candidate, ...]]]) -> Overlay:
    """The whole overlay of ``index`` from its shards' parsed candidates (``(name, candidates)``,
    each from :func:`parse_shard`); raises :class:`InvalidOverlay` when a provider is in two
    shards. Only C-level work over the whole overlay: a concatenation, a set and a sort. In the
    network form the index's ``excluded`` candidates are left out, and the result must then have
    the index's digest (what this consumer gets is no shard's digest)."""
    parts = list(shards)
    cands: list[Candidate] = []
    for _, part in parts:
        cands.extend(part)
    if index.excluded:
        cands = [c for c in cands if c.id not in index.excluded]
    duplicated = _duplicates(cands, "provider")
    if duplicated:
        where = {p: [name for name, part in parts if any(c.provider == p for c in part)] for p in duplicated}
        raise InvalidOverlay(
            [f"provider {p!r} is a candidate in more than one shard ({', '.join(names)})" for p, names in where.items()]
        )
    cands.sort(key=BY_ID)
    if index.network_form and (actual := digest_of_rows(c.row for c in cands)) != index.digest:
        raise InvalidOverlay([f"the network's shards minus spec.excluded digest to {actual}, not {index.digest}"])
    return Overlay(index.network, index.consumer, index.revision, index.digest, tuple(cands))
