"""``python -m agn.operator``: run the AGN operator for one namespace until SIGTERM/SIGINT.

Parses flags, connects, runs :class:`agn.operator.controller.Operator` (with leader election
over a Lease unless ``--no-leader-elect``), and maps failures to exit codes in this one
place: 0 after a clean stop, 2 for usage or kubeconfig errors, 1 for anything unexpected.
The signal handlers only set an event; a clean stop releases the lease.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from agn.argtypes import namespace_name, non_negative, object_name, positive
from agn.kube import ConfigError, Kube
from agn.logs import JsonLog
from agn.operator.controller import Operator
from agn.operator.elector import LeaderElector
from agn.operator.health import serve_health
from agn.operator.lease import DEFAULT_LEASE_NAME, LeaseTimings, new_identity
from agn.operator.metrics import OperatorMetrics
from agn.operator.settings import MAX_RECONCILE_WORKERS, Settings
from agn.shards import DEFAULT_SHARD_COUNT, MAX_SHARD_COUNT, check_shard_count

EXIT_OK = 0
EXIT_UNEXPECTED = 1
EXIT_USAGE = 2


def _whole_positive(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {value!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {value}")
    return number


def _shard_count(value: str) -> int:
    try:
        return check_shard_count(int(value))
    except ValueError as exc:
        message = str(exc) if value.strip().lstrip("+-").isdigit() else f"must be a whole number, got {value!r}"
        raise argparse.ArgumentTypeError(message) from None


def _workers(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {value!r}") from None
    if not 1 <= number <= MAX_RECONCILE_WORKERS:
        raise argparse.ArgumentTypeError(f"must be between 1 and {MAX_RECONCILE_WORKERS}, got {number}")
    return number


def _fraction(value: str) -> float:
    number = non_negative(value)
    if number > 1.0:
        raise argparse.ArgumentTypeError(f"must be within 0 and 1, got {value}")
    return number


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m agn.operator", description="Run the AGN operator.")
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
    parser.add_argument("--context", help="kube context (default: the current one)")
    parser.add_argument("--namespace", type=namespace_name, required=True, help="namespace to operate in")
    parser.add_argument(
        "--probe-interval",
        type=positive,
        default=1.0,
        metavar="SECONDS",
        help="how often each provider is probed, unless a network selecting it sets spec.probeIntervalSeconds",
    )
    parser.add_argument(
        "--probe-concurrency",
        type=_whole_positive,
        default=16,
        metavar="N",
        help="probes running at once; more due probes wait and are reported as backlog (agn_probe_backlog)",
    )
    parser.add_argument(
        "--probe-jitter",
        type=_fraction,
        default=0.1,
        metavar="FRACTION",
        help="random extra delay per probe, as a fraction (0-1) of its interval, on top of its stable phase",
    )
    parser.add_argument("--probe-timeout", type=positive, default=1.0, metavar="SECONDS")
    parser.add_argument(
        "--probe-failure-threshold",
        type=_whole_positive,
        default=3,
        metavar="N",
        help="consecutive failed health probes before a healthy provider counts as unavailable (as kubelet's)",
    )
    parser.add_argument("--resync", type=positive, default=5.0, metavar="SECONDS")
    parser.add_argument(
        "--coalesce-window",
        type=non_negative,
        default=0.1,
        metavar="SECONDS",
        help="quiet period that closes a batch of changes",
    )
    parser.add_argument(
        "--max-batch-wait",
        type=non_negative,
        default=1.0,
        metavar="SECONDS",
        help="longest a batch stays open while changes keep arriving",
    )
    parser.add_argument(
        "--overlay-shards",
        type=_shard_count,
        default=DEFAULT_SHARD_COUNT,
        metavar="N",
        help=f"shards per consumer overlay, 1-{MAX_SHARD_COUNT}: its candidates are stored in up to N "
        "RoutingOverlayShards named by a small RoutingOverlay index (default: %(default)s)",
    )
    parser.add_argument(
        "--reconcile-workers",
        type=_workers,
        default=1,
        metavar="N",
        help=f"consumers of one batch reconciled at once, 1-{MAX_RECONCILE_WORKERS}: their overlay writes "
        "overlap instead of queueing behind each other; worth it only when the API server has CPU to "
        "spare (default: %(default)s)",
    )
    parser.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")
    parser.add_argument(
        "--health-port",
        type=int,
        metavar="PORT",
        help="serve /healthz and /metrics (Prometheus) on this port (default: neither)",
    )
    parser.add_argument(
        "--health-host", default="127.0.0.1", help="address for /healthz and /metrics (in a pod: 0.0.0.0)"
    )
    election = parser.add_argument_group("leader election (only the Lease holder writes)")
    election.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="hold a coordination.k8s.io Lease before writing (default: on)",
    )
    election.add_argument(
        "--lease-name", type=object_name, default=DEFAULT_LEASE_NAME, help="Lease name in --namespace"
    )
    election.add_argument(
        "--lease-duration",
        type=_whole_positive,
        default=15,
        metavar="SECONDS",
        help="how long an unrenewed lease blocks a successor; the holder stops writing after "
        "two thirds of it without a successful renew",
    )
    election.add_argument(
        "--lease-renew-interval", type=positive, default=5.0, metavar="SECONDS", help="how often the holder renews"
    )
    election.add_argument(
        "--lease-retry-period",
        type=positive,
        default=1.0,
        metavar="SECONDS",
        help="how often a follower looks at the lease (and a failed renew is retried)",
    )
    election.add_argument("--identity", help="this process's lease identity (default: host_pid_random)")
    args = parser.parse_args(argv)
    args.timings = LeaseTimings(
        duration=args.lease_duration, renew_interval=args.lease_renew_interval, retry_period=args.lease_retry_period
    )
    problems = args.timings.problems()
    if problems:
        parser.error("; ".join(problems))
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    log = JsonLog(component="operator", level=args.log_level, fields={"namespace": args.namespace})
    stop = threading.Event()

    def on_signal(signum, frame) -> None:  # noqa: ANN001 - only sets the event; shutdown runs in main
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        kube = Kube.from_kubeconfig(
            kubeconfig=args.kubeconfig, context=args.context, field_manager="agn-operator", pool_size=32
        )
    except ConfigError as exc:
        log.error("cannot connect", error=str(exc))
        return EXIT_USAGE
    settings = Settings(
        probe_interval=args.probe_interval,
        probe_timeout=args.probe_timeout,
        probe_failure_threshold=args.probe_failure_threshold,
        probe_concurrency=args.probe_concurrency,
        probe_jitter=args.probe_jitter,
        resync=args.resync,
        coalesce_window=args.coalesce_window,
        max_batch_wait=args.max_batch_wait,
        overlay_shards=args.overlay_shards,
        reconcile_workers=args.reconcile_workers,
    )
    elector = None
    if args.leader_elect:
        elector = LeaderElector(
            kube,
            args.namespace,
            name=args.lease_name,
            identity=args.identity or new_identity(),
            timings=args.timings,
            log=log,
            stop=stop,
        )
    metrics = OperatorMetrics()
    operator = Operator(kube, args.namespace, settings=settings, log=log, stop=stop, elector=elector, metrics=metrics)
    health = None
    if args.health_port is not None:
        try:
            health = serve_health(
                operator.health, host=args.health_host, port=args.health_port, metrics=metrics.registry
            )
        except OSError as exc:
            log.error("cannot serve /healthz", error=str(exc), port=args.health_port)
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
