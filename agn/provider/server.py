"""The fake inference provider's HTTP server.

Endpoints:
- ``GET /healthz`` — 200 ``ok`` while healthy, 503 otherwise. With ``--metrics-format`` of a
  real engine it is where that engine answers instead (:data:`agn.engines.FORMATS`: ``/health``
  for vllm, tgi, llamacpp; SGLang's ``/get_model_info``), and ``/healthz`` is 404 as on them.
  SGLang's own ``/health`` generates a token: the fake answers it after ``healthGenerateSeconds``
  (1 s, as SGLang's handler waits at least a second) and counts it (``healthGenerations``).
- ``GET /metrics`` — Prometheus text with ``agn_provider_running`` and (unless turned off)
  ``agn_provider_waiting``, or the engine's own names in its shape (:mod:`.expositions`);
  while metrics export is off, 404 (501 with llama-server's message for ``llamacpp``, whose
  endpoint is off without ``--metrics``), so a prober sees them go stale.
- ``POST /v1/completions`` — answers ``{"provider": NAME, ...}`` so callers see who served.
- ``GET|POST /admin/state`` — loopback-only switches for tests: ``healthy``, ``metrics``,
  ``exportWaiting``, ``waiting``, ``kvCacheUsage`` (0 to 1), ``delaySeconds`` (how long ``/healthz`` and ``/metrics``
  take to answer: a slow provider), ``engineMetrics`` (false: /metrics without the engine's
  metrics, as vLLM's ``--disable-log-stats``), ``prioritySplit`` (SGLang's
  ``--enable-priority-scheduling`` series), ``healthGenerateSeconds``, ``holdCompletions``.
  They drive hard failures for real, over HTTP. While ``holdCompletions`` is true, completions are accepted and then held in
  flight (counted in ``agn_provider_running``) until it is set false again: real running
  requests. While ``failCompletions`` is true, completions are answered 500 (``/healthz``
  stays as ``healthy`` says): a provider that is admitted and fails what it serves.
  ``apiKeys`` (a list; write-only, ``apiKeyRequired`` shows whether any is set) makes it an
  engine started with ``--api-key``: 401 without one of the keys on every path that format's
  engine guards, with that engine's body (:mod:`.apikey`; llama.cpp's exactly);
  ``--api-key-file`` sets them at start.

Under ``/pool/<name>/`` every endpoint answers for a provider ``name`` with its own state
(created on first use, starting from the process's flags), so one process stands in for many
providers in scale tests and benchmarks, each with its own endpoint URL
(``http://127.0.0.1:PORT/pool/p17``). Any other path prefix is the process's own provider
(``/x/healthz`` is ``/healthz``).

It listens on 127.0.0.1 unless given ``--host`` (in a pod: ``0.0.0.0``, so its Service reaches it).

One server answers this API: :func:`serve_async`, aiohttp's server on one event loop (what
``python -m agn.provider`` runs, and what in-process tests start). One process standing in for
thousands of providers answers thousands of probes a second; the standard library's threaded
server it replaced (a thread per connection, a pure-Python request parser) made it what a fleet
benchmark measured, not the operator.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aiohttp import web

from agn.engines import FORMATS
from agn.httpserve import JSON, LOOPBACK, TEXT
from agn.provider import apikey
from agn.provider.apikey import api_keys
from agn.provider.expositions import Load, exposition

HOLD_LIMIT_SECONDS = 600
LLAMACPP_NO_METRICS = "This server does not support metrics endpoint. Start it with `--metrics`"
MAX_DELAY = 30.0
POOL_PATH = re.compile(r"/pool/([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?)(/.*)?")  # used with fullmatch


@dataclasses.dataclass
class FakeProvider:
    """One fake provider: how it behaves (healthy, slow, busy: set through ``/admin/state``) and what it counted."""

    name: str
    healthy: bool = True
    metrics: bool = True
    export_waiting: bool = True
    waiting: int = 0
    running: int = 0
    served: int = 0
    hold_completions: bool = False
    fail_completions: bool = False
    failed: int = 0  # completions answered 500 while failCompletions was on
    delay_seconds: float = 0.0
    health_checks: int = 0  # its health path answered (/healthz or /health): how often a prober looked
    metrics_format: str = "agn"  # the exposition served, and so the health path (agn.engines)
    kv_cache_usage: float = 0.0
    api_keys: tuple[str, ...] = ()  # an engine's --api-key: required where that engine wants it (.apikey)
    engine_metrics: bool = True
    priority_split: bool = False
    queued_ever: bool = False  # a completion arrived or waiting was set (TGI's lazy queue gauge)
    health_generate_seconds: float = 1.0
    health_generations: int = 0  # SGLang's generating /health answered
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)
    released: threading.Condition = dataclasses.field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.released = threading.Condition(self.lock)

    def snapshot(self) -> dict[str, Any]:
        with self.lock:
            return {
                "name": self.name,
                "healthy": self.healthy,
                "metrics": self.metrics,
                "exportWaiting": self.export_waiting,
                "waiting": self.waiting,
                "running": self.running,
                "served": self.served,
                "delaySeconds": self.delay_seconds,
                "healthChecks": self.health_checks,
                "metricsFormat": self.metrics_format,
                "kvCacheUsage": self.kv_cache_usage,
                "failCompletions": self.fail_completions,
                "failed": self.failed,
                "apiKeyRequired": bool(self.api_keys),  # the keys themselves are never shown
                "engineMetrics": self.engine_metrics,
                "prioritySplit": self.priority_split,
                "healthGenerateSeconds": self.health_generate_seconds,
                "healthGenerations": self.health_generations,
            }

    def update(self, changes: dict[str, Any]) -> None:
        fields = {
            "healthy": ("healthy", bool),
            "metrics": ("metrics", bool),
            "exportWaiting": ("export_waiting", bool),
            "waiting": ("waiting", int),
            "holdCompletions": ("hold_completions", bool),
            "failCompletions": ("fail_completions", bool),
            "delaySeconds": ("delay_seconds", float),
            "kvCacheUsage": ("kv_cache_usage", float),
            "engineMetrics": ("engine_metrics", bool),
            "prioritySplit": ("priority_split", bool),
            "healthGenerateSeconds": ("health_generate_seconds", float),
        }
        limits = {"delaySeconds": MAX_DELAY, "kvCacheUsage": 1.0, "healthGenerateSeconds": MAX_DELAY}
        changes = dict(changes)
        keys = api_keys(changes.pop("apiKeys")) if "apiKeys" in changes else None
        unknown = set(changes) - set(fields)
        if unknown:
            raise ValueError(f"unknown fields: {', '.join(sorted(unknown))}")
        with self.lock:
            if keys is not None:
                self.api_keys = keys
            for key, value in changes.items():
                attr, typ = fields[key]
                if typ is bool and not isinstance(value, bool):
                    raise ValueError(f"{key} must be a boolean")
                if typ is int and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
                    raise ValueError(f"{key} must be a non-negative integer")
                if typ is float and (
                    not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value <= limits[key]
                ):
                    raise ValueError(f"{key} must be a number within 0 and {limits[key]:g}")
                setattr(self, attr, float(value) if typ is float else value)
            self.queued_ever = self.queued_ever or self.waiting > 0
            self.released.notify_all()

    # -- a completion, for both servers ---------------------------------------------------------
    def refused_completion(self) -> dict[str, Any] | None:
        """The 500 answer's body while failCompletions is on (counted as failed), else None."""
        with self.lock:
            if not self.fail_completions:
                return None
            self.failed += 1
        return {"error": "failing on purpose (failCompletions)", "provider": self.name}

    def completion_started(self) -> bool:
        """Count a completion as running; whether it is to be held (holdCompletions)."""
        with self.lock:
            self.running += 1
            self.queued_ever = True
            return self.hold_completions

    def wait_released(self) -> None:
        """Block while completions are held (bounded, so none outlives a test)."""
        with self.lock:
            self.released.wait_for(lambda: not self.hold_completions, timeout=HOLD_LIMIT_SECONDS)

    def completion_reply(self, body: object, session: str | None) -> dict[str, Any]:
        prompt = body.get("prompt", "") if isinstance(body, dict) else ""
        return {"provider": self.name, "session": session, "text": f"[{self.name}] {prompt}"[:200]}

    def completion_finished(self) -> None:
        with self.lock:
            self.running -= 1
            self.served += 1

    @property
    def health_path(self) -> str:
        """Where this provider answers its health: ``/healthz`` (AGN), ``/health`` (vLLM, TGI,
        llama.cpp), ``/get_model_info`` (SGLang)."""
        return FORMATS[self.metrics_format].health_path

    def refuses(self, route: str, headers: Mapping[str, str]) -> bool:
        """Whether a request for ``route`` with ``headers`` is refused for want of an API key
        (:mod:`.apikey`: where the format's engine wants one, while any is set)."""
        keys = self.api_keys
        if not keys or not apikey.guarded(self.metrics_format, route, sglang_open=(GENERATING_HEALTH, "/metrics")):
            return False
        return not apikey.authorized(keys, headers)

    def metrics_text(self) -> str:
        with self.lock:
            load = Load(
                name=self.name,
                running=self.running,
                waiting=self.waiting,
                export_waiting=self.export_waiting,
                kv_cache_usage=self.kv_cache_usage,
                served=self.served,
                queued_ever=self.queued_ever,
                engine_metrics=self.engine_metrics,
                priority_split=self.priority_split,
            )
        return exposition(self.metrics_format, load)


class ProviderPool:
    """The states of the providers served under ``/pool/<name>/``, each created on first use."""

    def __init__(self, template: FakeProvider) -> None:
        self._template = template
        self._lock = threading.Lock()
        self._states: dict[str, FakeProvider] = {}

    def get(self, name: str) -> FakeProvider:
        with self._lock:
            state = self._states.get(name)
            if state is None:
                template = self._template
                state = FakeProvider(
                    name=name,
                    healthy=template.healthy,
                    metrics=template.metrics,
                    metrics_format=template.metrics_format,
                    api_keys=template.api_keys,
                )
                self._states[name] = state
            return state


ROUTES = ("/healthz", "/health", "/get_model_info", "/metrics", "/admin/state", "/v1/completions")
HEALTH_ROUTES = ("/healthz", "/health", "/get_model_info")
GENERATING_HEALTH = "/health (generating)"  # SGLang's /health: a one-token generation
METRICS_TYPE = "text/plain; version=0.0.4"
SERVER_NAME = "agn-fake-provider/0.1"


def target(root: FakeProvider, pool: ProviderPool, raw_path: str) -> tuple[FakeProvider, str]:
    """The provider a request path addresses (``/pool/<name>/...`` or the process's own) and its
    route. The provider's own health path (``/healthz`` or ``/health``, by its metrics format)
    is the route ``/health``; the other one is no route, as on the engine it stands in for."""
    path = raw_path.split("?", 1)[0]
    match = POOL_PATH.fullmatch(path)
    state = root
    if match is not None:
        state, path = pool.get(match.group(1)), match.group(3) or "/"
    route = next((r for r in ROUTES if path == r or path.endswith(r)), path)
    if route in HEALTH_ROUTES:
        if route == state.health_path:
            route = "/health"
        elif route == "/health" and state.metrics_format == "sglang":
            route = GENERATING_HEALTH
        else:
            route = f"{route} (not this format's)"
    return state, route


# One process answers for a whole pool of providers, so connections arrive in bursts (the
# operator probes with up to ``--probe-concurrency`` at once, times two requests each). The
# standard listen backlog of 5 drops the rest of a burst; the kernel retransmits a dropped SYN
# only after a second — past a probe's timeout, so a healthy provider read as down.
FLEET_BACKLOG = 512


def _response(code: int, body: bytes, content_type: str = TEXT) -> web.Response:
    return web.Response(status=code, body=body, headers={"Content-Type": content_type, "Server": SERVER_NAME})


def _json(code: int, data: Any) -> web.Response:
    return _response(code, json.dumps(data).encode(), JSON)


class _AsyncProvider:
    """The same API as :class:`ProviderHandler`, answered by aiohttp on one event loop, for the
    provider ``root`` and its pool.

    Nothing here blocks the loop: a slow provider's delay is an ``asyncio.sleep``, and a held
    completion waits for its release on a thread of its own (``holdCompletions`` is a
    :class:`threading.Condition`, shared with whoever flips it)."""

    def __init__(self, root: FakeProvider) -> None:
        self.root = root
        self.pool = ProviderPool(root)
        self.holders = ThreadPoolExecutor(max_workers=256, thread_name_prefix="held-completion")

    async def handle(self, request: web.Request) -> web.StreamResponse:
        state, route = target(self.root, self.pool, request.raw_path)
        if state.refuses(route, request.headers):
            return _json(401, apikey.refusal(state.metrics_format))
        if request.method == "GET":
            return await self._get(request, state, route)
        if request.method != "POST":
            return _response(501, b"unsupported method\n")
        raw = await request.read()
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            return _json(400, {"error": "body is not JSON"})
        if route == "/admin/state":
            if request.remote != "127.0.0.1":
                return _response(403, b"admin is loopback-only\n")
            try:
                state.update(body if isinstance(body, dict) else {})
            except ValueError as exc:
                return _json(400, {"error": str(exc)})
            return _json(200, state.snapshot())
        if route == "/v1/completions":
            return await self._complete(request, state, body)
        return _response(404, b"not found\n")

    async def _get(self, request: web.Request, state: FakeProvider, route: str) -> web.StreamResponse:
        if route == GENERATING_HEALTH:
            return await self._generating_health(state)
        if route in ("/health", "/metrics"):
            delay = state.snapshot()["delaySeconds"]
            if delay:
                await asyncio.sleep(delay)  # a slow provider, on purpose
        if route == "/health":
            with state.lock:
                state.health_checks += 1
                healthy = state.healthy
            return _response(200 if healthy else 503, b"ok\n" if healthy else b"unhealthy\n")
        if route == "/metrics":
            if state.snapshot()["metrics"]:
                return _response(200, state.metrics_text().encode(), METRICS_TYPE)
            if state.metrics_format == "llamacpp":
                return _json(
                    501, {"error": {"code": 501, "message": LLAMACPP_NO_METRICS, "type": "not_supported_error"}}
                )
            return _response(404, b"metrics export disabled\n")
        if route == "/admin/state":
            if request.remote != "127.0.0.1":
                return _response(403, b"admin is loopback-only\n")
            return _json(200, state.snapshot())
        return _response(404, b"not found\n")

    async def _generating_health(self, state: FakeProvider) -> web.StreamResponse:
        """SGLang's /health: 503 when down, else 200 once a one-token generation answered."""
        snap = state.snapshot()
        if not snap["healthy"]:
            return _response(503, b"")
        await asyncio.sleep(snap["healthGenerateSeconds"])
        with state.lock:
            state.health_generations += 1
        return _response(200, b"")

    async def _complete(self, request: web.Request, state: FakeProvider, body: Any) -> web.StreamResponse:
        refusal = state.refused_completion()
        if refusal is not None:
            return _json(500, refusal)
        try:
            if state.completion_started():  # held: in flight until released, on a thread of its own
                await asyncio.get_running_loop().run_in_executor(self.holders, state.wait_released)
            reply = state.completion_reply(body, request.headers.get("x-session-id"))
        finally:
            state.completion_finished()
        return _json(200, reply)

    async def close_holders(self, app: web.Application) -> None:
        self.holders.shutdown(wait=False, cancel_futures=True)


def make_app(state: FakeProvider) -> web.Application:
    """The same API as :func:`make_handler`, answered by aiohttp on one event loop (:class:`_AsyncProvider`)."""
    provider = _AsyncProvider(state)
    app = web.Application(client_max_size=1 << 20)
    app.router.add_route("*", "/{tail:.*}", provider.handle)
    app.on_cleanup.append(provider.close_holders)
    return app


class AsyncServer:
    """An aiohttp application served on an event loop of its own, driven like the standard
    library's servers: ``serve_forever`` in a thread, then ``shutdown`` and ``server_close``."""

    def __init__(self, app: web.Application, *, host: str, port: int, backlog: int) -> None:
        self._loop = asyncio.new_event_loop()
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, host, port, backlog=backlog)
        self._loop.run_until_complete(site.start())
        sockets = self._runner.addresses
        self.server_address: tuple[str, int] = (sockets[0][0], sockets[0][1])
        self.request_queue_size = backlog  # the listen backlog, named as the standard library's servers name it
        self._done = threading.Event()
        self._done.set()

    def serve_forever(self) -> None:
        self._done.clear()
        try:
            self._loop.run_forever()
        finally:
            self._done.set()

    def shutdown(self) -> None:
        """Stop ``serve_forever`` and wait until it returned (from another thread)."""
        if self._loop.is_running():
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._done.wait()

    def server_close(self) -> None:
        self._loop.run_until_complete(self._runner.cleanup())
        self._loop.close()


def serve_async(state: FakeProvider, *, port: int, host: str = LOOPBACK) -> AsyncServer:
    """The fake provider for ``state`` (and its pool) on host:port, loopback unless told (0 picks
    a port), with the fleet's listen backlog. The caller runs ``serve_forever``."""
    return AsyncServer(make_app(state), host=host, port=port, backlog=FLEET_BACKLOG)
