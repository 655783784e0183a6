"""How :mod:`agn.kube` sets up the client it connects with, in the parts that need no
``kubernetes`` import: a default timeout on every request, every failed request's error
carrying that request (:func:`name_requests`), catching a failed ``exec``
credential plugin from the client's log, quieting urllib3's warning when TLS verification
was turned off in the kubeconfig, and the in-cluster namespace.

It holds no connection and makes no request; it must not import ``kubernetes`` (only
:mod:`agn.kube` does) and is used by nothing but :mod:`agn.kube`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from agn import kuberequest
from agn.kubeerrors import ConfigError


class _RestClient(Protocol):
    request: Callable[..., Any]


class _ApiClient(Protocol):
    """What :func:`default_timeout` uses of a ``kubernetes.client.ApiClient`` (not imported here)."""

    @property
    def rest_client(self) -> _RestClient: ...


def default_timeout(api_client: _ApiClient, timeout: tuple[float, float]) -> None:
    """Make ``timeout`` the (connect, read) timeout of every request of ``api_client`` that names
    none: the generated client sends requests without any by default, which wait forever."""
    rest = api_client.rest_client
    request = rest.request

    def with_timeout(*args: Any, _request_timeout: Any = None, **kwargs: Any) -> Any:
        return request(*args, _request_timeout=_request_timeout or timeout, **kwargs)

    rest.request = with_timeout


def name_requests(api_client: _ApiClient, raise_error: Callable[..., Any]) -> None:
    """Make every error a request of ``api_client`` ends in carry that request
    (:func:`agn.kuberequest.attach`): its verb, resource, object and namespace are known here, at
    the one place every request passes (typed APIs, custom objects, the dynamic client, watches),
    and nowhere later. An answer outside 2xx raises at once, as ``raise_error`` (the client's
    ``ApiException.from_response``) would a moment later; a request that got no answer
    (urllib3 and socket errors) keeps its own error."""
    rest = api_client.rest_client
    request = rest.request

    def named(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        headers, body = kwargs.get("headers") or {}, kwargs.get("body")
        try:
            response = request(method, url, *args, **kwargs)
            if 200 <= response.status <= 299:
                return response
            response.read()
            raise_error(http_resp=response, body=None, data=None)
            raise AssertionError(f"raise_error did not raise for HTTP {response.status}")  # pragma: no cover
        except Exception as exc:
            kuberequest.attach(
                exc, kuberequest.parse(method, url, body=body, content_type=headers.get("Content-Type", ""))
            )
            raise

    rest.request = named


class ExecFailures(logging.Handler):
    """While loading a kubeconfig, catch what the client logs when an ``exec`` credential plugin
    fails (it logs the error and carries on without credentials); ``failure`` is the first line."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.failure = ""

    def emit(self, record: logging.LogRecord) -> None:
        if not self.failure:
            self.failure = " ".join(record.getMessage().split())

    def __enter__(self) -> ExecFailures:
        logging.getLogger().addHandler(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        logging.getLogger().removeHandler(self)

    def check(self, command: str | None, *, context: str, where: str) -> None:
        """Raise :class:`ConfigError` if context ``context`` (of ``where``) has an exec plugin
        (``command``) and it failed: the client logs a failed plugin and goes on without
        credentials, so every request would go out anonymously."""
        if self.failure and command is not None:
            raise ConfigError(
                f"the exec credential plugin {command!r} of context {context!r} failed: {self.failure} ({where})"
            )


def quiet_insecure_warnings() -> None:
    """``insecure-skip-tls-verify: true`` was chosen in the kubeconfig (kubectl says nothing
    about it either): urllib3's InsecureRequestWarning on every request becomes one log record,
    shown with ``-v``."""
    import warnings

    import urllib3

    warnings.filterwarnings("ignore", category=urllib3.exceptions.InsecureRequestWarning)
    logging.getLogger("agn.kube").warning("TLS verification of the API server is off (insecure-skip-tls-verify)")


SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def service_account_namespace() -> str:
    """The namespace of the pod's service account (as kubectl uses it in-cluster); "default"
    when the file is missing or empty."""
    try:
        return Path(SERVICE_ACCOUNT_NAMESPACE).read_text().strip() or "default"
    except OSError:
        return "default"
