"""What the fleet benchmark reads about the bytes the operator writes, from three places that
must agree:

- the operator's own ``/metrics``: ``agn_operator_write_bytes_total{kind}`` (the bodies it sent,
  counted at its one write path; an operator from before #45 has none: ``None``);
- its log: every ``overlay published`` / ``overlay stored again`` line carries ``bytes_written``
  (one consumer's publication), read from the byte offset where a phase began;
- the kube-apiserver's own ``apiserver_request_body_size_bytes_sum`` per resource (only the
  operator writes overlays, so the overlay resources' sums are its bytes as the server received
  them; this works for the code before too).

Plain readers: no process is started or stopped here.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

OVERLAY_RESOURCES = ("routingoverlays", "routingoverlayshards")
OVERLAY_KINDS = ("index", "shard")
PUBLICATION_LINES = ("overlay published", "overlay stored again")


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    """Every sample ``name`` in Prometheus text, with its labels."""
    return [
        (dict(s.labels), s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    ]


def operator_overlay_bytes(text: str) -> float | None:
    """Index + shard bytes the operator counted; None when its /metrics has no such counter."""
    found = [v for labels, v in samples(text, "agn_operator_write_bytes_total") if labels.get("kind") in OVERLAY_KINDS]
    return sum(found) if found else None


def server_overlay_bytes(text: str) -> float:
    """Bytes of overlay (index and shard) request bodies the API server received, every verb."""
    return sum(
        v
        for labels, v in samples(text, "apiserver_request_body_size_bytes_sum")
        if labels.get("resource") in OVERLAY_RESOURCES
    )


@dataclass
class Publications:
    """One phase's publications, from the operator's log."""

    sizes: list[int] = field(default_factory=list)
    last_at: str = ""  # the ts of the last one

    @property
    def median(self) -> float | None:
        return statistics.median(self.sizes) if self.sizes else None

    @property
    def max(self) -> int | None:
        return max(self.sizes) if self.sizes else None


def publications(log: Path, start: int, end: int) -> Publications:
    """The publications logged between byte offsets ``start`` and ``end`` of the operator's log
    (lines without ``bytes_written`` — an operator from before #45 — count as none)."""
    out = Publications()
    with log.open("rb") as f:
        f.seek(start)
        for raw in f.read(max(0, end - start)).splitlines():
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            if isinstance(line, dict) and line.get("msg") in PUBLICATION_LINES and "bytes_written" in line:
                out.sizes.append(int(line["bytes_written"]))
                out.last_at = str(line.get("ts", ""))
    return out


@dataclass
class ByteReading:
    """The operator's and the API server's overlay bytes at one moment, and the log's length."""

    operator: float | None
    server: float
    log_offset: int


def reading(operator_metrics: Callable[[], str], server_metrics: Callable[[], str], log: Path) -> ByteReading:
    return ByteReading(
        operator_overlay_bytes(operator_metrics()),
        server_overlay_bytes(server_metrics()),
        log.stat().st_size if log.exists() else 0,
    )


@dataclass
class PhaseBytes:
    """What a phase wrote: the operator's count, the server's, and the publications' sizes."""

    operator: float | None
    server: float
    median: float | None
    max: int | None
    count: int

    @classmethod
    def between(cls, before: ByteReading, after: ByteReading, log: Path) -> PhaseBytes:
        pubs = publications(log, before.log_offset, after.log_offset) if log.exists() else Publications()
        op = None if before.operator is None or after.operator is None else after.operator - before.operator
        return cls(op, after.server - before.server, pubs.median, pubs.max, len(pubs.sizes))


def size(n: float | None) -> str:
    """Bytes as KiB below 10 MiB, else MiB; ``-`` when not known."""
    if n is None:
        return "-"
    return f"{n / 1024:.1f} KiB" if n < 10 * 1024 * 1024 else f"{n / (1024 * 1024):.1f} MiB"


def kib(n: float | None) -> str:
    return "-" if n is None else f"{n / 1024:.1f}"
