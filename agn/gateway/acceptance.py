"""Taking one whole overlay revision into service, or rejecting it: the gateway's fixed order.

The follower (:mod:`agn.gateway.follower`) finds each new overlay content — an inline overlay,
or one assembled from an index and its shards — and hands it here, whole. For each the order is
fixed:

1. validate it — an invalid overlay (or index, or shard of it) is reported in
   ``status.message`` and *not* accepted; the previous one keeps serving;
2. report ``status.acceptedRevision`` (+ ``acceptedDigest``, ``observedAt``), waiting a bounded
   time for that write (routing must not stall on the API server: after it the revision is
   served anyway, and the accepted fields are written with ``servingRevision``);
3. swap it into the routing table (atomically);
4. report ``status.servingRevision``.

So a revision is served whole or not at all. This module writes nothing but this consumer's
status (through :class:`~agn.gateway.status_writer.StatusWriter`) and makes no routing decision.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Mapping
from typing import Any

from agn.gateway.status_writer import StatusWriter
from agn.gateway.table import RoutingTable
from agn.gateway.validation import InvalidOverlay, digest_matches, validate_overlay
from agn.logs import JsonLog
from agn.model import ADMITTED, EXISTING_ONLY, Overlay
from agn.objects import rfc3339

STATE = operator.attrgetter("admission_state")


class OverlayAcceptance:
    """Accepts and serves valid whole overlays of one consumer, and reports rejected ones."""

    def __init__(
        self, *, consumer: str, table: RoutingTable, status: StatusWriter, log: JsonLog, accept_write_timeout: float
    ) -> None:
        self._consumer = consumer
        self._table = table
        self._status = status
        self._log = log
        self._accept_write_timeout = accept_write_timeout
        self.latest_revision: int | None = None  # the newest valid overlay revision seen

    def reject(self, spec: Any, exc: InvalidOverlay) -> None:
        """Report ``spec`` (an overlay, or an index) as rejected for ``exc``; what is served stays."""
        revision = spec.get("revision") if isinstance(spec, Mapping) else None
        serving = self._table.serving
        self._log.warning(
            "overlay_rejected",
            revision=revision,
            problems=exc.problems,
            serving_revision=serving.revision if serving else None,
        )
        self._status.submit({"message": f"rejected overlay revision {revision}: {exc}"})

    def take_inline(self, spec: Any) -> None:
        """An inline overlay spec: validate the whole, cross-check its digest, accept, serve."""
        try:
            overlay = validate_overlay(spec, consumer=self._consumer)
        except InvalidOverlay as exc:
            self.reject(spec, exc)
            return
        if not digest_matches(overlay):
            self._log.warning("overlay_digest_mismatch", revision=overlay.revision, digest=overlay.digest)
        self.serve(overlay)

    def serve(self, overlay: Overlay) -> None:
        """A valid whole overlay (inline, or assembled from checked shards): accept, then serve."""
        serving = self._table.serving
        if serving is not None and overlay.revision < serving.revision:
            # Only a recreated overlay can go backwards; serving it beats wedging on the old one.
            self._log.warning(
                "overlay_revision_regressed", revision=overlay.revision, serving_revision=serving.revision
            )
        self.latest_revision = overlay.revision
        self._accept_and_serve(overlay)

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
            admitted=operator.countOf(map(STATE, overlay.candidates), ADMITTED),
            existing_only=operator.countOf(map(STATE, overlay.candidates), EXISTING_ONLY),
        )
        self._status.submit({"servingRevision": overlay.revision})
