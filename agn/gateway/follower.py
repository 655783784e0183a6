"""Follows this consumer's RoutingOverlay and moves it into the routing table.

List + watch by name through the shared loop (:func:`agn.watching.follow`: re-watch when the
server ends a watch, re-list on 410 Gone and, with capped backoff, after errors). For each new
overlay content the order is fixed:

1. validate it — an invalid overlay is reported in ``status.message`` and *not* accepted;
   the previous one keeps serving;
2. report ``status.acceptedRevision`` (+ ``acceptedDigest``, ``observedAt``);
3. swap it into the routing table (atomically);
4. report ``status.servingRevision``.

The overlay may not exist yet (the gateway simply waits for it) or may be deleted (the
gateway keeps serving the last accepted one and says so in ``status.message``).
This module must not write anything but this consumer's status (through
:class:`~agn.gateway.status_writer.StatusWriter`) and must not make routing decisions.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping
from typing import Any

from agn.gateway.status_writer import StatusWriter
from agn.gateway.table import RoutingTable
from agn.gateway.validation import InvalidOverlay, digest_matches, validate_overlay
from agn.kube import OVERLAYS, Gone, Kube, KubeError
from agn.logs import JsonLog
from agn.model import ADMITTED, EXISTING_ONLY, Overlay
from agn.objects import rfc3339
from agn.watching import WatchHealth, capped_backoff, follow

INITIAL_BACKOFF = 0.5
MAX_BACKOFF = 10.0
ABSENT = object()  # the overlay does not exist


class OverlayFollower:
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
        watch_timeout_seconds: int = 30,
        accept_write_timeout: float = 5.0,
    ) -> None:
        self._kube = kube
        self._namespace = namespace
        self._consumer = consumer
        self._table = table
        self._status = status
        self._log = log
        self._stop = stop
        self._watch_timeout = watch_timeout_seconds
        self._accept_write_timeout = accept_write_timeout
        self._last_seen: Any = None  # canonical form of the last spec handled (or ABSENT)
        self.health = WatchHealth("routingoverlays")
        self.latest_revision: int | None = None  # the newest valid overlay revision seen

    # -- the watch loop -----------------------------------------------------------------------
    def run(self) -> None:
        """Thread target: follow the overlay until ``stop`` is set."""
        # Listing and watching by name keeps the gateway within RBAC that names only its own overlay.
        by_name = f"metadata.name={self._consumer}"
        follow(
            list_fn=lambda: self._kube.list(OVERLAYS, self._namespace, field_selector=by_name),
            watch_fn=lambda version: self._kube.watch(
                OVERLAYS,
                self._namespace,
                resource_version=version,
                timeout_seconds=self._watch_timeout,
                field_selector=by_name,
            ),
            on_snapshot=self._snapshot,
            on_event=self._event,
            stop=self._stop,
            backoff=capped_backoff(INITIAL_BACKOFF, MAX_BACKOFF),
            on_error=self._log_error,
            health=self.health,
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
        """Handle the overlay as it now is (None: it does not exist)."""
        if obj is None:
            if self._last_seen is not ABSENT:
                self._last_seen = ABSENT
                serving = self._table.serving
                self._log.info("overlay_absent", serving_revision=serving.revision if serving else None)
                if serving is not None:
                    self._status.submit(
                        {"message": f"overlay {self._consumer} not found; still serving revision {serving.revision}"}
                    )
            return
        spec = obj.get("spec")
        seen = json.dumps(spec, sort_keys=True, default=str)
        if seen == self._last_seen:
            return  # metadata-only change, or a re-list of what is already handled
        self._last_seen = seen
        try:
            overlay = validate_overlay(spec, consumer=self._consumer)
        except InvalidOverlay as exc:
            revision = spec.get("revision") if isinstance(spec, Mapping) else None
            serving = self._table.serving
            self._log.warning(
                "overlay_rejected",
                revision=revision,
                problems=exc.problems,
                serving_revision=serving.revision if serving else None,
            )
            self._status.submit({"message": f"rejected overlay revision {revision}: {exc}"})
            return
        if not digest_matches(overlay):
            self._log.warning("overlay_digest_mismatch", revision=overlay.revision, digest=overlay.digest)
        serving = self._table.serving
        if serving is not None and overlay.revision < serving.revision:
            # Only a recreated overlay can go backwards; serving it beats wedging on the old one.
            self._log.warning(
                "overlay_revision_regressed", revision=overlay.revision, serving_revision=serving.revision
            )
        self.latest_revision = overlay.revision
        self._accept_and_serve(overlay)

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
        }

    def _accept_and_serve(self, overlay: Overlay) -> None:
        ticket = self._status.submit(
            {
                "acceptedRevision": overlay.revision,
                "acceptedDigest": overlay.digest,
                "observedAt": rfc3339(time.time()),
                "message": None,
            }
        )
        self._log.info(
            "overlay_accepted", revision=overlay.revision, digest=overlay.digest, candidates=len(overlay.candidates)
        )
        if not self._status.wait_written(ticket, timeout=self._accept_write_timeout):
            # Serve anyway: routing must not stall on the API server. The accepted fields stay
            # pending and are written together with servingRevision.
            self._log.warning("accepted_status_pending", revision=overlay.revision)
        previous = self._table.swap(overlay)
        self._log.info(
            "overlay_serving",
            revision=overlay.revision,
            previous_revision=previous.revision if previous else None,
            admitted=sum(1 for c in overlay.candidates if c.admission_state == ADMITTED),
            existing_only=sum(1 for c in overlay.candidates if c.admission_state == EXISTING_ONLY),
        )
        self._status.submit({"servingRevision": overlay.revision})
