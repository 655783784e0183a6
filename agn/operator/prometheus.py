"""Reading provider load gauges from Prometheus text, with ``prometheus_client``'s parser.

Pure: text in, numbers out. An absent metric is reported as ``None`` — never as zero —
because "the provider does not export this" and "nothing is waiting" mean different things.

Samples are matched by their exact name. The parser follows the exposition format's typing
rules, so a provider that declares ``# TYPE agn_provider_waiting counter`` has its samples
read as ``agn_provider_waiting_total``: a counter is not a load gauge, and reads as absent.
``prometheus_client``'s parser is laxer than Prometheus' own about what follows a sample's
value and timestamp; anything it cannot read at all fails the whole scrape.
"""

from __future__ import annotations

import dataclasses
import math

from prometheus_client.parser import text_string_to_metric_families

RUNNING = "agn_provider_running"
WAITING = "agn_provider_waiting"


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


def parse_samples(text: str) -> list[Sample]:
    """Every sample in ``text``, in order. A line the parser cannot read fails the scrape."""
    try:
        return [
            Sample(s.name, tuple(s.labels.items()), float(s.value))
            for family in text_string_to_metric_families(text)
            for s in family.samples
        ]
    except (ValueError, IndexError, KeyError, TypeError) as exc:
        raise MetricsParseError(f"not Prometheus text format: {exc or type(exc).__name__}") from None


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
