"""The pure check that a RoutingOverlay is fit to serve, before the gateway accepts it.

The CRD schema already enforces types; this adds what a schema cannot say (the overlay is
for *this* consumer, ids and providers are unique, endpoints are dialable URLs) and guards
against objects written without the schema (e.g. an older CRD). No I/O.
A rejected overlay is never half-applied: the caller keeps serving the previous one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agn.model import ADMITTED, EXISTING_ONLY, Overlay, endpoint_valid, overlay_digest

ADMISSION_STATES = (ADMITTED, EXISTING_ONLY)


class InvalidOverlay(ValueError):
    """The overlay must not be served; ``problems`` says why, one line each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def _is_int(value: Any) -> bool:
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
    return problems


def validate_overlay(spec: Any, *, consumer: str) -> Overlay:
    """The overlay in ``spec`` if it is fit for ``consumer``; raises :class:`InvalidOverlay` otherwise."""
    if not isinstance(spec, Mapping):
        raise InvalidOverlay(["spec is missing or not an object"])
    problems: list[str] = []
    if spec.get("consumer") != consumer:
        problems.append(f"spec.consumer is {spec.get('consumer')!r}, not this consumer {consumer!r}")
    revision = spec.get("revision")
    if not isinstance(revision, int) or isinstance(revision, bool) or revision <= 0:
        problems.append(f"spec.revision {revision!r} must be an integer > 0")
    if not isinstance(spec.get("digest"), str) or not spec.get("digest"):
        problems.append("spec.digest must be a non-empty string")
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
