"""The project's API error types: what a failed Kubernetes call (or an unusable kubeconfig) is
to every caller.

:class:`KubeError` and its subclasses are plain Python, so that code which only names them
(the kubeconfig reader and writer, xtask's exit-code mapping, tests) needs neither the
``kubernetes`` client nor :mod:`agn.kube`. :func:`from_api_exception` turns the client's
``ApiException`` into one of them by reading its attributes.

This module must not import ``kubernetes`` or :mod:`agn.kube` (which imports it): it sits below
both :mod:`agn.kube` and :mod:`agn.kubeconfig`, which is what keeps them from importing each other.
"""

from __future__ import annotations

import json
from typing import Any


class KubeError(Exception):
    """An API call failed. ``status`` is the HTTP status (0 when none was received)."""

    def __init__(self, message: str, *, status: int = 0, reason: str = "") -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason


class NotFound(KubeError):
    pass


class Conflict(KubeError):
    pass


class Gone(KubeError):
    """A watch's resourceVersion is too old (410); the caller must re-list."""


class Forbidden(KubeError):
    pass


class Invalid(KubeError):
    """422 or 400: the API server rejected the object (validation, admission, strict decoding)."""


class Unreachable(KubeError):
    """No HTTP answer at all: connection refused, timeout, TLS failure."""


class ConfigError(KubeError):
    """The kubeconfig or context cannot be used, or a kubeconfig cannot be written; names the
    file. The one error of :mod:`agn.kubeconfig`; ``hint`` says what the user can do."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint


_BY_STATUS: dict[int, type[KubeError]] = {
    400: Invalid,
    404: NotFound,
    409: Conflict,
    410: Gone,
    403: Forbidden,
    422: Invalid,
}


def from_api_exception(exc: Any, *, server: str = "", context: str | None = None) -> KubeError:
    """A client ``ApiException`` (anything with its ``status``, ``reason`` and ``body``) as the
    project's error type (the cause is kept).

    Answers that are about the connection rather than an object name the server and context:
    401 (the credentials were rejected) and a plain-HTTP 400 from an HTTPS server."""
    message = exc.reason or ""
    reason = ""
    status = exc.status or 0
    json_body = False
    try:
        body = json.loads(exc.body or "{}")
        json_body = isinstance(body, dict)
        message = body.get("message") or message
        reason = body.get("reason") or ""
    except (ValueError, TypeError, AttributeError):
        pass
    where = f"API server {server}" + (f" (context {context!r})" if context else "")
    if status == 401:
        message = f"{where} rejected the credentials: 401 Unauthorized"
    elif status == 400 and server.startswith("http://") and not json_body:
        message = (
            f"{where} answered 400 Bad Request to plain HTTP; it probably expects "
            f"https://{server.removeprefix('http://')}"
        )
    cls = _BY_STATUS.get(status, KubeError)
    err = cls(message or f"HTTP {exc.status}", status=status, reason=reason)
    err.__cause__ = exc
    return err


def where(server: str, context: str | None) -> str:
    """ "API server URL (context NAME)", as far as either is known."""
    named = f"API server {server}" if server else "API server"
    return f"{named} (context {context!r})" if context else named


def unreachable_message(exc: BaseException, *, server: str, context: str | None, connect: float, read: float) -> str:
    """What an urllib3 or socket failure (no HTTP answer) says about the API server: it did not
    answer within ``read`` seconds, gave no connection within ``connect``, failed TLS, or was
    unreachable. urllib3 is imported here only when there is such a failure to describe."""
    from urllib3.exceptions import (
        ConnectTimeoutError,
        MaxRetryError,
        NewConnectionError,
        ReadTimeoutError,
        SSLError,
    )

    cause = exc.reason if isinstance(exc, MaxRetryError) and exc.reason is not None else exc
    refused = isinstance(cause, NewConnectionError)  # a subclass of ConnectTimeoutError, but not a timeout
    if isinstance(cause, ReadTimeoutError):
        return f"{where(server, context)} did not answer within {read:g} s"
    if isinstance(cause, (ConnectTimeoutError, TimeoutError)) and not refused:
        return f"{where(server, context)}: no connection within {connect:g} s"
    if isinstance(cause, SSLError):
        return f"{where(server, context)}: TLS failed: {' '.join(str(cause).split())}"
    return f"API server unreachable: {' '.join(str(exc).split())}" + (f" ({where(server, context)})" if server else "")


def watch_error(obj: dict[str, Any]) -> KubeError:
    """The error a watch's ERROR event (a Status object) reports: :class:`Gone` when its
    resourceVersion is too old (410; the caller re-lists)."""
    code = obj.get("code", 0)
    if code == 410:
        return Gone(obj.get("message", "resource version too old"), status=410, reason="Expired")
    return KubeError(obj.get("message", "watch error"), status=code, reason=obj.get("reason", ""))
