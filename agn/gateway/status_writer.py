"""The writer of this consumer's ``status`` (and of nothing else).

Callers :meth:`StatusWriter.submit` status fields; a background thread merges everything
pending into one JSON merge patch on the consumer's status subresource and retries with
backoff until it lands (the consumer may not exist yet, the API server may blip). Because
pending fields are merged and written together, a failed ``acceptedRevision`` write is
carried along with the later ``servingRevision`` one — an observer never sees a serving
revision ahead of the accepted one. ``None`` as a value deletes the field.

This module must not write any other object or any field outside ``status``.
"""

from __future__ import annotations

import threading
from typing import Any

from agn.kube import CONSUMERS, Kube, KubeError, NotFound
from agn.logs import JsonLog

INITIAL_BACKOFF = 0.2
MAX_BACKOFF = 5.0


class StatusWriter:
    def __init__(self, kube: Kube, *, namespace: str, consumer: str, log: JsonLog) -> None:
        self._kube = kube
        self._namespace = namespace
        self._consumer = consumer
        self._log = log
        self._cond = threading.Condition()
        self._pending: dict[str, Any] = {}
        self._submitted = 0  # sequence number of the latest submit
        self._written = 0  # every submit up to this number has reached the API server
        self._closed = False

    def submit(self, fields: dict[str, Any]) -> int:
        """Queue ``fields`` for writing; returns a ticket for :meth:`wait_written`."""
        with self._cond:
            self._pending.update(fields)
            self._submitted += 1
            if not self._pending:
                # Nothing is pending (an empty submit after everything landed): already written.
                self._written = self._submitted
            self._cond.notify_all()
            return self._submitted

    def wait_written(self, ticket: int, *, timeout: float) -> bool:
        """Block until the submit with ``ticket`` (and all before it) is written, or ``timeout``."""
        with self._cond:
            return self._cond.wait_for(lambda: self._written >= ticket or self._closed, timeout=timeout) and (
                self._written >= ticket
            )

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def run(self) -> None:
        """Thread target: write pending fields until :meth:`close`."""
        backoff = INITIAL_BACKOFF
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._pending or self._closed)
                if self._closed:
                    return
                batch, ticket = dict(self._pending), self._submitted
            try:
                self._kube.merge_patch_status(CONSUMERS, self._namespace, self._consumer, {"status": batch})
            except KubeError as exc:
                level = "warning" if isinstance(exc, NotFound) else "error"
                getattr(self._log, level)(
                    "status_write_failed", fields=sorted(batch), error=str(exc), status=exc.status, retry_in=backoff
                )
                with self._cond:
                    self._cond.wait_for(lambda: self._closed, timeout=backoff)
                backoff = min(backoff * 2, MAX_BACKOFF)
                continue
            backoff = INITIAL_BACKOFF
            self._log.debug("status_written", status=batch)
            with self._cond:
                for key, value in batch.items():
                    # A newer submit may have changed the value meanwhile; keep that one pending.
                    if key in self._pending and self._pending[key] == value:
                        del self._pending[key]
                self._written = max(self._written, ticket)
                self._cond.notify_all()
