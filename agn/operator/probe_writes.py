"""The prober's writes to the API: provider status, and the probes heartbeat Lease.

A status write is a JSON merge patch on the status subresource (``InferenceProvider`` status
has no other writer); what was written is stored in the provider informer's store at once, so
a reconcile sees it without waiting for the watch. A failed write is remembered until the
provider's next successful one: the heartbeat must not vouch for a status that is not written
(:meth:`agn.operator.prober.Prober.vouching`). The heartbeat Lease (:mod:`.heartbeat`) is
renewed with the Lease as last written, read again when someone else wrote it in between.

Every write goes through :class:`.writes.LeaderWrites` (refused unless this process leads).
This module must not decide *what* to write or *when* (that is :mod:`.prober`'s and
:mod:`.provider_status`'s), and never writes provider spec.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from agn.kube import LEASES, PROVIDERS, Conflict, KubeError, NotFound
from agn.logs import JsonLog
from agn.objects import Obj
from agn.operator.heartbeat import HEARTBEAT_LEASE, heartbeat_body
from agn.operator.informer import Store
from agn.operator.provider_status import merge_patch, semantic_key
from agn.operator.writes import LeaderWrites, NotLeader


class ProbeWrites:
    """Writes provider status and renews the probes heartbeat for one namespace (thread-safe)."""

    def __init__(self, writes: LeaderWrites, namespace: str, *, providers: Store, log: JsonLog) -> None:
        self.writes = writes
        self.namespace = namespace
        self.providers = providers
        self._log = log
        self._lock = threading.Lock()
        self._unwritten: set[str] = set()  # providers whose last status write failed
        # The unix time of this process's last successful heartbeat renewal, and the Lease as
        # last written (None: read it first).
        self.heartbeat_at: float | None = None
        self._lease: Obj | None = None

    # -- provider status ----------------------------------------------------------------------
    def status(self, name: str, previous: Obj, desired: Obj) -> Obj | None:
        """Patch provider ``name``'s status from ``previous`` (as last written) to ``desired``;
        the status as written, or None when it was not (not leading, deleted, or failed)."""
        try:
            written = self.writes.merge_patch_status(
                PROVIDERS, self.namespace, name, {"status": merge_patch(previous, desired)}
            )
        except NotLeader:
            return None  # leadership ended during the probe; the next leader probes again
        except NotFound:
            return None  # deleted meanwhile; the informer will drop it
        except KubeError as exc:
            self._log.warning("provider status write failed", provider=name, error=str(exc), status=exc.status)
            with self._lock:
                self._unwritten.add(name)
            return None
        with self._lock:
            self._unwritten.discard(name)
        # The watch will deliver this too; storing it now lets a reconcile see it without waiting.
        self.providers.upsert(written)
        if semantic_key(previous) != semantic_key(desired):
            probe = desired["probe"]
            self._log.info(
                "provider status changed",
                provider=name,
                healthy=probe.get("healthy"),
                health_error=probe.get("healthError"),
                metrics_error=probe.get("metricsError"),
                load=desired.get("load"),
                conditions={c["type"]: c["status"] for c in desired["conditions"]},
            )
        return dict(written.get("status") or desired)

    def unwritten(self) -> int:
        """How many providers' last status write failed."""
        with self._lock:
            return len(self._unwritten)

    def keep_only(self, names: Iterable[str]) -> None:
        """Forget the failed writes of providers not in ``names`` (deleted ones; none: a new term)."""
        with self._lock:
            self._unwritten.intersection_update(names)

    # -- the probes heartbeat -----------------------------------------------------------------
    def heartbeat(self, identity: str, now: float) -> bool:
        """Renew the probes heartbeat Lease as ``identity`` with renew time ``now`` (unix
        seconds); whether it was written. The caller decides whether it may vouch."""
        try:
            for _ in range(2):
                try:
                    if self._lease is None:
                        try:
                            self._lease = self.writes.read(LEASES, self.namespace, HEARTBEAT_LEASE)
                        except NotFound:
                            self._lease = self.writes.create(LEASES, self.namespace, heartbeat_body(identity, now))
                            break
                    self._lease = self.writes.replace(
                        LEASES, self.namespace, HEARTBEAT_LEASE, heartbeat_body(identity, now, current=self._lease)
                    )
                    break
                except (Conflict, NotFound):
                    self._lease = None  # someone else wrote it (an earlier leader): read it again
            else:
                return False
        except NotLeader:
            return False
        except KubeError as exc:
            self._lease = None
            self._log.warning("probes heartbeat write failed", error=str(exc), status=exc.status)
            return False
        self.heartbeat_at = now
        return True
