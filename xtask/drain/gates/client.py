"""The one HTTP client of the wave gates (a gateway's ``/metrics``, Prometheus' HTTP API): urllib3.

Every request has a connect and a read timeout, is tried once (a gate's reading is one try; the
soak decides what a missing reading means), follows no redirect, and never goes through a proxy
(urllib3 reads no proxy variables: a gateway on loopback must not be asked through one). A body
is read up to a limit, so a server that answers without end cannot fill the memory. The gates
see :class:`Answer` and :class:`Unanswered`, never urllib3's types.
"""

from __future__ import annotations

import dataclasses
import functools
import urllib.parse
from collections.abc import Mapping

import urllib3

from xtask.record import Record


class Unanswered(Exception):
    """The server could not be asked or did not answer (refused, reset, timed out, TLS); the message says why."""


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Answer(Record):
    status: int
    body: bytes
    truncated: bool = False  # the body went past the limit; ``body`` holds the limit and one byte


@functools.cache
def _pool() -> urllib3.PoolManager:
    return urllib3.PoolManager(retries=False)


def _send(method: str, url: str, *, timeout: float, limit: int, fields: Mapping[str, str] | None = None) -> Answer:
    headers = {"Content-Type": "application/x-www-form-urlencoded"} if fields is not None else None
    body = urllib.parse.urlencode(fields).encode() if fields is not None else None
    try:
        resp = _pool().request(
            method,
            url,
            body=body,
            headers=headers,
            timeout=urllib3.Timeout(connect=timeout, read=timeout),
            retries=False,
            redirect=False,
            preload_content=False,
        )
        try:
            data = resp.read(limit + 1)
        finally:
            resp.release_conn()
    except (urllib3.exceptions.HTTPError, OSError) as exc:
        raise Unanswered(str(exc)) from exc
    return Answer(resp.status, data, truncated=len(data) > limit)


def get(url: str, *, timeout: float, limit: int) -> Answer:
    """GET ``url``: its status and at most ``limit`` bytes of its body (``truncated`` if more)."""
    return _send("GET", url, timeout=timeout, limit=limit)


def post_form(url: str, fields: Mapping[str, str], *, timeout: float, limit: int) -> Answer:
    """POST ``fields`` form-encoded to ``url`` (a long PromQL expression fits in a body, not a URL)."""
    return _send("POST", url, timeout=timeout, limit=limit, fields=fields)
