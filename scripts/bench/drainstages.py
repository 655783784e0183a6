"""Where one converged single drain's time goes, stage by stage (fleet.py's ``--stages``).

Stages, on this host's wall clock (every process here shares it):

1. **cli→patch**: the CLI starts → the provider's drain is seen on a watch of that provider
   (this bench's own watch, opened before the CLI starts: the operator's informer sees the
   same event at about the same moment);
2. **patch→reconcile**: → the first reconcile that publishes the change begins (the operator's
   ``overlay published`` line's ts minus its ``reconcile_seconds``): the work queue's wait;
3. **reconcile→published**: → the last consumer's index is written (the last such line): the
   network shard, every consumer's plan and index, one after another;
4. **published→serving**: → the last gateway serves it (``overlay_serving``); also the
   longest of a gateway's own fetch and assembly (``overlay_assembled``'s ``seconds``);
5. **serving→exit**: → the CLI has exited (its convergence waiter's two observations).
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from agn.kube import PROVIDERS, Kube, KubeError

STAGES = ("cli→patch", "patch→reconcile", "reconcile→published", "published→serving", "serving→exit")


def _ts(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _lines(path: Path, since: float) -> list[dict]:
    out = []
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return out
    for line in text.splitlines():
        try:
            rec = json.loads(line)
            if isinstance(rec, dict) and _ts(rec["ts"]) >= since:
                out.append(rec)
        except (ValueError, KeyError, TypeError):
            continue
    return out


class PatchWatch:
    """A watch of one provider, from its current resourceVersion: when its drain flag turns on."""

    def __init__(self, kube: Kube, namespace: str, name: str) -> None:
        self.seen_at: float | None = None
        self._kube, self._ns, self._name = kube, namespace, name
        _, self._rv = kube.list(PROVIDERS, namespace)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for _kind, obj in self._kube.watch(
                PROVIDERS,
                self._ns,
                resource_version=self._rv,
                timeout_seconds=60,
                field_selector=f"metadata.name={self._name}",
            ):
                policy = (obj.get("spec") or {}).get("trafficPolicy") or {}
                if policy.get("drain") is True:
                    self.seen_at = time.time()
                    return
        except KubeError:
            return

    def result(self, timeout: float = 5.0) -> float | None:
        self._thread.join(timeout)
        return self.seen_at


@dataclass
class Stages:
    seconds: dict[str, float] = field(default_factory=dict)
    assembly_max: float | None = None  # the longest one gateway spent from seeing the index to assembled
    reconciles: int = 0  # publishing reconciles in the drain's window


def stages(*, started: float, ended: float, patch_at: float | None, logs: Path, consumers: list[str]) -> Stages:
    """The drain's stages from the operator's and gateways' logs in ``logs`` (see the module)."""
    out = Stages()
    published = [
        r
        for r in _lines(logs / "operator.log", started)
        if r.get("msg") == "overlay published" and _ts(r["ts"]) <= ended
    ]
    out.reconciles = len(published)
    serving: list[float] = []
    assembled: list[float] = []
    for c in consumers:
        recs = [r for r in _lines(logs / f"gateway-{c}.log", started) if _ts(r["ts"]) <= ended]
        at = [_ts(r["ts"]) for r in recs if r.get("msg") == "overlay_serving"]
        if at:
            serving.append(max(at))
        assembled += [float(r["seconds"]) for r in recs if r.get("msg") == "overlay_assembled" and "seconds" in r]
    if patch_at is None or not published or not serving:
        return out
    begun = min(_ts(r["ts"]) - float(r.get("reconcile_seconds") or 0.0) for r in published)
    last_published = max(_ts(r["ts"]) for r in published)
    points = [started, patch_at, begun, last_published, max(serving), ended]
    out.seconds = {name: round(b - a, 3) for name, a, b in zip(STAGES, points[:-1], points[1:], strict=True)}
    out.assembly_max = max(assembled) if assembled else None
    return out


def median_stages(runs: list[dict[str, float]]) -> dict[str, float]:
    """Each stage's median over the drains that have it."""
    out = {}
    for name in STAGES:
        values = sorted(r[name] for r in runs if name in r)
        if values:
            mid = len(values) // 2
            out[name] = values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2
    return out
