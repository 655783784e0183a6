"""When a drained provider is idle (docs/provider-drain.md: `--wait-idle`). Pure: no I/O, no clock (callers pass ``now``).

The source of truth is the load reading the operator writes into each InferenceProvider's
status (``status.load``: ``running``, ``waiting`` and ``observedAt``, the time of the scrape;
``status.probe.metricsError`` when the last scrape failed). One reading is:

- **idle** — fresh (``now - observedAt <= metricsMaxAgeSeconds`` of the named network),
  the last scrape succeeded, and it exports both gauges, with ``running == 0`` and
  ``waiting == 0``;
- **busy** — fresh, last scrape succeeded, both gauges exported, and either is above zero;
- **unknown** — anything else: no reading, an expired reading, a failed last scrape (the
  stored reading is older than the provider's current load), or a gauge the provider does
  not export. An absent number is never read as zero.

Only a drained provider (``spec.trafficPolicy.drain: true``, the only kind a ``--wait-idle``
waits on) has a ``status.load``. The operator writes it only when its meaning changes
(running/waiting counts, a failed scrape, availability: ``should_write`` in
``agn/operator/provider_status.py``), not on every reading: a provider that stays idle is not
rewritten, so ``observedAt`` is when its reading last *changed*. Every other provider's
readings stay in the operator (docs/operator.md, "Status writes at fleet size"): no ``load``
there reads as unknown, never as 0.

**Freshness from the probes heartbeat.** The Lease ``agn-probes`` (``agn/operator/heartbeat.py``)
carries a watermark T: every provider has been probed since T and the status write each of
those probes called for is done (the operator renews it only then, and never while a status
write failed). So a status the caller saw unchanged (same ``resourceVersion``) both before and
after it read a renewal T is *vouched for* at T: the operator probed the provider at T or later,
and had the load changed it would have written it. A reading's time is then
``max(observedAt, T)``; its age is counted from there, and expires as before when the heartbeat
stops. The caller passes ``vouched_at`` only for the exact object it saw around the renewal.

**After the drain.** An idle reading whose time is before ``since`` (when the drain was serving
everywhere) proves nothing, as sessions could still land after that probe: it is unknown.

**Two consecutive readings.** A provider counts as idle only after two *distinct* readings in
a row (different times: two writes, or two heartbeat renewals after ``since``) were idle.
Seeing the same reading twice proves nothing about the provider, so it does not count twice.
Because the operator writes every reading whose meaning changed before it renews the
heartbeat, two consecutive idle readings mean every probe between them saw the provider idle
too. Any busy or unknown look in between starts the count again, and so does a gap in what the
caller saw (a re-list after a broken watch).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from agn.engines import AGN, FORMATS
from agn.objects import parse_time
from xtask.record import Record

IDLE = "idle"
BUSY = "busy"
UNKNOWN = "unknown"
CONFIRMATIONS = 2  # distinct idle readings in a row


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Reading(Record):
    """One provider's load reading as the operator last wrote it, judged at one moment."""

    provider: str
    state: str  # idle | busy | unknown, for this reading alone
    why: str  # in words: "running 0, waiting 0", "no load reading yet", ...
    running: int | None = None
    waiting: int | None = None
    observed_at: str | None = None  # the reading's observedAt as written
    age: float | None = None  # seconds since the reading's time (never negative)
    at: float | None = None  # the reading's time: observedAt, or a later heartbeat that vouches for it (its identity)

    def last_reading(self) -> dict[str, Any] | None:
        """The reading as the report shows it; None when there is none. Absent gauges stay absent."""
        if self.observed_at is None:
            return None
        out: dict[str, Any] = {"observedAt": self.observed_at}
        if self.running is not None:
            out["running"] = self.running
        if self.waiting is not None:
            out["waiting"] = self.waiting
        return out


def _gauge(value: Any) -> int | None:
    """A count as the CRD allows it (a non-negative integer); anything else reads as not exported."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def classify(
    provider: str,
    obj: Mapping[str, Any] | None,
    *,
    max_age: float,
    now: float,
    vouched_at: float | None = None,
    since: float | None = None,
) -> Reading:
    """Judge one provider object's load reading at ``now`` against the network's ``max_age``;
    ``vouched_at``: a heartbeat renewal that vouches for this very object (module docstring);
    ``since``: idle readings older than this do not count."""
    if obj is None:
        return Reading(provider, UNKNOWN, "the provider no longer exists")
    status = obj.get("status") or {}
    load = status.get("load") or {}
    probe = status.get("probe") or {}
    observed_text = load.get("observedAt")
    observed = parse_time(observed_text) if isinstance(observed_text, str) else None
    if observed is None:
        error = probe.get("metricsError")
        return Reading(provider, UNKNOWN, f"no load reading yet{': ' + error if error else ''}")
    running, waiting = _gauge(load.get("running")), _gauge(load.get("waiting"))
    at = observed if vouched_at is None else max(observed, vouched_at)
    age = max(0.0, now - at)

    def seen(state: str, why: str) -> Reading:
        return Reading(provider, state, why, running, waiting, observed_text, age, at)

    if age > max_age:
        return seen(UNKNOWN, f"reading expired: older than metricsMaxAgeSeconds {max_age:g}")
    if probe.get("metricsError"):
        return seen(UNKNOWN, f"the last scrape failed: {probe['metricsError']}")
    missing = _missing(probe.get("metricsFormat"), running=running, waiting=waiting)
    if missing:
        return seen(UNKNOWN, missing)
    if running == 0 and waiting == 0 and since is not None and at < since:
        return seen(UNKNOWN, "running 0, waiting 0, read before the drain: waiting for a probes heartbeat after it")
    return seen(IDLE if running == 0 and waiting == 0 else BUSY, f"running {running}, waiting {waiting}")


def _missing(format_name: object, *, running: int | None, waiting: int | None) -> str | None:
    """Why a reading lacks a count, naming the metric of the format it was read as
    (``status.probe.metricsFormat``; none written: AGN's, as before engines were read)."""
    if running is not None and waiting is not None:
        return None
    if format_name is None and running is None and waiting is None:
        return (
            f"the provider exports none of the load metrics read ({', '.join(FORMATS)}: docs/engines.md; "
            f"a vLLM started with --disable-log-stats exports none)"
        )
    fmt = FORMATS.get(str(format_name), AGN)
    if running is None and waiting is None and fmt.no_metrics:
        return f"the provider does not export {fmt.running} nor {fmt.waiting} ({fmt.no_metrics})"
    return f"the provider does not export {fmt.running if running is None else fmt.waiting}"


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class ProviderIdle(Record):
    """One provider's verdict: its current reading and how many idle readings in a row back it."""

    reading: Reading
    idle_readings: int

    @property
    def state(self) -> str:
        if self.reading.state == IDLE and self.idle_readings < CONFIRMATIONS:
            return UNKNOWN  # idle once: not yet confirmed by a second reading
        return self.reading.state

    @property
    def detail(self) -> str:
        r = self.reading
        if self.state == UNKNOWN and r.state == IDLE:
            return f"{r.why}: idle in {self.idle_readings} reading, waiting for the next one"
        return r.why

    def describe(self) -> str:
        """``p-one busy (running 0, waiting 3; read 1.2s ago)``: the words a timeout names it with."""
        age = f"; read {self.reading.age:.1f}s ago" if self.reading.age is not None else ""
        return f"{self.reading.provider} {self.state} ({self.detail}{age})"

    def to_dict(self) -> dict[str, Any]:
        r = self.reading
        return {
            "provider": r.provider,
            "state": self.state,
            "lastReading": r.last_reading(),
            "ageSeconds": None if r.age is None else round(r.age, 3),
            "idleReadings": self.idle_readings,
            "detail": self.detail,
        }


class IdleTracker:
    """Counts distinct idle readings in a row, per provider (see the module docstring).

    Feed it every look at a provider — each watch event, each periodic re-judgement (an
    idle reading can expire while nothing changes) — in the order they happened.
    """

    def __init__(self, providers: list[str]) -> None:
        self._streak = dict.fromkeys(providers, 0)
        self._last: dict[str, float | None] = dict.fromkeys(providers, None)
        self._current: dict[str, Reading] = {p: Reading(p, UNKNOWN, "not observed yet") for p in providers}

    def observe(self, reading: Reading, *, after_gap: bool = False) -> None:
        """Record one look. ``after_gap``: readings may have been missed since the previous look
        (a re-list), so a new reading does not continue the old count."""
        name = reading.provider
        if name not in self._streak:
            return
        self._current[name] = reading
        new = reading.at != self._last[name]
        self._last[name] = reading.at
        if reading.state != IDLE:
            self._streak[name] = 0
        elif new:
            self._streak[name] = (0 if after_gap else self._streak[name]) + 1

    def verdicts(self) -> list[ProviderIdle]:
        return [ProviderIdle(self._current[p], self._streak[p]) for p in sorted(self._streak)]


def all_idle(verdicts: list[ProviderIdle]) -> bool:
    return all(v.state == IDLE for v in verdicts)


def not_idle(verdicts: list[ProviderIdle]) -> list[str]:
    """Each provider that is busy or unknown, with its last reading and its age."""
    return [v.describe() for v in verdicts if v.state != IDLE]
