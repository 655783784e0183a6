"""The built-in wave gate: the error ratio of completion requests through the named consumers'
gateways over a soak, read from their ``/metrics`` (:class:`ErrorRatioGate`), and where those
``/metrics`` are (:func:`gateway_metrics_urls`).

What counts (``agn_gateway_requests_total{outcome}``, :mod:`agn.gateway.metrics`): ``routed``
is a success; ``no_route`` (503) and ``upstream_error`` (502) are errors; ``bad_request``
(400/413, the client's fault) says nothing about the providers and is left out of both sides.
The ratio is summed over every named consumer's gateway: errors / (routed + errors).

A reading is not a pass unless it is evidence (:mod:`xtask.drain.gates.base`):

- no requests at all in the window: not held, value None (as Argo Rollouts treats an empty
  result: inconclusive is not success). A drain in waves of an idle service gates on nothing;
  ``--soak 0`` runs its waves paced by convergence alone.
- a gateway that does not answer (each request has a timeout), answers with something that is
  not Prometheus text, or whose counters went backwards or were created anew (a restart: the
  ``_created`` sample of a series changed, or a series disappeared) between begin and read:
  not held, the detail names the gateway and why.

Only the named consumers' gateways are read, nothing is written. No I/O at import.
"""

from __future__ import annotations

import dataclasses
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from agn.gateway.outcomes import BAD_REQUEST, NO_ROUTE, ROUTED, UPSTREAM_ERROR
from xtask.drain.gates import client
from xtask.drain.gates.base import Gate, GateReading, GateSetup
from xtask.drain.gates.flags import DEFAULT_MAX_ERROR_RATIO, ERROR_RATIO_FLAGS
from xtask.errors import UsageError
from xtask.record import Record

ERROR_OUTCOMES = (NO_ROUTE, UPSTREAM_ERROR)
COUNTED = (ROUTED, *ERROR_OUTCOMES)
IGNORED = (BAD_REQUEST,)
SCRAPE_TIMEOUT = 5.0
SCRAPE_LIMIT = 4 * 1024 * 1024  # a gateway's /metrics is a few KiB; more is not a gateway's
_UNREACHABLE_HOSTS = ("0.0.0.0", "::", "[::]", "")  # an address a gateway listens on, not one to dial


class ScrapeError(Exception):
    """A ``/metrics`` that could not be read as Prometheus text; the message says why."""


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Counts(Record):
    """One gateway's request counters at one moment: outcome -> count (summed over the
    admission states), and each series' creation time (to tell a restart)."""

    by_outcome: dict[str, float]
    created: dict[tuple[str, str], float]  # (outcome, admission_state) -> _created
    totals: dict[tuple[str, str], float]  # (outcome, admission_state) -> _total


def parse_counts(text: str) -> Counts:
    """The ``agn_gateway_requests`` counters of a gateway's ``/metrics`` text."""
    from prometheus_client.parser import text_string_to_metric_families  # only runs in waves read it

    by_outcome: dict[str, float] = {}
    created: dict[tuple[str, str], float] = {}
    totals: dict[tuple[str, str], float] = {}
    try:
        for family in text_string_to_metric_families(text):
            if family.name not in ("agn_gateway_requests", "agn_gateway_requests_created"):
                continue  # the 0.0.4 text format gives _created a family of its own
            for s in family.samples:
                key = (s.labels.get("outcome", ""), s.labels.get("admission_state", ""))
                if s.name.endswith("_total"):
                    totals[key] = s.value
                    by_outcome[key[0]] = by_outcome.get(key[0], 0.0) + s.value
                elif s.name.endswith("_created"):
                    created[key] = s.value
    except ValueError as exc:
        raise ScrapeError(f"not Prometheus text: {exc}") from exc
    return Counts(by_outcome, created, totals)


def scrape(url: str, *, timeout: float = SCRAPE_TIMEOUT) -> Counts:
    """GET ``url`` (a gateway's ``/metrics``) within ``timeout`` and parse its request counters."""
    try:
        answer = client.get(url, timeout=timeout, limit=SCRAPE_LIMIT)
    except client.Unanswered as exc:
        raise ScrapeError(f"did not answer: {exc}") from exc
    if not 200 <= answer.status < 300:
        raise ScrapeError(f"answered HTTP {answer.status}")
    if answer.truncated:
        raise ScrapeError(f"answered more than {SCRAPE_LIMIT} bytes")
    try:
        return parse_counts(answer.body.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ScrapeError("answered something that is not UTF-8 text") from exc


def reset_between(before: Counts, after: Counts) -> str | None:
    """Why ``after`` does not continue ``before`` (the gateway restarted), or None if it does."""
    for key, value in before.totals.items():
        if key not in after.totals:
            return f"the series outcome={key[0]},admission_state={key[1]} disappeared (a restart)"
        if after.totals[key] < value:
            return f"the counter outcome={key[0]} went backwards from {value:g} to {after.totals[key]:g} (a restart)"
        if key in before.created and after.created.get(key, before.created[key]) != before.created[key]:
            return f"the series outcome={key[0]},admission_state={key[1]} was created anew (a restart)"
    return None


def _fmt(value: float) -> str:
    return f"{value:.4g}"


class SoakCounters:
    """The named consumers' gateway request counters over one soak: a snapshot at its start
    (:meth:`begin`), and at its end each consumer's increase per counted outcome (:meth:`end`),
    or why it is not known (a gateway that did not answer, or restarted)."""

    def __init__(
        self, urls: Mapping[str, str], *, timeout: float = SCRAPE_TIMEOUT, read: Callable[[str], Counts] | None = None
    ) -> None:
        self.urls = dict(sorted(urls.items()))  # consumer -> its gateway's /metrics
        self._read = read or (lambda url: scrape(url, timeout=timeout))
        self._start: dict[str, Counts | str] = {}

    def _take(self) -> dict[str, Counts | str]:
        out: dict[str, Counts | str] = {}
        for consumer, url in self.urls.items():
            try:
                out[consumer] = self._read(url)
            except ScrapeError as exc:
                out[consumer] = f"gateway of {consumer} ({url}) {exc}"
        return out

    def begin(self) -> None:
        self._start = self._take()

    def end(self) -> tuple[dict[str, dict[str, float]], list[str]]:
        """Per consumer, each counted outcome's increase since :meth:`begin`; and the problems."""
        end = self._take()
        deltas: dict[str, dict[str, float]] = {}
        problems: list[str] = []
        for consumer in self.urls:
            before, after = self._start.get(consumer, "not read at the soak's start"), end[consumer]
            if isinstance(before, str) or isinstance(after, str):
                problems.append(before if isinstance(before, str) else str(after))
                continue
            reset = reset_between(before, after)
            if reset:
                problems.append(f"gateway of {consumer}: {reset}; its counts over the soak are not known")
                continue
            deltas[consumer] = {o: after.by_outcome.get(o, 0.0) - before.by_outcome.get(o, 0.0) for o in COUNTED}
        return deltas, problems


class ErrorRatioGate:
    """The error ratio of the named consumers' gateways over a soak, held if at most ``max_ratio``."""

    name = "error-ratio"

    def __init__(
        self,
        urls: Mapping[str, str],
        *,
        max_ratio: float,
        timeout: float = SCRAPE_TIMEOUT,
        read: Callable[[str], Counts] | None = None,
    ) -> None:
        self.counters = SoakCounters(urls, timeout=timeout, read=read)
        self.urls = self.counters.urls
        self.max_ratio = max_ratio

    @property
    def threshold(self) -> str:
        return f"<= {self.max_ratio:g}"

    def begin(self) -> None:
        self.counters.begin()

    def read(self, window_seconds: float) -> GateReading:
        deltas, problems = self.counters.end()
        if problems:
            return GateReading(self.name, False, None, self.threshold, "; ".join(problems))
        errors = total = 0.0
        parts = []
        for consumer, delta in deltas.items():
            e = sum(delta[o] for o in ERROR_OUTCOMES)
            n = sum(delta.values())
            errors, total = errors + e, total + n
            parts.append(
                f"{consumer}: {_fmt(e)} of {_fmt(n)} failed ("
                + ", ".join(f"{o} {_fmt(delta[o])}" for o in ERROR_OUTCOMES)
                + ")"
            )
        window = f"over {window_seconds:.1f}s"
        if total <= 0:
            return GateReading(
                self.name,
                False,
                None,
                self.threshold,
                f"no completion requests through {', '.join(self.urls)} {window}: no evidence the wave is healthy",
            )
        ratio = errors / total
        return GateReading(
            self.name, ratio <= self.max_ratio, round(ratio, 6), self.threshold, f"{window}: " + "; ".join(parts)
        )


# -- where the gateways' /metrics are ------------------------------------------------------------
def parse_overrides(values: Sequence[str]) -> dict[str, str]:
    """``--consumer-gateway-metrics CONSUMER=URL`` values as a dict; ValueError naming a bad one."""
    out: dict[str, str] = {}
    for value in values:
        consumer, sep, url = value.partition("=")
        if not sep or not consumer or not url:
            raise ValueError(f"{value!r} is not CONSUMER=URL")
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise ValueError(f"{value!r}: {url!r} is not an http:// or https:// URL")
        if consumer in out:
            raise ValueError(f"consumer {consumer!r} is given twice")
        out[consumer] = url
    return out


def gateway_metrics_urls(
    consumers: Mapping[str, Mapping | None], overrides: Mapping[str, str]
) -> tuple[dict[str, str], list[str]]:
    """Each named consumer's gateway ``/metrics`` URL and the problems that leave one unknown.

    ``--consumer-gateway-metrics CONSUMER=URL`` wins; else the address the gateway reports in its
    consumer's ``status.address`` (``http://127.0.0.1:PORT`` on the local runtime) plus
    ``/metrics``. A gateway in a pod reports the address it listens on (``0.0.0.0``), which is
    not one to dial from here: name it with ``--consumer-gateway-metrics`` (e.g. through
    ``kubectl port-forward``)."""
    urls: dict[str, str] = {}
    problems: list[str] = []
    for name, obj in sorted(consumers.items()):
        if name in overrides:
            urls[name] = overrides[name]
            continue
        address = str(((obj or {}).get("status") or {}).get("address") or "")
        host = urllib.parse.urlsplit(address).hostname or ""
        if not address:
            problems.append(f"consumer {name}: its gateway reports no address (status.address)")
        elif host in _UNREACHABLE_HOSTS:
            problems.append(
                f"consumer {name}: its gateway reports {address}, an address it listens on, not one to dial"
            )
        else:
            urls[name] = address.rstrip("/") + "/metrics"
    return urls, problems


# -- the gate's flags, their check, and the gate (xtask.drain.gates.base.GateModule) ---------------
FLAGS = ERROR_RATIO_FLAGS


def check(options: Mapping[str, Any], *, consumers: tuple[str, ...], soak: float | None) -> None:
    values = options.get("consumer_gateway_metrics") or ()
    if not values:
        return
    try:
        overrides = parse_overrides(values)
    except ValueError as exc:
        raise UsageError(f"--consumer-gateway-metrics: {exc}") from None
    unknown = sorted(set(overrides) - set(consumers))
    if unknown:
        raise UsageError(
            f"--consumer-gateway-metrics names {', '.join(unknown)}, which is not a --consumer of this drain "
            "(only the named consumers' gateways are read)"
        )


def make(setup: GateSetup) -> tuple[Gate | None, list[str]]:
    """The error-ratio gate over the named consumers' gateways, each scraped once now to know
    it answers (a refusal before any write)."""
    overrides = parse_overrides(setup.options.get("consumer_gateway_metrics") or ())  # checked already
    urls, problems = gateway_metrics_urls(setup.consumers, overrides)
    for consumer, url in urls.items():
        try:
            scrape(url)
        except ScrapeError as exc:
            problems.append(f"consumer {consumer}: its gateway's metrics {url} {exc}")
    if problems:
        return None, [p + " (name it with --consumer-gateway-metrics CONSUMER=URL)" for p in problems]
    limit = setup.options.get("max_error_ratio")
    return ErrorRatioGate(urls, max_ratio=DEFAULT_MAX_ERROR_RATIO if limit is None else limit), []
