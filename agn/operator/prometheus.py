"""Parsing the Prometheus text exposition format, just enough to read provider load gauges.

Pure: text in, numbers out. An absent metric is reported as ``None`` — never as zero —
because "the provider does not export this" and "nothing is waiting" mean different things.
"""

from __future__ import annotations

import dataclasses
import math
import re

RUNNING = "agn_provider_running"
WAITING = "agn_provider_waiting"

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')


class MetricsParseError(ValueError):
    """The text is not valid Prometheus exposition format."""


@dataclasses.dataclass(frozen=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float


@dataclasses.dataclass(frozen=True)
class LoadReading:
    """One scrape's load numbers; ``None`` where the provider did not export the metric."""

    running: int | None
    waiting: int | None


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def _parse_labels(text: str, lineno: int) -> tuple[tuple[str, str], ...]:
    labels = []
    pos = 0
    while pos < len(text):
        m = _LABEL.match(text, pos)
        if not m:
            raise MetricsParseError(f"line {lineno}: malformed labels {{{text}}}")
        labels.append((m.group(1), _unescape(m.group(2))))
        pos = m.end()
    return tuple(labels)


def _parse_value(token: str, lineno: int) -> float:
    try:
        return float(token)  # accepts NaN, +Inf, -Inf as the format does
    except ValueError:
        raise MetricsParseError(f"line {lineno}: bad sample value {token!r}") from None


def parse_samples(text: str) -> list[Sample]:
    """Every sample in ``text``. Comments and blank lines are skipped; a malformed line fails the scrape."""
    samples = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _NAME.match(line)
        if not m:
            raise MetricsParseError(f"line {lineno}: no metric name in {raw!r}")
        name, rest = m.group(0), line[m.end() :]
        labels: tuple[tuple[str, str], ...] = ()
        if rest.startswith("{"):
            close = rest.rfind("}")
            if close < 0:
                raise MetricsParseError(f"line {lineno}: unterminated labels")
            labels = _parse_labels(rest[1:close], lineno)
            rest = rest[close + 1 :]
        tokens = rest.split()
        if not tokens or len(tokens) > 2 or (rest and not rest[0].isspace()):
            raise MetricsParseError(f"line {lineno}: expected 'name[{{labels}}] value [timestamp]'")
        samples.append(Sample(name, labels, _parse_value(tokens[0], lineno)))
    return samples


def gauge(samples: list[Sample], name: str) -> float | None:
    """The unlabelled sample of ``name``; else the sum of its labelled samples; else None (absent)."""
    matching = [s for s in samples if s.name == name]
    if not matching:
        return None
    plain = [s for s in matching if not s.labels]
    if plain:
        return plain[-1].value
    return math.fsum(s.value for s in matching)


def _count(value: float | None) -> int | None:
    """A load count from a gauge value: a finite, non-negative number rounded; anything else is absent."""
    if value is None or not math.isfinite(value) or value < 0:
        return None
    return int(round(value))


def load_reading(text: str) -> LoadReading:
    """The provider's ``agn_provider_running`` and ``agn_provider_waiting``, absent ones as None."""
    samples = parse_samples(text)
    return LoadReading(running=_count(gauge(samples, RUNNING)), waiting=_count(gauge(samples, WAITING)))
