"""The project's API error types: what a failed Kubernetes call (or an unusable kubeconfig) is
to every caller.

:class:`KubeError` and its subclasses are plain Python, so that code which only names them
(the kubeconfig reader and writer, xtask's exit-code mapping, tests) needs neither the
``kubernetes`` client nor :mod:`agn.kube`. :func:`from_api_exception` turns the client's
``ApiException`` into one of them by reading its attributes, its message naming the request
that failed (:mod:`agn.kuberequest`) with the status and the server's message.

This module must not import ``kubernetes`` or :mod:`agn.kube` (which imports it): it sits below
both :mod:`agn.kube` and :mod:`agn.kubeconfig`, which is what keeps them from importing each other.
"""

from __future__ import annotations

import http
import json
from typing import Any

from agn.kuberequest import ApiRequest, request_of


class KubeError(Exception):
    """An API call failed. ``status`` is the HTTP status (0 when none was received), ``reason``
    the Status object's (``NotFound``, ``AlreadyExists``), ``request`` the request that failed
    (when known), ``server_message`` what the server said (the message names the request too),
    ``hint`` what the user can do, where there is something."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 0,
        reason: str = "",
        hint: str | None = None,
        request: ApiRequest | None = None,
        server_message: str = "",
    ) -> None:
        super().__init__(message)
        self.status = status
        self.reason = reason
        self.hint = hint
        self.request = request
        self.server_message = server_message


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
        super().__init__(message, hint=hint)


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
    project's error type (the cause is kept), its message naming the request that failed
    (:func:`agn.kuberequest.request_of`): ``PATCH inferenceproviders/p-one in ns: 404 Not Found:
    <the server's message>``, with a hint where there is one.

    Answers that are about the connection rather than an object lead with the server and
    context, the request after them: 401 (the credentials were rejected) and a plain-HTTP 400
    from an HTTPS server."""
    status = exc.status or 0
    server_message, reason, json_body = "", "", False
    try:
        body = json.loads(exc.body or "{}")
        json_body = isinstance(body, dict)
        server_message = str(body.get("message") or "")
        reason = str(body.get("reason") or "")
    except (ValueError, TypeError, AttributeError):
        pass
    request = request_of(exc)
    answer = status_line(status, exc.reason or "", server_message)
    named = f" ({request})" if request else ""
    if status == 401:
        message = f"{where(server, context)} rejected the credentials: 401 Unauthorized{named}"
    elif status == 400 and server.startswith("http://") and not json_body:
        message = (
            f"{where(server, context)} answered 400 Bad Request to plain HTTP; it probably expects "
            f"https://{server.removeprefix('http://')}{named}"
        )
    elif request is not None:
        message = f"{request}: {answer}"
    else:
        message = server_message or exc.reason or f"HTTP {exc.status}"
    cls = _BY_STATUS.get(status, KubeError)
    hint = _hint(status, request, server_message, json_body=json_body)
    err = cls(message, status=status, reason=reason, hint=hint, request=request, server_message=server_message)
    err.__cause__ = exc
    return err


def status_line(status: int, phrase: str, server_message: str = "") -> str:
    """``404 Not Found: <the server's message>`` (the message left out when it only repeats the phrase)."""
    if not phrase and status:
        try:
            phrase = http.HTTPStatus(status).phrase
        except ValueError:
            phrase = ""
    line = f"{status} {phrase}".strip() if status else (phrase or "no answer")
    if server_message and server_message != phrase:
        line += f": {server_message}"
    return line


def _hint(status: int, request: ApiRequest | None, server_message: str, *, json_body: bool) -> str | None:
    """What the user can do about an answer, where there is something to say."""
    if request is None:
        return None
    if status == 404 and not json_body and request.resource:
        # No Status object: no handler serves the path at all, as for a CRD not (yet) served.
        crd = " (is its CustomResourceDefinition installed and Established?)" if request.group else ""
        return f"the API server serves no {request.qualified_resource}{crd}"
    if status == 404 and not json_body and request.path in ("/api", "/apis"):
        # Every API server serves these: whatever answered is not one (etcd does, on its own port).
        return "the server does not serve the Kubernetes API: is its address a kube-apiserver's?"
    if status == 403 and "being terminated" in server_message:
        return f"namespace {request.namespace} is being deleted: nothing can be created in it until it is gone"
    if status == 403 and request.resource and " cannot " in server_message:  # the authorizer's words
        return f"the identity lacks RBAC permission; check with: {request.can_i()}"
    if status == 429 or status >= 500:
        return "the API server could not serve the request now (starting, overloaded or shutting down): retry"
    return None


def where(server: str, context: str | None) -> str:
    """ "API server URL (context NAME)", as far as either is known."""
    named = f"API server {server}" if server else "API server"
    return f"{named} (context {context!r})" if context else named


def unreachable_message(exc: BaseException, *, server: str, context: str | None, connect: float, read: float) -> str:
    """What an urllib3 or socket failure (no HTTP answer) says about the API server: it did not
    answer within ``read`` seconds, gave no connection within ``connect``, failed TLS, or was
    unreachable; then the request, when known. urllib3 is imported here only when there is such
    a failure to describe."""
    request = request_of(exc)
    return _unreachable(exc, server=server, context=context, connect=connect, read=read) + (
        f" ({request})" if request else ""
    )


def _unreachable(exc: BaseException, *, server: str, context: str | None, connect: float, read: float) -> str:
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


def watch_error(obj: dict[str, Any], request: ApiRequest | None = None) -> KubeError:
    """The error a watch's ERROR event (a Status object) reports, naming the watch ``request``:
    :class:`Gone` when its resourceVersion is too old (410; the caller re-lists)."""
    code = int(obj.get("code") or 0)
    server_message = str(obj.get("message") or "")
    message = server_message or ("resource version too old" if code == 410 else "watch error")
    if request is not None:
        message = f"{request}: {status_line(code, '', server_message)}"
    cls = Gone if code == 410 else _BY_STATUS.get(code, KubeError)
    reason = str(obj.get("reason") or ("Expired" if code == 410 else ""))
    return cls(message, status=code, reason=reason, request=request, server_message=server_message)
