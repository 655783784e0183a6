"""The operator's Kubernetes Events: what it published, and which providers a hard failure keeps out.

- ``OverlayPublished`` (Normal) on the InferenceConsumer, each time the operator publishes an
  overlay whose admission changed, naming the revision and what changed.
- ``ProviderExcluded`` (Warning) on the InferenceProvider when a hard failure (invalid
  endpoint, unhealthy, stale metrics, untrusted endpoint) starts keeping it out of a
  network's overlays, or the failure changes; ``ProviderEligible`` (Normal) when it ends.

Events mark *transitions*, never states: a publication happens only when the digest changed,
and :class:`HardFailures` remembers per (network, provider) what was last reported, so a
provider that stays unhealthy through a hundred probes and resyncs yields one Event. That
memory belongs to a leadership term, like the rest of the operator's memory: a new leader
reports each provider it finds failing once. A provider never probed yet is not reported
(it is not failing; nobody has looked).

The decisions are pure (:class:`HardFailures`, :func:`failure_detail`; an ``OverlayPublished``
note is :func:`agn.operator.diffing.note_for`, read from the one diff the controller computes);
:class:`EventSink` sends Events from its own thread through :class:`.writes.LeaderWrites`, so a
slow API server never holds up a reconcile, and a follower records nothing.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from agn.events import NORMAL, WARNING, Regarding, Reporter, event_body, event_name
from agn.kube import KubeError
from agn.logs import JsonLog
from agn.model import Exclusion, ProviderView, endpoint_valid
from agn.operator.pruning import prune
from agn.operator.verdicts import NetworkVerdict
from agn.operator.writes import LeaderWrites, NotLeader

CONTROLLER = "agn.dev/operator"
OVERLAY_PUBLISHED = "OverlayPublished"
PROVIDER_EXCLUDED = "ProviderExcluded"
PROVIDER_ELIGIBLE = "ProviderEligible"
QUEUE_LIMIT = 1000  # Events waiting to be sent; beyond it they are dropped (and logged)
REQUEST_TIMEOUT = 5.0


# -- what to say (pure) ----------------------------------------------------------------------
def failure_detail(failure: Exclusion, provider: Mapping[str, Any], *, network: str, max_age: int) -> str:
    """What an operator (or ``kubectl describe``) needs to know about a hard failure."""
    status = provider.get("status") or {}
    probe = status.get("probe") or {}
    endpoint = (provider.get("spec") or {}).get("endpoint", "")
    if failure is Exclusion.INVALID:
        return f"endpoint {endpoint!r} is not an http(s) URL with a host"
    if failure is Exclusion.UNAVAILABLE:
        return f"health check failed: {probe.get('healthError') or 'unhealthy'}"
    if failure is Exclusion.STALE:
        error = probe.get("metricsError")
        return f"no successful metrics scrape within {max_age}s" + (f": {error}" if error else "")
    if failure is Exclusion.UNTRUSTED:
        return f"endpoint {endpoint!r} is not allowed by network {network}"
    return failure.value


def observed(provider: ProviderView) -> bool:
    """Whether the operator has looked at the provider: probed, or with an endpoint it never
    dials (invalid). A valid endpoint not probed yet is neither failing nor healthy."""
    return provider.healthy is not None or not endpoint_valid(provider.endpoint)


@dataclasses.dataclass(frozen=True)
class Transition:
    network: str
    provider: str
    failure: Exclusion | None  # None: the failure ended


class HardFailures:
    """The last hard failure reported per (network, provider uid); says when to report again."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], tuple[str, Exclusion | None]] = {}
        self._versions: dict[str, int] = {}  # per network, the verdict version looked at last

    def transitions(
        self, judged: NetworkVerdict, provider: Callable[[str], Mapping[str, Any] | None]
    ) -> list[tuple[Transition, Mapping[str, Any]]]:
        """Each provider of the network whose hard failure began, changed or ended, with its
        object (``provider`` looks one up by name; a provider it does not have is skipped).

        Consumers of the same network share this memory, so each transition is found once;
        a verdict version already looked at has no transitions left to find."""
        network = judged.network.name
        if self._versions.get(network) == judged.version:
            return []
        self._versions[network] = judged.version
        out = []
        for view, failure in judged.selected:
            if not observed(view):
                continue  # not probed yet: not failing, just not looked at yet
            obj = provider(view.name)
            if obj is None:
                continue
            change = self.observe(network, view.name, obj["metadata"].get("uid", ""), failure)
            if change is not None:
                out.append((change, obj))
        return out

    def observe(self, network: str, provider: str, uid: str, failure: Exclusion | None) -> Transition | None:
        key = (network, provider)
        known = self._last.get(key)
        previous = known[1] if known is not None and known[0] == uid else None
        first = known is None or known[0] != uid
        self._last[key] = (uid, failure)
        if failure == previous and not first:
            return None
        if first and failure is None:
            return None  # healthy when first seen: nothing to report
        return Transition(network, provider, failure)

    def forget(self, live_providers: set[str], live_networks: set[str] | None = None) -> None:
        """Drop what is remembered about deleted providers (and deleted networks, if given)."""
        for key in [k for k in self._last if k[1] not in live_providers]:
            del self._last[key]
        if live_networks is not None:
            prune(self._versions, live_networks)

    def clear(self) -> None:
        self._last.clear()
        self._versions.clear()

    def remembered(self) -> set[str]:
        return {provider for _, provider in self._last}


# -- sending (I/O) -----------------------------------------------------------------------------
class EventSink:
    """Sends Events from one background thread; ``emit`` never blocks and never raises."""

    def __init__(
        self,
        writes: LeaderWrites,
        *,
        instance: str,
        log: JsonLog,
        stop: threading.Event,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._writes = writes
        self._instance = instance
        self._log = log
        self._stop = stop
        self._clock = clock
        self._queue: queue.Queue[dict[str, Any]] = queue.Queue(maxsize=QUEUE_LIMIT)
        self._thread = threading.Thread(target=self._run, name="events", daemon=True)
        self.sent = 0

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def emit(self, regarding: Regarding, *, reason: str, action: str, type_: str, note: str) -> None:
        now = self._clock()
        body = event_body(
            name=event_name(regarding.name, f"{time.time_ns():x}"),
            regarding=regarding,
            reason=reason,
            action=action,
            note=note,
            type_=type_,
            reporter=Reporter(CONTROLLER, self._instance),
            at=now,
        )
        try:
            self._queue.put_nowait(body)
        except queue.Full:
            self._log.warning("event dropped: too many unsent", reason=reason, regarding=regarding.name)

    def overlay_published(self, consumer: Mapping[str, Any], note: str) -> None:
        """``note``: :func:`agn.operator.diffing.note_for` (or :func:`~agn.operator.diffing.published_note`)."""
        regarding = dataclasses.replace(Regarding.of(consumer), kind="InferenceConsumer")
        self.emit(regarding, reason=OVERLAY_PUBLISHED, action="Publish", type_=NORMAL, note=note)

    def hard_failure(self, transition: Transition, provider: Mapping[str, Any], *, max_age: int) -> None:
        regarding = dataclasses.replace(Regarding.of(provider), kind="InferenceProvider")
        if transition.failure is None:
            self.emit(
                regarding,
                reason=PROVIDER_ELIGIBLE,
                action="Admit",
                type_=NORMAL,
                note=f"no hard failure any more; eligible for network {transition.network}'s overlays again",
            )
            return
        detail = failure_detail(transition.failure, provider, network=transition.network, max_age=max_age)
        self.emit(
            regarding,
            reason=PROVIDER_EXCLUDED,
            action="Exclude",
            type_=WARNING,
            note=f"excluded from network {transition.network}'s overlays ({transition.failure.value}): {detail}",
        )

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                body = self._queue.get(timeout=0.2)
            except queue.Empty:
                continue
            try:
                self._writes.create_event(body["metadata"]["namespace"], body, timeout=REQUEST_TIMEOUT)
                self.sent += 1
            except NotLeader:
                pass  # leadership ended; the next leader reports what it finds
            except KubeError as exc:
                self._log.warning(
                    "event not recorded", reason=body["reason"], regarding=body["regarding"]["name"], error=str(exc)
                )
