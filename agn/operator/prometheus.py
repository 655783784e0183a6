"""Reading provider load gauges from Prometheus text, with ``prometheus_client``'s parser.

Pure: text in, numbers out. An absent metric is reported as ``None`` — never as zero —
because "the provider does not export this" and "nothing is waiting" mean different things.

Which names mean running, waiting and KV-cache usage depends on the exposition's format: AGN's
own, vLLM's, SGLang's, TGI's or llama.cpp's server's (:mod:`agn.engines`, docs/engines.md). The
format is pinned per provider (``spec.metrics.format``) or detected from the metric namespaces
the text carries; text that carries two engines' metrics is an error (:class:`MetricsFormatError`),
not a guess. Several series of one count are chosen per format (:func:`count_of`): those of
different data-parallel ranks or models are summed; schedulers that report the same batch
(SGLang's tensor, pipeline and expert ranks) are read once; a total published beside its split
(SGLang's ``priority=""`` beside each priority) is read, not its split again. The KV-cache usage
of several series is the fullest one's (a fraction of each rank's own cache: summing them would
pass 1). A gauge an engine renders only once set (TGI's) reads 0 when the scrape carries the
engine's other series: it was never set, nothing was ever queued or batched.

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

from agn.engines import AGN, AUTO, FORMAT_NAMES, FORMATS, Format, no_metrics_note

RUNNING = AGN.running
WAITING = AGN.waiting
NO_KNOWN_METRIC = "the scrape has no metric of a known format (a vLLM started with --disable-log-stats exports none)"


class MetricsParseError(ValueError):
    """The text is not valid Prometheus exposition format."""


class MetricsFormatError(MetricsParseError):
    """The text is valid, but whose load it reports is ambiguous: two engines' metrics in one
    exposition, or not the format the provider's spec pins."""


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
    kv_cache_usage: float | None = None  # a fraction, 1 is full
    format: str | None = None  # the format it was read as; None when no known metric was there
    note: str | None = None  # why the numbers are missing, for a person: a scrape without the engine's metrics


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


def count_of(samples: list[Sample], name: str, fmt: Format) -> float | None:
    """One count from the series of ``name`` as ``fmt`` publishes them; None when absent.

    The unlabelled sample, if any. Else: only the totals where ``fmt.total_label`` splits them
    (its empty value, or no such label, beside the split series); per scheduler the sum of what
    is left (the split, when no total is published); of the schedulers that differ only by
    ``fmt.replica_labels`` (one batch, reported by each rank) the largest; summed over the rest
    (data-parallel ranks, engines, models)."""
    matching = [s for s in samples if s.name == name]
    if not matching:
        return None
    plain = [s for s in matching if not s.labels]
    if plain:
        return plain[-1].value
    split = fmt.total_label
    if split is not None:
        totals = [s for s in matching if dict(s.labels).get(split, "") == ""]
        matching = totals or matching
    per_scheduler: dict[tuple, list[float]] = {}
    for s in matching:
        key = tuple(kv for kv in s.labels if kv[0] != split)
        per_scheduler.setdefault(key, []).append(s.value)
    per_batch: dict[tuple, float] = {}
    for key, values in per_scheduler.items():
        batch = tuple(kv for kv in key if kv[0] not in fmt.replica_labels)
        per_batch[batch] = max(per_batch.get(batch, -math.inf), math.fsum(values))
    return math.fsum(per_batch.values())


def fullest(samples: list[Sample], name: str) -> float | None:
    """The unlabelled sample of ``name``; else the largest of its labelled samples; else None."""
    matching = [s for s in samples if s.name == name]
    plain = [s for s in matching if not s.labels]
    if plain:
        return plain[-1].value
    return max((s.value for s in matching), default=None)


def _count(value: float | None) -> int | None:
    """A load count from a gauge value: a finite, non-negative number rounded; anything else is absent."""
    if value is None or not math.isfinite(value) or value < 0:
        return None
    return int(round(value))


def _fraction(value: float | None) -> float | None:
    """A usage fraction within 0 and 1; anything else (NaN, negative, above 1) is absent."""
    if value is None or not math.isfinite(value) or not 0 <= value <= 1:
        return None
    return value


def formats_present(samples: list[Sample]) -> list[str]:
    """The formats whose metric namespace some sample carries, sorted by name."""
    return sorted(f.name for f in FORMATS.values() if any(s.name.startswith(f.namespace) for s in samples))


def reading_format(samples: list[Sample], pinned: str = AUTO) -> Format | None:
    """The format to read ``samples`` as: the pinned one, or the one detected (None: no known
    metric at all). Raises :class:`MetricsFormatError` when that is ambiguous or contradicted."""
    present = formats_present(samples)
    if pinned != AUTO:
        fmt = FORMATS.get(pinned)
        if fmt is None:
            raise MetricsFormatError(f"spec.metrics.format {pinned!r} is not one of {', '.join(FORMAT_NAMES)}")
        if present and fmt.name not in present:
            raise MetricsFormatError(
                f"the metrics are {' and '.join(present)} metrics, not {fmt.name} as spec.metrics.format says"
            )
        return fmt  # another engine's metrics beside the pinned one's are not read
    if len(present) > 1:
        raise MetricsFormatError(f"the metrics mix formats ({', '.join(present)}); pin one in spec.metrics.format")
    return FORMATS[present[0]] if present else None


def load_reading(text: str, *, format: str = AUTO) -> LoadReading:
    """The provider's running and waiting counts and KV-cache usage, absent ones as None.

    ``format`` is ``spec.metrics.format``: ``auto`` or a name of :data:`agn.engines.FORMATS`."""
    samples = parse_samples(text)
    fmt = reading_format(samples, format)
    if fmt is None:
        return LoadReading(running=None, waiting=None, note=NO_KNOWN_METRIC)
    own = any(s.name.startswith(fmt.namespace) for s in samples)
    unset = 0.0 if fmt.lazy_gauges and own else None  # TGI: never set, so never queued or batched

    def count(name: str) -> int | None:
        value = count_of(samples, name, fmt)
        return _count(unset if value is None else value)

    kv = next((v for n in fmt.kv_names() if (v := fullest(samples, n)) is not None), None)
    return LoadReading(
        running=count(fmt.running),
        waiting=count(fmt.waiting),
        kv_cache_usage=_fraction(kv),
        format=fmt.name,
        note=None if own else no_metrics_note(fmt),
    )
