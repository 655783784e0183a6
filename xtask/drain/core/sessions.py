"""When the drained providers' sessions are quiet (docs/provider-drain.md: ``--wait-sessions``).
Pure: no I/O, no clock (callers pass ``now``, the API server's time as they estimate it).

The source of truth is what each consumer's gateway reports in its InferenceConsumer's
``status.sessions`` (:mod:`agn.gateway.sessions`): per provider that is not admitted in the
overlay it serves, the sticky sessions bound to it, the time of its last turn (on the API
server's clock, milliseconds, rounded up) and the sessions rehomed away from it; ``since``, when
its reports began; ``intervalSeconds``, how often it looks (a turn reaches the status at most
about that long after it was routed). For one consumer and one drained provider the report is:

- **quiet** — the report is for the revision the consumer serves (or a later one) and the
  provider's last turn (``since`` when it is not listed: no turn since the gateway began
  reporting) is at least ``QUIET + intervalSeconds`` seconds old;
- **talking** — the same, but the last turn is more recent;
- **unknown** — anything else: no report (a gateway that never reported), a report for an older
  revision than the one served, a provider not listed while the report omits some, an unreadable
  time. Unknown is never quiet.

The wait ends when every (consumer, drained provider) pair is quiet.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from agn.objects import parse_time
from xtask.record import Record

QUIET = "quiet"
TALKING = "talking"
UNKNOWN = "unknown"


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class SessionVerdict(Record):
    """One drained provider as one consumer's gateway reports it, judged at one moment."""

    consumer: str
    provider: str
    state: str  # quiet | talking | unknown
    why: str
    sessions: int | None = None
    rehomed: int | None = None
    last_turn: str | None = None  # as reported (absent: none since ``since``)
    age: float | None = None  # seconds since the last turn (or since ``since``)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"consumer": self.consumer, "provider": self.provider, "state": self.state}
        out["why"] = self.why
        for key, value in (
            ("sessions", self.sessions),
            ("rehomed", self.rehomed),
            ("lastTurn", self.last_turn),
            ("ageSeconds", None if self.age is None else round(self.age, 1)),
        ):
            if value is not None:
                out[key] = value
        return out


def judge(
    consumer: str, obj: Mapping[str, Any] | None, providers: Iterable[str], *, quiet: float, now: float
) -> list[SessionVerdict]:
    """Each of ``providers`` as ``consumer``'s object (None: not seen) reports it at ``now``."""
    status = (obj or {}).get("status") or {}
    report = status.get("sessions")
    problem = _report_problem(obj, status, report)
    if problem is not None:
        return [SessionVerdict(consumer, p, UNKNOWN, problem) for p in providers]
    assert isinstance(report, Mapping)
    margin = float(report.get("intervalSeconds") or 0.0)
    lines = {line.get("provider"): line for line in report.get("providers") or () if isinstance(line, Mapping)}
    return [_one(consumer, p, report, lines.get(p), quiet=quiet, margin=margin, now=now) for p in providers]


def _report_problem(obj: Mapping[str, Any] | None, status: Mapping[str, Any], report: Any) -> str | None:
    if obj is None:
        return "consumer not found"
    if not isinstance(report, Mapping):
        return "its gateway has not reported sessions (status.sessions)"
    serving, revision = status.get("servingRevision"), report.get("revision")
    if not isinstance(revision, int) or not isinstance(serving, int) or revision < serving:
        return f"its sessions report is for revision {revision}, it serves {serving}"
    return None


def _one(
    consumer: str,
    provider: str,
    report: Mapping[str, Any],
    line: Mapping[str, Any] | None,
    *,
    quiet: float,
    margin: float,
    now: float,
) -> SessionVerdict:
    if line is None and report.get("omitted"):
        return SessionVerdict(consumer, provider, UNKNOWN, f"not listed ({report['omitted']} providers omitted)")
    sessions = int(line.get("sessions", 0)) if line is not None else 0
    rehomed = int(line.get("rehomed", 0)) if line is not None else 0
    text = line.get("lastTurn") if line is not None else None
    at = parse_time(text if text is not None else report.get("since"))
    if at is None:
        return SessionVerdict(consumer, provider, UNKNOWN, "no readable last turn or since", sessions, rehomed)
    age = max(0.0, now - at)
    what = f"last turn {age:.1f}s ago" if text is not None else f"no turn in the {age:.0f}s it has reported"
    state = QUIET if age >= quiet + margin else TALKING
    return SessionVerdict(consumer, provider, state, f"{sessions} session(s), {what}", sessions, rehomed, text, age)


def all_quiet(verdicts: Iterable[SessionVerdict]) -> bool:
    verdicts = list(verdicts)
    return bool(verdicts) and all(v.state == QUIET for v in verdicts)


def describe_not_quiet(verdicts: Iterable[SessionVerdict]) -> list[str]:
    """One line per provider that is not quiet: its sessions per consumer and why."""
    by_provider: dict[str, list[SessionVerdict]] = {}
    for v in verdicts:
        if v.state != QUIET:
            by_provider.setdefault(v.provider, []).append(v)
    lines = []
    for provider, vs in sorted(by_provider.items()):
        known = [v.sessions for v in vs if v.sessions is not None]
        total = f"{sum(known)} session(s)" if known else "sessions unknown"
        parts = "; ".join(f"{v.consumer}: {v.state}, {v.why}" for v in vs)
        lines.append(f"{provider}: {total} ({parts})")
    return lines
