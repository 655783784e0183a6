"""What one probe's outcome does: the prober's memory of each provider, its re-check, and the
status write the outcome calls for.

The prober (:mod:`.prober`) decides *when* a provider is probed and runs the probe; this module
takes what the probe found. Per provider it keeps a :class:`.provider_status.ProviderMemory`
(its last written status, the status after its last probe, its consecutive failures), decides
how soon a provider whose probe failed is probed again (:mod:`.schedule`'s re-checks; the down
providers' re-checks share a bounded part of the slots), what status the outcome means and
whether that is news (:mod:`.provider_status`), and hands back the write (:mod:`.probe_writes`)
for the prober to run off its event loop. A probe counts for the probes heartbeat's
:meth:`ProbeRecorder.watermark` only once the status it called for is written.

What is remembered of a provider is forgotten when it is deleted (:meth:`ProbeRecorder.keep_only`,
:meth:`ProbeRecorder.forget`) and all of it when a leadership term begins
(:meth:`ProbeRecorder.clear`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence, Set

from agn.model import NetworkView
from agn.objects import Obj, drain_of, max_concurrent_of, network_view
from agn.operator.informer import Store
from agn.operator.metrics import OperatorMetrics
from agn.operator.probe_writes import ProbeWrites
from agn.operator.provider_status import (
    ProbeOutcome,
    ProviderMemory,
    metrics_max_age,
    next_status,
    published,
    refresh_seconds,
    selecting_networks,
    should_write,
    tolerated,
)
from agn.operator.pruning import prune
from agn.operator.schedule import DOWN, SUSPECT, down_recheck, fast_recheck, probe_interval, recheck_after_failure
from agn.operator.settings import Settings


class ProbeRecorder:
    """Takes each probe's outcome into its provider's memory and decides the status write.

    ``memory`` and ``down`` (the providers whose last probe found them unavailable) are read
    under this recorder's own lock; a probe's :class:`.provider_status.ProviderMemory` is changed
    only by that provider's one running probe.
    """

    def __init__(
        self,
        writes: ProbeWrites,
        *,
        settings: Settings,
        providers: Store,
        networks: Store,
        metrics: OperatorMetrics,
    ) -> None:
        self.writes = writes
        self.settings = settings
        self.providers = providers
        self.networks = networks
        self.metrics = metrics
        self._lock = threading.Lock()
        self.memory: dict[str, ProviderMemory] = {}
        self.down: set[str] = set()  # providers whose last probe found them unavailable (down re-checks)

    def remember(self, obj: Obj) -> ProviderMemory:
        """The memory of provider ``obj`` (a new one for a provider not probed in this term, or
        recreated under its name); kept only while the provider exists."""
        meta = obj["metadata"]
        with self._lock:
            mem = self.memory.get(meta["name"])
            if mem is None or mem.uid != meta.get("uid"):
                mem = ProviderMemory.of(obj)
                if meta["name"] in self.providers:
                    # Not for a provider deleted meanwhile: ticks forget only on membership changes.
                    self.memory[meta["name"]] = mem
            return mem

    def again_in(self, name: str) -> float | None:
        """In how many seconds provider ``name`` is re-checked after its last probe (None: at its interval)."""
        with self._lock:
            mem = self.memory.get(name)
        return None if mem is None else mem.recheck_in

    def keep_only(self, names: Set[str]) -> None:
        """Forget every provider not in ``names`` (the providers that exist)."""
        with self._lock:
            prune(self.memory, names)
            self.down &= names
        self.writes.keep_only(names)

    def forget(self, name: str) -> None:
        """Forget provider ``name``, deleted while its probe ran."""
        with self._lock:
            self.memory.pop(name, None)
            self.down.discard(name)

    def clear(self) -> None:
        """Forget every provider's memory: a new leadership term begins (another leader may have
        written in between)."""
        with self._lock:
            self.memory.clear()
        self.writes.keep_only(())

    def known(self) -> set[str]:
        """The providers this recorder remembers."""
        with self._lock:
            return set(self.memory)

    def watermark(self, now: float) -> float:
        """The time every provider probed in this term has been probed since (unix seconds):
        the start of the least recent last probe whose status write (if it called for one) is
        done, so every change of meaning a probe since then saw is in the API. A prober that falls behind moves it less, so
        what the heartbeat vouches for ages as the probes do, never more."""
        with self._lock:
            times = [m.probed_at for m in self.memory.values() if m.probed_at is not None]
        return min(times, default=now)

    def record(self, obj: Obj, endpoint: str, outcome: ProbeOutcome, *, seconds: float) -> Callable[[], None] | None:
        """Take one probe's outcome into the provider's memory; the status write it calls for
        (to run off the event loop), or None when the status is to stay as written."""
        meta = obj["metadata"]
        name = meta["name"]
        labels = meta.get("labels") or {}
        networks = selecting_networks(labels, [network_view(n) for n in self.networks.peek_all()])
        self.metrics.probed(
            name,
            seconds=seconds,
            health_failed=outcome.healthy is not True,
            metrics_failed=not outcome.metrics_ok,
        )
        mem = self.remember(obj)
        previous = mem.current if mem.current is not None else mem.status
        mem.failures = 0 if outcome.healthy is not False else mem.failures + 1
        was_healthy = (previous.get("probe") or {}).get("healthy") is True
        mem.recheck_in = self._recheck_in(
            name, labels, networks, outcome, failures=mem.failures, was_healthy=was_healthy
        )
        outcome = tolerated(
            outcome,
            failures=mem.failures,
            threshold=self.settings.probe_failure_threshold,
            previously_healthy=was_healthy,
        )
        # Only a drained provider's load is published (what `provider-drain --wait-idle` waits
        # on), and that of a provider declaring spec.capacity.maxConcurrent (what the drain's
        # capacity guard weighs); every other provider's readings stay here (agn.operator.heartbeat).
        desired = next_status(
            previous,
            outcome,
            uid=meta.get("uid", ""),
            generation=meta.get("generation"),
            endpoint=endpoint,
            networks=networks,
        )
        mem.current = desired
        refresh = self.settings.status_refresh
        desired = published(
            desired, load=refresh or drain_of(obj) or max_concurrent_of(obj.get("spec") or {}) is not None
        )
        now = time.time()
        if not should_write(
            mem.status,
            desired,
            last_write_at=mem.written_at,
            now=now,
            refresh=refresh_seconds(metrics_max_age(networks)) if refresh else None,
        ):
            mem.probed_at = outcome.observed_at
            return None
        return lambda: self._write(name, mem, desired, now, probed_at=outcome.observed_at)

    def _recheck_in(
        self,
        name: str,
        labels: Mapping[str, str],
        networks: Sequence[NetworkView],
        outcome: ProbeOutcome,
        *,
        failures: int,
        was_healthy: bool,
    ) -> float | None:
        """In how many seconds a provider whose probe failed is probed again (None: at its
        interval, as usual); keeps the set of down providers, whose re-checks share the slots."""
        settings = self.settings
        recheck = recheck_after_failure(
            outcome.healthy, was_healthy=was_healthy, failures=failures, threshold=settings.probe_failure_threshold
        )
        with self._lock:  # down providers' re-checks share a bounded part of the slots (down_recheck)
            if recheck == DOWN and name in self.providers:
                self.down.add(name)
            else:
                self.down.discard(name)
            providers_down = len(self.down)
        if recheck is None:
            return None
        every = probe_interval(labels, networks, default=settings.probe_interval)
        if recheck == SUSPECT:
            return fast_recheck(every, fast=settings.probe_fast_interval)
        return down_recheck(
            every,
            down=settings.probe_down_interval,
            providers_down=providers_down,
            concurrency=settings.probe_concurrency,
            timeout=settings.probe_timeout,
        )

    def _write(self, name: str, mem: ProviderMemory, desired: Obj, now: float, *, probed_at: float) -> None:
        """Write the status one probe called for; only then does that probe count for the
        heartbeat's watermark (a renewal vouches that every probe since it is *written*, not
        merely done). A failed write holds the heartbeat back instead (the prober's ``vouching``)."""
        try:
            written = self.writes.status(name, mem.status, desired)
            if written is not None:
                mem.status = written
                mem.written_at = now
        finally:
            mem.probed_at = probed_at
