"""``python -m agn.gateway``: run one consumer gateway.

    python -m agn.gateway [--kubeconfig PATH] [--context CTX] [--namespace NS] --consumer NAME [--port N] [--host ADDR]

(every flag: :mod:`agn.gateway.settings`, and ``docs/settings.md``)

Wiring only: bind the HTTP server, start the status writer and the overlay follower, wait for
SIGTERM/SIGINT (the handlers only set an event), then stop everything in ``finally``.

Exit codes: 0 stopped by a signal; 1 could not start (kubeconfig/context unusable, port
taken); 2 usage error.
"""

from __future__ import annotations

import functools
import signal
import sys
import threading
from http.server import ThreadingHTTPServer
from typing import Any

from agn.credentials import Tokens
from agn.gateway.follower import OverlayFollower
from agn.gateway.metrics import GatewayMetrics
from agn.gateway.server import GatewayApp, serve_app
from agn.gateway.sessions import run_reports
from agn.gateway.settings import GatewaySettings, parse_settings
from agn.gateway.status_writer import StatusWriter
from agn.gateway.table import RoutingTable
from agn.kube import Kube, KubeError
from agn.logs import JsonLog
from agn.serverclock import ServerClock

EXIT_OK = 0
EXIT_START_FAILED = 1


def parse_args(argv: list[str] | None) -> GatewaySettings:
    """The settings from ``argv`` (declared in :mod:`agn.gateway.settings`); a usage error exits 2."""
    return parse_settings(argv)


def main(argv: list[str] | None = None) -> int:
    settings = parse_args(argv)
    log = JsonLog(component="gateway", fields={"consumer": settings.consumer}, level=settings.log_level)
    try:
        kube = Kube.from_kubeconfig(
            kubeconfig=settings.kubeconfig, context=settings.context, field_manager="agn-gateway"
        )
        namespace = settings.namespace or kube.namespace
    except KubeError as exc:
        log.error("start_failed", error=str(exc))
        return EXIT_START_FAILED
    log.fields["namespace"] = namespace
    stop = _stop_on_signals()
    # Slow-start windows are on the API server's clock: the table judges them on this estimate of
    # it (the offset read by a thread of its own; this host's clock until the first read).
    clock = ServerClock(kube)
    table = RoutingTable(clock=clock.estimate, session_ttl=settings.session_ttl)
    status = StatusWriter(kube, namespace=namespace, consumer=settings.consumer, log=log)
    follower = OverlayFollower(
        kube, namespace=namespace, consumer=settings.consumer, table=table, status=status, log=log, stop=stop
    )
    reporter = _LastReport(table, interval=settings.sessions_report_interval)
    try:
        tokens = Tokens(functools.partial(kube.secret_data, namespace))
        server = _listen(settings, table, follower, reporter, log=log, tokens=tokens)
    except OSError as exc:
        log.error("start_failed", error=f"cannot listen on {settings.host}:{settings.port}: {exc}")
        kube.close()
        return EXIT_START_FAILED
    background = [
        threading.Thread(target=clock.keep_reading, args=(stop, log), name="server-clock", daemon=True),
        threading.Thread(  # status.sessions (agn.gateway.sessions)
            target=run_reports,
            args=(reporter.report, status.submit),
            kwargs={"interval": settings.sessions_report_interval, "stop": stop},
            name="sessions",
            daemon=True,
        ),
    ]
    _run(server, status, follower, background, kube=kube, log=log, stop=stop)
    return EXIT_OK


def _stop_on_signals() -> threading.Event:
    """An event SIGTERM and SIGINT set; the handlers do nothing else (shutdown happens in ``_run``'s finally)."""
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop


class _LastReport:
    """Makes ``status.sessions`` from the table and keeps the last one (the metrics show it)."""

    def __init__(self, table: RoutingTable, *, interval: float) -> None:
        self._table = table
        self._interval = interval
        self.last: dict[str, Any] | None = None

    def report(self) -> dict[str, Any] | None:
        self.last = self._table.session_report(interval=self._interval)
        return self.last


def _listen(
    settings: GatewaySettings,
    table: RoutingTable,
    follower: OverlayFollower,
    reporter: _LastReport,
    *,
    log: JsonLog,
    tokens: Tokens,
) -> ThreadingHTTPServer:
    """The gateway's HTTP server, bound (``OSError`` when it cannot listen), with its metrics."""
    metrics = GatewayMetrics(
        accepted=lambda: follower.latest_revision,
        serving=lambda: overlay.revision if (overlay := table.serving) else None,
        pending=lambda: follower.pending_revision,
        shard_gets=lambda: follower.shard_gets,
        sessions=lambda: reporter.last,
    )
    app = GatewayApp(
        table=table,
        consumer=settings.consumer,
        log=log,
        upstream_timeout=settings.upstream_timeout,
        health=follower.health_report,
        metrics=metrics,
        # Providers' credentials: the Secrets their overlay candidates name, read as this gateway.
        tokens=tokens,
    )
    return serve_app(app, port=settings.port, host=settings.host)


def _run(
    server: ThreadingHTTPServer,
    status: StatusWriter,
    follower: OverlayFollower,
    background: list[threading.Thread],
    *,
    kube: Kube,
    log: JsonLog,
    stop: threading.Event,
) -> None:
    """Serve (at the server's address, as reported in the status), write status and follow the
    overlay until ``stop``; then stop all of it."""
    host, port = server.server_address[:2]
    address = f"http://{host!s}:{port}"
    threads = [
        threading.Thread(target=server.serve_forever, name="http", daemon=True),
        threading.Thread(target=status.run, name="status", daemon=True),
        # Daemon: a watch blocks until its server-side timeout; exiting must not wait for it.
        threading.Thread(target=follower.run, name="follower", daemon=True),
        *background,  # the server clock's reads and the session reports: they end with ``stop``
    ]
    try:
        for thread in threads:
            thread.start()
        status.submit({"address": address})
        log.info("started", address=address, api_server=kube.host)
        stop.wait()
        log.info("stopping")
    finally:
        stop.set()
        server.shutdown()
        server.server_close()
        status.close()
        for thread in threads[:2]:
            thread.join(timeout=5)
        kube.close()
        log.info("stopped")


if __name__ == "__main__":
    sys.exit(main())
