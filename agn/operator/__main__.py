"""``python -m agn.operator``: run the AGN operator for one namespace until SIGTERM/SIGINT.

Parses flags (declared once in :mod:`agn.operator.settings`), connects, runs :class:`agn.operator.controller.Operator` (with leader election
over a Lease unless ``--no-leader-elect``), and maps failures to exit codes in this one
place: 0 after a clean stop, 2 for usage or kubeconfig errors, 1 for anything unexpected.
The signal handlers only set an event; a clean stop releases the lease.
"""

from __future__ import annotations

import signal
import sys
import threading

from agn.kube import ConfigError, Kube
from agn.logs import JsonLog
from agn.operator.controller import Operator
from agn.operator.elector import LeaderElector
from agn.operator.health import serve_health
from agn.operator.lease import new_identity
from agn.operator.metrics import OperatorMetrics
from agn.operator.settings import Settings, parse_settings

EXIT_OK = 0
EXIT_UNEXPECTED = 1
EXIT_USAGE = 2
# The prober's event loop gives up the GIL at every socket wait and must take it back from the
# reconcile threads: at Python's 5 ms switch interval a probe of a few steps then waits tens of
# ms for it. 0.5 ms: 431 instead of 170 probes/s beside a CPU-bound thread (docs/operator.md).
GIL_SWITCH_SECONDS = 0.0005


def parse_args(argv: list[str] | None) -> Settings:
    """The settings from ``argv``; a usage error exits 2 with argparse's message naming the flag."""
    return parse_settings(argv)


def main(argv: list[str] | None = None) -> int:
    settings = parse_args(argv)
    sys.setswitchinterval(GIL_SWITCH_SECONDS)
    log = JsonLog(component="operator", level=settings.log_level, fields={"namespace": settings.namespace})
    stop = threading.Event()

    def on_signal(signum, frame) -> None:  # noqa: ANN001 - only sets the event; shutdown runs in main
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        kube = Kube.from_kubeconfig(
            kubeconfig=settings.kubeconfig, context=settings.context, field_manager="agn-operator", pool_size=32
        )
    except ConfigError as exc:
        log.error("cannot connect", error=str(exc))
        return EXIT_USAGE
    elector = None
    if settings.leader_elect:
        elector = LeaderElector(
            kube,
            settings.namespace,
            name=settings.lease_name,
            identity=settings.identity or new_identity(),
            timings=settings.timings,
            log=log,
            stop=stop,
        )
    metrics = OperatorMetrics()
    operator = Operator(
        kube, settings.namespace, settings=settings, log=log, stop=stop, elector=elector, metrics=metrics
    )
    health = None
    if settings.health_port is not None:
        try:
            health = serve_health(
                operator.health, host=settings.health_host, port=settings.health_port, metrics=metrics.registry
            )
        except OSError as exc:
            log.error("cannot serve /healthz", error=str(exc), port=settings.health_port)
            kube.close()
            return EXIT_UNEXPECTED
        threading.Thread(target=health.serve_forever, name="healthz", daemon=True).start()
    try:
        operator.run()
    except Exception as exc:  # noqa: BLE001 - the one place that turns a crash into an exit code
        log.error("operator crashed", error=repr(exc))
        return EXIT_UNEXPECTED
    finally:
        if health is not None:
            health.shutdown()
            health.server_close()
        kube.close()
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
