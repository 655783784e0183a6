"""The PromQL gate of a drain's waves: an expression, evaluated by a Prometheus over the soak,
that must be non-empty and true (the convention of Argo Rollouts' analysis: no data is not a pass).

Over the soak means: one range query (``/api/v1/query_range``) from the soak's start
(:meth:`PromQLGate.begin`) to the moment it is read, one evaluation every ``step`` seconds
(default: the env's scrape interval, one second; wider for long soaks, so a query never asks for
more than :data:`MAX_POINTS` points). The gate holds only if

- every evaluation in the window has at least one sample: an instant where the result is empty
  (a filter such as ``ratio < 0.01`` that dropped its series, a metric that is absent) is a breach;
- every sample is true: non-zero and not NaN. Write comparisons with ``bool``
  (``ratio < bool 0.01`` gives 1 or 0); a filtering comparison keeps the sample's own value,
  and a value of 0 reads as false.

A scalar expression is evaluated the same way (Prometheus returns it as one series). A
Prometheus that does not answer, answers with another status than 200 or with ``"status":
"error"``, or an expression it refuses, gives a reading that is not held and says why; a gate
never proceeds on the absence of evidence. :meth:`PromQLGate.validate` runs the expression once,
for the CLI to refuse a bad expression or an unreachable Prometheus before anything is written.

Pure interpretation (:func:`parse_response`, :func:`judge_matrix`, :func:`judge_instant`) is
kept apart from the one HTTP call (:meth:`PromQLGate._query`), so it is unit-tested on JSON.
Every request has a timeout; nothing here writes anything.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
import urllib.parse
from collections.abc import Callable, Mapping
from typing import Any

from agn.yamltext import show
from xtask.drain.gates import client
from xtask.drain.gates.base import Gate, GateReading, GateSetup
from xtask.drain.gates.flags import PROMQL_FLAGS
from xtask.errors import ExitCode, UsageError, XtaskError
from xtask.record import Record

NAME = "promql"
THRESHOLD = "non-empty and true over the soak"
DEFAULT_STEP = 1.0  # seconds: the scrape interval of the env's Prometheus
MAX_POINTS = 10_000  # Prometheus refuses a range query of more than 11,000 points per series
DEFAULT_TIMEOUT = 10.0
ANSWER_LIMIT = 64 * 1024 * 1024  # a soak's range query is KiB to a few MiB; more is not an answer to read


class PromQLError(UsageError):
    """An expression the Prometheus refuses (exit 2): named with Prometheus' own words."""


class PrometheusUnavailable(XtaskError):
    """The Prometheus does not answer, or not as Prometheus does (exit 1)."""

    exit_code = ExitCode.ERROR


def check_url(url: str) -> str:
    """``url`` without a trailing slash, if it is an http(s) URL with a host; else a usage error naming it."""
    try:
        parts = urllib.parse.urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError as exc:
        raise UsageError(f"--prometheus {url!r}: not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not host:
        raise UsageError(
            f"--prometheus {url!r}: not an http(s) URL with a host", hint="for example http://127.0.0.1:9090"
        )
    if parts.query or parts.fragment:
        raise UsageError(f"--prometheus {url!r}: a Prometheus URL has no query or fragment")
    return url.rstrip("/")


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Verdict(Record):
    held: bool
    value: float | None
    detail: str


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Refusal(Record):
    """Why a response carries no result: ``bad_expression`` when Prometheus refused the query itself."""

    why: str
    bad_expression: bool = False


def parse_response(status: int, body: bytes) -> dict[str, Any] | Refusal:
    """The ``data`` of a successful query response, or why there is none."""
    try:
        doc = json.loads(body)
    except ValueError:
        text = body[:200].decode(errors="replace").strip()
        return Refusal(f"Prometheus answered {status} with a body that is not JSON: {text!r}")
    if not isinstance(doc, dict):
        return Refusal(f"Prometheus answered {status} with JSON that is not an object")
    if status != 200 or doc.get("status") != "success":
        kind, error = doc.get("errorType") or "error", doc.get("error") or "no error message"
        # 400 bad_data: the expression or a parameter; 422 execution: the query could not be evaluated.
        return Refusal(f"Prometheus answered {status}: {kind}: {error}", bad_expression=kind == "bad_data")
    data = doc.get("data")
    if not isinstance(data, dict) or "resultType" not in data or "result" not in data:
        return Refusal(f"Prometheus answered {status} without data.resultType and data.result")
    return data


def _number(raw: Any) -> float:
    try:
        return float(raw)
    except (TypeError, ValueError):
        return math.nan


def truthy(value: float) -> bool:
    """A sample is true when it is neither zero nor NaN."""
    return not math.isnan(value) and value != 0


def series_name(metric: dict[str, str]) -> str:
    """``name{label="value", ...}`` as PromQL writes a series; ``{}`` for one without labels."""
    name = metric.get("__name__", "")
    labels = ", ".join(f'{k}="{v}"' for k, v in sorted(metric.items()) if k != "__name__")
    return f"{name}{{{labels}}}"


def judge_matrix(data: dict[str, Any], *, start: float, end: float, step: float) -> Verdict:
    """A range query's result over [start, end] at ``step``: held when every evaluation has a
    sample and every sample is true (module docstring)."""
    if data.get("resultType") != "matrix":
        return Verdict(False, None, f"a range query returned a {data.get('resultType')}, not a matrix")
    result = data.get("result") or []
    if not result:
        return Verdict(False, None, "the result is empty over the whole soak")
    evaluations = int(math.floor((end - start) / step + 1e-9)) + 1
    covered: set[int] = set()
    last: tuple[float, float] | None = None  # (time, value) of the newest sample
    for series in sorted(result, key=lambda s: series_name(s.get("metric") or {})):
        for t, raw in series.get("values") or []:
            at, value = float(t), _number(raw)
            if not truthy(value):
                return Verdict(
                    False,
                    value,
                    f"{series_name(series.get('metric') or {})} is {raw} at {_when(at)} ({at - start:.0f}s into the soak)",
                )
            covered.add(round((at - start) / step))
            if last is None or at > last[0]:
                last = (at, value)
    missing = sorted(set(range(evaluations)) - covered)
    if missing:
        at = start + missing[0] * step
        return Verdict(
            False,
            None,
            f"the result is empty at {_when(at)} ({at - start:.0f}s into the soak; "
            f"empty at {len(missing)} of {evaluations} evaluations)",
        )
    assert last is not None
    return Verdict(True, last[1], f"{len(result)} series true at each of {evaluations} evaluations every {step:g}s")


def judge_instant(data: dict[str, Any]) -> Verdict:
    """An instant query's result: non-empty, and every sample (or the scalar) true."""
    kind, result = data.get("resultType"), data.get("result")
    if kind == "scalar":
        value = _number((result or [None, None])[1])
        return Verdict(truthy(value), value, f"scalar {value:g}" + ("" if truthy(value) else ": false"))
    if kind != "vector":
        return Verdict(False, None, f"the expression gives a {kind}; use one that gives a vector or a scalar")
    if not result:
        return Verdict(False, None, "the result is empty")
    for sample in sorted(result, key=lambda s: series_name(s.get("metric") or {})):
        raw = (sample.get("value") or [None, None])[1]
        value = _number(raw)
        if not truthy(value):
            return Verdict(False, value, f"{series_name(sample.get('metric') or {})} is {raw}: false")
    first = _number(result[0]["value"][1])
    return Verdict(True, first, f"{len(result)} series, every one true")


def soak_range(begun: float | None, now: float, *, window_seconds: float, step: float) -> tuple[float, float, float]:
    """(start, end, step) of the soak's range query, rounded to the millisecond as sent (Prometheus
    evaluates at start + k * step): from ``begun`` (else ``window_seconds`` before ``now``) to
    ``now``, the step widened so the query stays within :data:`MAX_POINTS` evaluations."""
    end = round(now, 3)
    start = min(round(begun if begun is not None else now - window_seconds, 3), end)
    return start, end, round(max(step, (end - start) / MAX_POINTS), 3)


def _when(at: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(at)) + "Z"


class PromQLGate:
    """``--gate-promql EXPR --prometheus URL``: see the module docstring."""

    name = NAME

    def __init__(
        self,
        url: str,
        expr: str,
        *,
        timeout: float = DEFAULT_TIMEOUT,
        step: float = DEFAULT_STEP,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if not expr.strip():
            raise UsageError("--gate-promql: the expression is empty")
        if not (math.isfinite(timeout) and timeout > 0) or not (math.isfinite(step) and step > 0):
            raise ValueError("timeout and step must be positive seconds")
        self.url = check_url(url)
        self.expr = expr
        self.timeout = timeout
        self.step = step
        self._clock = clock
        self._begun: float | None = None

    def _query(self, path: str, params: dict[str, str]) -> dict[str, Any] | Refusal:
        """One POST to the HTTP API (form-encoded, so a long expression fits), within ``timeout``."""
        fields = {**params, "timeout": f"{self.timeout:g}s"}
        try:
            answer = client.post_form(f"{self.url}{path}", fields, timeout=self.timeout, limit=ANSWER_LIMIT)
        except client.Unanswered as exc:
            return Refusal(f"Prometheus at {self.url} does not answer: {exc}")
        if answer.truncated:
            return Refusal(f"Prometheus at {self.url} answered more than {ANSWER_LIMIT} bytes")
        return parse_response(answer.status, answer.body)

    def validate(self) -> GateReading:
        """Run the expression once, now. Raises :class:`PromQLError` for an expression Prometheus
        refuses and :class:`PrometheusUnavailable` when it does not answer as Prometheus; else
        the reading (an empty or false result now is no error: the soak may differ)."""
        data = self._query("/api/v1/query", {"query": self.expr, "time": f"{self._clock():.3f}"})
        if isinstance(data, Refusal):
            if data.bad_expression:
                raise PromQLError(f"--gate-promql {self.expr!r}: {data.why}")
            raise PrometheusUnavailable(data.why, hint=f"is a Prometheus serving {self.url}?")
        verdict = judge_instant(data)
        return self._reading(verdict)

    def begin(self) -> None:
        self._begun = self._clock()

    def read(self, window_seconds: float) -> GateReading:
        """The verdict over the soak: from :meth:`begin` (else ``window_seconds`` ago) to now."""
        start, end, step = soak_range(self._begun, self._clock(), window_seconds=window_seconds, step=self.step)
        params = {"query": self.expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:.3f}"}
        data = self._query("/api/v1/query_range", params)
        if isinstance(data, Refusal):
            return self._reading(Verdict(False, None, data.why))
        return self._reading(judge_matrix(data, start=start, end=end, step=step))

    def _reading(self, verdict: Verdict) -> GateReading:
        return GateReading(
            gate=self.name,
            held=verdict.held,
            # NaN and infinities have no JSON form; the detail says what the value was.
            value=verdict.value if verdict.value is not None and math.isfinite(verdict.value) else None,
            threshold=THRESHOLD,
            detail=f"{self.expr}: {verdict.detail}",
        )


# -- the gate's flags, their check, and the gate (xtask.drain.gates.base.GateModule) ---------------
FLAGS = PROMQL_FLAGS


def check(options: Mapping[str, Any], *, consumers: tuple[str, ...], soak: float | None) -> None:
    expr, url = options.get("gate_promql"), options.get("prometheus")
    if (expr is None) != (url is None):
        raise UsageError("--gate-promql and --prometheus go together: the expression and the Prometheus to ask")
    if expr is None:
        return
    if not expr.strip():
        raise UsageError("--gate-promql: the expression is empty")
    if not expr.isprintable():
        raise UsageError(f"--gate-promql {show(expr)}: has characters that are not printable")
    check_url(str(url))
    if soak == 0:
        raise UsageError("--gate-promql is read over each soak: it needs a --soak above 0")


def make(setup: GateSetup) -> tuple[Gate | None, list[str]]:
    """The PromQL gate, its expression validated by the Prometheus now (a bad one is a usage
    error, an unreachable Prometheus a refusal), before any write."""
    expr, url = setup.options.get("gate_promql"), setup.options.get("prometheus")
    if expr is None or url is None:
        return None, []
    gate = PromQLGate(url, expr)
    try:
        gate.validate()
    except PrometheusUnavailable as exc:
        return None, [f"--prometheus {url}: {exc}"]
    return gate, []
