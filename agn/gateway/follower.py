"""Follows this consumer's RoutingOverlay and moves it into the routing table.

List + watch by name through the shared loop (:func:`agn.watching.follow`: re-watch when the
server ends a watch, re-list on 410 Gone and, with capped backoff, after errors). What is
watched is the overlay's *index* (see :mod:`agn.shards`): either an inline overlay, which
carries its candidates itself, or an index naming the ``RoutingOverlayShard`` objects that
hold them. For a sharded index the follower first gets every shard it names: a shard already
held at the digest the index gives it is reused, any other is fetched by name (a GET by name
stays within RBAC that lists only this consumer's and its network's shard names;
:mod:`agn.gateway.shard_fetch`). An index in the network form (:mod:`agn.netshards`) names its
network's shards, shared with the network's other consumers, and the candidate ids this consumer
does not get; they are left out and the result checked against the index's digest. Until every shard is in hand at
the index's digest (the operator writes shards first and the index last, so this is a short
race), the index is *pending*: nothing is accepted, the current table keeps serving,
``overlay_shards_pending`` is logged and a retry thread tries again with capped backoff (0.1 s
doubling to 2 s) until the shards match or a newer index supersedes it; after a few seconds the
wait is said in ``status.message``, and a Forbidden GET is reported there at once. So no table
ever mixes two revisions.

The work per revision follows the change, not the overlay's size (at 5,000 candidates a drain
changes one shard of 16): the index is checked on its own before any GET
(:func:`~agn.gateway.validation.validate_index`); a shard is validated and parsed into
candidates once, when it is fetched at the index's digest
(:func:`~agn.gateway.validation.parse_shard`), and held with its parsed candidates, keyed by
name, digest and shard count; a new index then costs the parse of its changed shards plus
C-level joining of every held shard's candidates
(:func:`~agn.gateway.validation.assemble_overlay`). An invalid shard rejects the whole index,
naming the shard and why, like an invalid inline overlay.

Each new overlay content (inline, or assembled) is taken into service whole, or rejected, in
the fixed order of :mod:`agn.gateway.acceptance` (validate, report ``acceptedRevision``, swap
it into the routing table, report ``servingRevision``).

The overlay may not exist yet (the gateway simply waits for it) or may be deleted (the
gateway keeps serving the last accepted one and says so in ``status.message``).
This module must not write anything but this consumer's status (through
:class:`~agn.gateway.status_writer.StatusWriter`) and must not make routing decisions.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections.abc import Mapping
from typing import Any

from agn.gateway.acceptance import OverlayAcceptance
from agn.gateway.shard_fetch import Fetched, HeldShard, fetch_shards, holds, not_in_hand
from agn.gateway.status_writer import StatusWriter
from agn.gateway.table import RoutingTable
from agn.gateway.validation import InvalidOverlay, ShardedIndex, assemble_overlay, validate_index
from agn.kube import OVERLAYS, Forbidden, Gone, Kube, KubeError
from agn.logs import JsonLog
from agn.shards import Incomplete, is_sharded
from agn.watching import FollowOptions, WatchHealth, capped_backoff, follow_resource

INITIAL_BACKOFF = 0.5
MAX_BACKOFF = 10.0
SHARD_RETRY_INITIAL = 0.1
SHARD_RETRY_MAX = 2.0

PENDING_REPORT_AFTER = 3.0  # seconds an index may wait for its shards before status.message says so
ABSENT = object()  # the overlay does not exist


@dataclasses.dataclass
class _Pending:
    """A sharded index whose shards are not all in hand yet."""

    index: Mapping[str, Any]
    checked: ShardedIndex
    since: float  # monotonic
    attempts: int = 0
    busy: bool = False  # an attempt (its GETs) is under way: no second one starts meanwhile
    logged: Any = None  # what was last logged as missing (log again only when it changes)
    reported: Any = None  # what was last put in status.message


@dataclasses.dataclass(frozen=True, kw_only=True)
class FollowerTimings:
    """The follower's time bounds (seconds); the defaults are the gateway's, tests shorten them.

    ``watch_timeout_seconds``: the server-side end of each overlay watch (the loop resumes it);
    ``accept_write_timeout``: how long serving a new overlay waits for its ``acceptedRevision``
    write (it is served anyway after it); ``pending_report_after``: how long an index may wait
    for its shards before ``status.message`` says so."""

    watch_timeout_seconds: int = 30
    accept_write_timeout: float = 5.0
    pending_report_after: float = PENDING_REPORT_AFTER


class OverlayFollower:
    """Follows one consumer's overlay (index and shards) and serves each valid revision; see the module."""

    def __init__(
        self,
        kube: Kube,
        *,
        namespace: str,
        consumer: str,
        table: RoutingTable,
        status: StatusWriter,
        log: JsonLog,
        stop: threading.Event,
        timings: FollowerTimings = FollowerTimings(),
    ) -> None:
        self._kube = kube
        self._namespace = namespace
        self._consumer = consumer
        self._table = table
        self._status = status
        self._log = log
        self._stop = stop
        self._watch_timeout = timings.watch_timeout_seconds
        self._last_seen: Any = None  # canonical form of the last spec handled (or ABSENT)
        self.health = WatchHealth("routingoverlays")
        # Each whole revision found is accepted and served, or rejected, there.
        self._acceptance = OverlayAcceptance(
            consumer=consumer, table=table, status=status, log=log, accept_write_timeout=timings.accept_write_timeout
        )
        self._pending_report_after = timings.pending_report_after
        # One lock orders everything that decides what is served: the watch thread's new
        # indexes and the retry thread's attempts (never held during a shard GET).
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._pending: _Pending | None = None
        self._held: dict[str, HeldShard] = {}  # parsed shards of the last index(es), by name
        self.shard_gets = 0  # shard GETs made (for metrics: a drain should cost one)
        self.shard_parses = 0  # shards validated and parsed (a drain should cost one)

    # -- the watch loop -----------------------------------------------------------------------
    def run(self) -> None:
        """Thread target: follow the overlay until ``stop`` is set (with the shard retry thread)."""
        retry = threading.Thread(target=self._retry_loop, name="shard-retry", daemon=True)
        retry.start()
        try:
            self._follow()
        finally:
            with self._lock:
                self._wake.notify_all()
            retry.join(timeout=5)

    def _follow(self) -> None:
        # Listing and watching by name keeps the gateway within RBAC that names only its own overlay.
        by_name = f"metadata.name={self._consumer}"
        follow_resource(
            self._kube,
            OVERLAYS,
            self._namespace,
            on_snapshot=self._snapshot,
            on_event=self._event,
            stop=self._stop,
            options=FollowOptions(
                field_selector=by_name,
                watch_timeout=self._watch_timeout,
                backoff=capped_backoff(INITIAL_BACKOFF, MAX_BACKOFF),
                on_error=self._log_error,
                health=self.health,
            ),
        )

    def _log_error(self, exc: Exception, delay: float) -> None:
        if isinstance(exc, Gone):
            self._log.info("watch_expired_relisting")
        elif isinstance(exc, KubeError):
            self._log.warning("overlay_follow_error", error=str(exc), status=exc.status, retry_in=delay)
        else:
            self._log.error("overlay_follow_crash", error=repr(exc), retry_in=delay)

    def _snapshot(self, items: list[dict]) -> None:
        self.observe(next((o for o in items if o.get("metadata", {}).get("name") == self._consumer), None))

    def _event(self, kind: str, obj: dict) -> None:
        if obj.get("metadata", {}).get("name") == self._consumer:
            self.observe(None if kind == "DELETED" else obj)

    # -- handling one observation ---------------------------------------------------------------
    def observe(self, obj: Mapping[str, Any] | None) -> None:
        """Handle the overlay index as it now is (None: it does not exist).

        Runs in the watch thread. A sharded index is tried once here (shard GETs included); if
        its shards are not all in hand it becomes *pending* and the retry thread takes over."""
        with self._lock:
            if obj is None:
                if self._last_seen is not ABSENT:
                    self._last_seen = ABSENT
                    self._supersede()
                    serving = self._table.serving
                    self._log.info("overlay_absent", serving_revision=serving.revision if serving else None)
                    if serving is not None:
                        self._status.submit(
                            {
                                "message": f"overlay {self._consumer} not found; still serving revision {serving.revision}"
                            }
                        )
                return
            spec = obj.get("spec")
            seen = json.dumps(spec, sort_keys=True, default=str)
            if seen == self._last_seen:
                return  # metadata-only change, or a re-list of what is already handled
            self._last_seen = seen
            self._supersede()
            if not (isinstance(spec, Mapping) and is_sharded(spec)):
                self._acceptance.take_inline(spec)
                return
            try:
                checked = validate_index(spec, consumer=self._consumer)
            except InvalidOverlay as exc:
                self._acceptance.reject(spec, exc)
                return
            self._pending = _Pending(spec, checked, time.monotonic())
            pending = self._pending
        self._attempt(pending)

    def _supersede(self) -> None:
        """A newer index (or its deletion) replaces whatever index was pending. Under the lock."""
        if self._pending is not None:
            self._log.info("overlay_shards_superseded", revision=self._pending.index.get("revision"))
        self._pending = None
        self._wake.notify_all()

    def _attempt(self, pending: _Pending) -> bool:
        """One try at assembling ``pending`` (:meth:`_try`), unless one is already under way: the
        watch thread tries a new index at once and the retry thread takes over afterwards, and
        under load a try (one GET per changed shard) can outlast the first backoff, which would
        otherwise start a second try reading the same shards again. False while busy."""
        with self._lock:
            if pending.busy:
                return False
            pending.busy = True
        try:
            return self._try(pending)
        finally:
            with self._lock:
                pending.busy = False
                self._wake.notify_all()

    def _try(self, pending: _Pending) -> bool:
        """One try at assembling ``pending``: fetch the shards not already held at the index's
        digest and parse each one fetched at that digest (both outside the lock: a GET or a
        parse must never hold up a newer index), then, if the index is still the newest one,
        join the held shards and serve the whole. True when done with it."""
        index = pending.checked
        with self._lock:
            held = dict(self._held)
        fetch = [e for e in index.shards if not holds(held.get(e.name), e, index.shard_count)]
        fetched = fetch_shards(
            self._kube,
            self._namespace,
            index=index,
            entries=fetch,
            stop=self._stop,
            held=held,
        )
        if fetched is None:
            return True  # stopping
        with self._lock:
            self._keep(fetched)
            if self._pending is not pending:
                return True  # superseded meanwhile: the newer index is handled on its own
            if fetched.invalid:
                self._pending = None
                problems = [p for name in sorted(fetched.invalid) for p in fetched.invalid[name].problems]
                self._acceptance.reject(pending.index, InvalidOverlay(problems))
                return True
            incomplete = not_in_hand(index, fetched, self._held)
            if incomplete is not None:
                self._still_pending(pending, incomplete, fetched.errors)
                return False
            self._assemble_and_serve(pending, fetched)
            return True

    def _keep(self, fetched: Fetched) -> None:
        """Count one try's GETs and parses, hold what it parsed and drop what it found gone.
        Under the lock."""
        self.shard_gets += len(fetched.entries)
        self.shard_parses += sum(1 for h in fetched.parsed.values() if h is not None) + len(fetched.invalid)
        for name, shard in fetched.parsed.items():
            if shard is None:
                self._held.pop(name, None)
            else:
                self._held[name] = shard

    def _assemble_and_serve(self, pending: _Pending, fetched: Fetched) -> None:
        """Join the held shards of ``pending`` (every one in hand) and serve the whole; an
        assembled overlay that is invalid is rejected. Under the lock."""
        index = pending.checked
        self._pending = None
        try:
            overlay = assemble_overlay(index, ((e.name, self._held[e.name].candidates) for e in index.shards))
        except InvalidOverlay as exc:
            self._acceptance.reject(pending.index, exc)
            return
        # Keep only this index's shards: the next index reuses those whose digest it repeats.
        wanted = {e.name for e in index.shards}
        self._held = {name: shard for name, shard in self._held.items() if name in wanted}
        self._log.info(
            "overlay_assembled",
            revision=index.revision,
            shards=len(index.shards),
            fetched=sorted(e.name for e in fetched.entries),
            reused=len(index.shards) - len(fetched.entries),
            attempts=pending.attempts + 1,
            seconds=round(time.monotonic() - pending.since, 4),  # since the index was seen
        )
        self._acceptance.serve(overlay)

    def _still_pending(self, pending: _Pending, exc: Incomplete, errors: Mapping[str, KubeError]) -> None:
        """Log (when what is missing changed) and, once it has lasted, say so in the status.
        Under the lock. The current table keeps serving; nothing is accepted."""
        pending.attempts += 1
        self._wake.notify_all()  # the retry thread takes it from here
        revision = pending.index.get("revision")
        forbidden = sorted(name for name, e in errors.items() if isinstance(e, Forbidden))
        missing = [name for name in exc.missing if name not in errors]
        failed = {name: str(e) for name, e in errors.items() if name not in forbidden}
        what = (tuple(missing), tuple(exc.mismatched), tuple(forbidden), tuple(sorted(failed)))
        serving = self._table.serving
        serving_text = f"still serving revision {serving.revision}" if serving else "nothing served yet"
        if forbidden:
            self._log.error(
                "overlay_shards_forbidden", revision=revision, shards=forbidden, error=str(errors[forbidden[0]])
            )
            if pending.reported != what:
                self._status.submit(
                    {
                        "message": f"overlay revision {revision}: reading shards {', '.join(forbidden)} "
                        f"is forbidden (RBAC: the gateway may get only its own consumer's and its network's shards); {serving_text}"
                    }
                )
                pending.reported = what
        if pending.logged != what:
            self._log.warning(
                "overlay_shards_pending",
                revision=revision,
                missing=missing,
                mismatched=exc.mismatched,
                forbidden=forbidden,
                errors=failed,
                serving_revision=serving.revision if serving else None,
            )
            pending.logged = what
        waited = time.monotonic() - pending.since
        if waited >= self._pending_report_after and pending.reported is None:
            parts = [f"missing {', '.join(missing)}"] if missing else []
            if exc.mismatched:
                parts.append(f"not yet at the index's digest {', '.join(exc.mismatched)}")
            if failed:
                parts.append(f"unreadable {', '.join(sorted(failed))}")
            self._status.submit(
                {
                    "message": f"overlay revision {revision}: waiting for shards ({'; '.join(parts)}) "
                    f"for {waited:.0f}s; {serving_text}"
                }
            )
            pending.reported = what

    def retry_pending(self) -> bool:
        """One retry of the pending index, if any. True when nothing is pending afterwards."""
        with self._lock:
            pending = self._pending
        return pending is None or self._attempt(pending)

    def _retry_loop(self) -> None:
        """Thread target: retry a pending index with capped backoff until it assembles, a newer
        index supersedes it, or ``stop``.

        A thread of its own because the watch thread spends its time blocked in the watch
        stream: retrying there would either wait for the next event (no retry at all while the
        index is quiet) or hold up newer events behind the backoff. Here a newer index wakes the
        wait at once and restarts the backoff for itself; shard GETs run outside the lock, so
        the watch thread never waits on them either."""
        delay = capped_backoff(SHARD_RETRY_INITIAL, SHARD_RETRY_MAX)
        while not self._stop.is_set():
            with self._lock:
                self._wake.wait_for(
                    lambda: (self._pending is not None and not self._pending.busy) or self._stop.is_set(), timeout=1.0
                )
                pending = self._pending
                if pending is None or pending.busy:
                    continue
                # Back off; a newer index or stop cuts the wait short.
                if not self._still_current(pending, timeout=delay(max(pending.attempts, 1))):
                    continue
            self._attempt(pending)

    def _still_current(self, pending: _Pending, *, timeout: float) -> bool:
        """Wait ``timeout`` (under the lock); False as soon as ``pending`` is superseded or on stop."""
        self._wake.wait_for(lambda: self._pending is not pending or self._stop.is_set(), timeout=timeout)
        return self._pending is pending and not self._stop.is_set()

    @property
    def latest_revision(self) -> int | None:
        """The newest valid overlay revision seen (accepted, and served or about to be)."""
        return self._acceptance.latest_revision

    @property
    def pending_revision(self) -> int | None:
        """The revision of the index waiting for its shards, if one is (for metrics and /healthz)."""
        pending = self._pending
        revision = pending.index.get("revision") if pending is not None else None
        return revision if isinstance(revision, int) else None

    def health_report(self) -> tuple[bool, dict[str, Any]]:
        """For ``/healthz``: unhealthy only when the overlay watch has failed past its bound;
        ``servesLatest`` says whether the newest valid overlay seen is the one being served."""
        serving = self._table.serving
        live = self.health.live()
        return live, {
            "status": "ok" if live else "unhealthy: the overlay watch keeps failing",
            "server": self._kube.host,
            "watches": {self.health.name: self.health.to_dict()},
            "servingRevision": serving.revision if serving else None,
            "latestRevision": self.latest_revision,
            "servesLatest": serving is not None and serving.revision == self.latest_revision,
            "pendingRevision": self.pending_revision,  # an index still waiting for its shards
        }
