"""One probe of one provider over HTTP: its health (``GET {endpoint}/healthz`` for AGN's fake
provider, ``/health`` for vLLM, TGI and llama.cpp's server, ``/get_model_info`` for SGLang, whose
``/health`` generates a token) and ``GET {endpoint}/metrics``.

The health path follows ``spec.metrics.format`` (:func:`agn.engines.health_paths`): a pinned
format's own path, one request; ``auto`` asks ``/healthz``, ``/get_model_info`` (SGLang's),
``/health``, each only when the one before gave no verdict on the server (2xx, 503:
:func:`agn.engines.is_verdict`): a 404 (no such route) or a 401 (llama-server's ``--api-key``
guards every path but ``/health``) says nothing about the server. So a fleet of AGN providers
costs what it did, and a real engine's URL works unpinned at one or two extra requests per probe
(pin its format to save them). A refused ``/metrics`` is named
with what to do where the engine says (:func:`agn.engines.metrics_refusal`: llama-server's 501
wants ``--metrics``); a 401 or 403 is left bare here (``GET /metrics: HTTP 401``) for
:mod:`.credentials` to name with the provider's ``spec.authorization``.

A probe is exactly at the endpoint as given: no redirects, no proxies from the environment,
no cookies, and an invalid endpoint is not dialled at all. Its result is a
:class:`.provider_status.ProbeOutcome`; :func:`probe_endpoint_async` never raises (it may be
cancelled). The HTTP client (aiohttp, :func:`probe_session`) keeps connections alive: one
host:port (a pool of fake providers, or a provider's own) is probed over a few reused
connections instead of two new ones per probe.

This module only asks providers: it must not schedule probes, keep state between them or
touch the API server (that is :mod:`.prober`'s).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import socket
from collections.abc import Mapping

import aiohttp

from agn.engines import AUTO, format_of, health_paths, is_verdict, metrics_refusal
from agn.model import endpoint_valid
from agn.operator.prometheus import MetricsParseError, load_reading
from agn.operator.provider_status import ProbeOutcome

MAX_BODY_BYTES = 1 << 20

# Connections to one host:port are kept alive and shared by the probes of every provider
# behind it (a fake pool: thousands of providers on one port): at most this many to one
# host:port (and never more than ``--probe-concurrency`` in all; a probe uses one at a time),
# idle ones closed after KEEPALIVE_SECONDS. A probe that finds every connection to its host busy
# waits for one; that wait is the operator's own queue, so no probe timeout runs during it.
MAX_CONNECTIONS_PER_HOST = 64
KEEPALIVE_SECONDS = 15.0
# The socket timeouts (``--probe-timeout``) bound connecting and each wait for the provider's
# bytes; not a resolver that never answers, nor the wait for a connection of our own pool. So
# no request can hold its provider's probe slot for ever (the schedule never starts a second
# probe of a provider while one runs), each GET also ends after this many seconds at most.
REQUEST_DEADLINE_SECONDS = 30.0


def probe_session(*, concurrency: int) -> aiohttp.ClientSession:
    """The HTTP client of the probes (call it inside the event loop that uses it).

    Keep-alive connections (see ``MAX_CONNECTIONS_PER_HOST``); no proxies from the environment
    (``trust_env=False``), no cookies kept between probes. Redirects are refused per request
    (:func:`http_get`)."""
    connector = aiohttp.TCPConnector(
        limit=concurrency,
        limit_per_host=min(concurrency, MAX_CONNECTIONS_PER_HOST),
        keepalive_timeout=KEEPALIVE_SECONDS,
        use_dns_cache=True,
    )
    return aiohttp.ClientSession(connector=connector, trust_env=False, cookie_jar=aiohttp.DummyCookieJar())


async def http_get(
    session: aiohttp.ClientSession, url: str, *, timeout: float, headers: Mapping[str, str] | None = None
) -> tuple[int, bytes]:
    """(status, body) of a GET; raises ``aiohttp.ClientError``, ``OSError``-family or
    ``ValueError`` errors when there is no HTTP answer.

    ``timeout`` bounds connecting and each wait for the server's bytes (as a socket timeout
    does), not the wait for a free connection of our own pool. A redirect is an answer, not an
    instruction: its status comes back. A kept-alive connection the server closed while idle is
    retried once on a new one, as any HTTP client does for an idempotent request; a second
    failure is the answer. Whatever the socket timeouts do not bound ends at
    ``REQUEST_DEADLINE_SECONDS`` (``TimeoutError``)."""
    limits = aiohttp.ClientTimeout(total=None, connect=None, sock_connect=timeout, sock_read=timeout)
    for attempt in (1, 2):
        try:
            async with (
                asyncio.timeout(max(REQUEST_DEADLINE_SECONDS, 4 * timeout)),
                session.get(url, allow_redirects=False, timeout=limits, compress=None, headers=headers) as resp,
            ):
                if not 200 <= resp.status < 300:
                    return resp.status, b""
                body = bytearray()
                while len(body) < MAX_BODY_BYTES:
                    chunk = await resp.content.read(MAX_BODY_BYTES - len(body))
                    if not chunk:
                        break
                    body += chunk
                return resp.status, bytes(body)
        except aiohttp.ServerDisconnectedError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def _error_text(exc: BaseException) -> str:
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, aiohttp.ClientConnectorError):
        err = exc.os_error
        if isinstance(err, socket.gaierror):
            # A resolver error's errno is an EAI_* code (negative), which os.strerror does not
            # know ("Unknown error -3"); its own text says what failed.
            return err.strerror or str(err)
        return os.strerror(err.errno) if err.errno else (str(err) or type(err).__name__)
    if isinstance(exc, OSError) and exc.errno and not isinstance(exc, aiohttp.ClientError):
        return os.strerror(exc.errno)
    return str(exc) or type(exc).__name__


async def probe_health(
    session: aiohttp.ClientSession,
    base: str,
    *,
    timeout: float,
    metrics_format: str = AUTO,
    headers: Mapping[str, str] | None = None,
) -> tuple[bool, str | None, str, str | None]:
    """(healthy, error, the path that answered last, a note on a healthy answer) of the provider
    at ``base``: each of the format's health paths in turn, the next one only after an answer
    that is no verdict on the server (never after no answer). A 401 is up where the format says
    its health path answers so behind an API key (SGLang's); the note says so."""
    paths = health_paths(metrics_format)
    pinned = format_of(metrics_format)
    for i, path in enumerate(paths):
        try:
            code, _ = await http_get(session, f"{base}{path}", timeout=timeout, headers=headers)
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            return False, f"GET {path}: {_error_text(exc)}", path, None
        if 200 <= code < 300:
            return True, None, path, None
        if code == 401 and pinned is not None and pinned.auth_is_up:
            return True, None, path, f"HTTP 401: the server is up, behind {pinned.name}'s --api-key"
        if is_verdict(code) or i == len(paths) - 1:
            return False, f"GET {path}: HTTP {code}", path, None
    raise AssertionError("unreachable")


async def probe_endpoint_async(
    session: aiohttp.ClientSession,
    endpoint: str,
    *,
    timeout: float,
    now: float,
    metrics_format: str = AUTO,
    headers: Mapping[str, str] | None = None,
) -> ProbeOutcome:
    """One probe round against ``endpoint`` over ``session``; never raises (but may be cancelled).

    ``metrics_format`` is the provider's ``spec.metrics.format``: where its health is and how
    its metrics are read; ``headers`` go on every request (a provider's credentials:
    :mod:`.credentials`)."""
    if not endpoint_valid(endpoint):
        return ProbeOutcome(
            observed_at=now,
            probed=False,
            health_error="endpoint is invalid; not probed",
            metrics_error="endpoint is invalid; not scraped",
        )
    base = endpoint.rstrip("/")
    healthy, health_error, path, note = await probe_health(
        session, base, timeout=timeout, metrics_format=metrics_format, headers=headers
    )
    seen = ProbeOutcome(now, True, healthy, health_error, health_path=path, health_note=note)
    if not healthy:
        # Found down: the metrics request takes the kept-alive connection the health answer
        # came on and closes it after, so the next probe connects (and resolves) afresh. Kept
        # alive by quick re-checks, a connection that reached some other server before the
        # provider's Service routed (here an egress proxy answers any unrouted address 404)
        # would keep the provider down for as long as the re-checks went on.
        headers = {**(headers or {}), "Connection": "close"}
    try:
        code, body = await http_get(session, f"{base}/metrics", timeout=timeout, headers=headers)
        if not 200 <= code < 300:
            return dataclasses.replace(seen, metrics_error=f"GET /metrics: {metrics_refusal(code, metrics_format)}")
        reading = load_reading(body.decode("utf-8", errors="replace"), format=metrics_format)
        return dataclasses.replace(seen, metrics_ok=True, load=reading)
    except MetricsParseError as exc:
        return dataclasses.replace(seen, metrics_error=f"GET /metrics: {exc}")
    except (aiohttp.ClientError, OSError, ValueError) as exc:
        return dataclasses.replace(seen, metrics_error=f"GET /metrics: {_error_text(exc)}")
