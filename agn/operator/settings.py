"""The operator's settings: every flag of ``python -m agn.operator``, declared once.

One frozen dataclass, checked when it is made. Each field is a flag (:func:`agn.flags.setting`):
its default, help and type here give ``--help``, the parser, the command lines the runtimes
start it with (:mod:`xtask.components`) and the table in ``docs/settings.md``. To add a flag,
add a field here (and use it); nothing else lists the flags.

:mod:`agn.operator.__main__` parses it; the controller and the prober read the tunables from
this one object (the controller hands it to the prober whole), so a new ``--probe-*`` flag is
a field here that :mod:`agn.operator.prober` reads, and nothing in between. It holds no state
and does no I/O.
"""

from __future__ import annotations

import argparse
import dataclasses

from agn.argtypes import namespace_name, non_negative, object_name, positive
from agn.flags import parse, setting
from agn.operator.lease import DEFAULT_LEASE_NAME, LeaseTimings
from agn.shards import DEFAULT_SHARD_COUNT, MAX_SHARD_COUNT, check_shard_count

MAX_RECONCILE_WORKERS = 32
PROG = "python -m agn.operator"
ELECTION = "leader election (only the Lease holder writes)"


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


@dataclasses.dataclass(frozen=True, kw_only=True)
class Settings:
    kubeconfig: str | None = setting(None, help="kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")
    context: str | None = setting(None, help="kube context (default: the current one)")
    # Required on the command line; code that makes an Operator passes its namespace separately.
    namespace: str = setting("", type=namespace_name, required=True, help="namespace to operate in")
    probe_interval: float = setting(
        1.0,
        type=positive,
        metavar="SECONDS",
        help="how often each provider is probed, unless a network selecting it sets spec.probeIntervalSeconds",
    )
    # At most this many probes at once; more due ones wait (and are reported as backlog).
    probe_concurrency: int = setting(
        64,
        type=_whole_positive,
        metavar="N",
        help="probes running at once; more due probes wait and are reported as backlog (agn_probe_backlog)",
    )
    # Random extra delay per probe, as a fraction of its interval, on top of its stable phase.
    probe_jitter: float = setting(
        0.1,
        type=_fraction,
        metavar="FRACTION",
        help="random extra delay per probe, as a fraction (0-1) of its interval, on top of its stable phase",
    )
    probe_timeout: float = setting(1.0, type=positive, metavar="SECONDS", help="bound on one probe request")
    probe_failure_threshold: int = setting(
        3,
        type=_whole_positive,
        metavar="N",
        help="consecutive failed health probes before a healthy provider counts as unavailable (as kubelet's)",
    )
    # HAProxy's fastinter: a failed probe of a provider still counted available is followed by
    # the next one this soon, so a dead provider is out in about one interval plus
    # (threshold - 1) x this, not threshold intervals (agn.operator.schedule.fast_recheck).
    probe_fast_interval: float = setting(
        0.5,
        type=positive,
        metavar="SECONDS",
        help="after a failed probe of a provider still counted available, probe it again this soon "
        "(never later than its interval), until it passes or reaches --probe-failure-threshold",
    )
    # HAProxy's downinter: a provider counted unavailable is probed again this soon, so one that
    # answers again is re-admitted within about this; stretched when many are down, so their
    # re-checks hold at most a quarter of the slots (agn.operator.schedule.down_recheck).
    probe_down_interval: float = setting(
        1.0,
        type=positive,
        metavar="SECONDS",
        help="probe a provider whose health probes failed (counted unavailable) again this soon (never later "
        "than its interval; longer while so many are down that their re-checks would hold over a quarter "
        "of --probe-concurrency)",
    )
    # The write-every-probe behaviour before the probes heartbeat, kept only so one benchmark
    # run can measure both (scripts/bench/prober_writes.py); see docs/operator.md.
    status_refresh: bool = setting(
        False,
        help="compare only: rewrite an unchanged provider status every min(10 s, metricsMaxAgeSeconds / 3) "
        "and publish every provider's load, instead of writing changes and renewing the probes heartbeat",
    )
    resync: float = setting(
        5.0, type=positive, metavar="SECONDS", help="how often every consumer is reconciled even without a change"
    )
    coalesce_window: float = setting(
        0.1, type=non_negative, metavar="SECONDS", help="quiet period that closes a batch of changes"
    )
    # During a long burst (a gateway-wide drain of hundreds of providers) no quiet period comes;
    # this caps how long a change waits, trading a few revisions for bounded latency.
    max_batch_wait: float = setting(
        1.0, type=non_negative, metavar="SECONDS", help="longest a batch stays open while changes keep arriving"
    )
    # A wave of a drain writes a hundred providers over a few seconds: a batch begun less than
    # --max-batch-wait after the last one is part of such a burst and stays open up to this, so
    # a burst of up to max_batch_wait + burst_batch_wait seconds is two revisions (agn.operator.workqueue).
    burst_batch_wait: float = setting(
        4.0,
        type=non_negative,
        metavar="SECONDS",
        help="longest a batch stays open within a burst of changes (it began less than --max-batch-wait after "
        "the last batch); --max-batch-wait or less turns bursts off; 3 x this bounds how long a burst's "
        "additions are held while providers await their first probe (0: never)",
    )

    # Each consumer's overlay is stored as an index plus up to this many shards (agn.shards), so
    # no object grows with the fleet past etcd's request limit and a drain rewrites one shard.
    overlay_shards: int = setting(
        DEFAULT_SHARD_COUNT,
        type=_shard_count,
        metavar="N",
        help=f"shards per network, 1-{MAX_SHARD_COUNT}: a network's candidates are stored in up to N "
        "RoutingOverlayShards its consumers share, each consumer's overlay in a small RoutingOverlay "
        "index naming them (default: %(default)s)",
    )
    # Consumers of one batch reconciled at once. Planning is cheap (sized by the change); what a
    # consumer waits for is its writes' round trips, which more workers overlap. On an API server
    # short of CPU (2 cores, measured) overlapping big shard writes only makes them compete, so
    # the default is one at a time; a larger control plane may gain from a few.
    reconcile_workers: int = setting(
        1,
        type=_workers,
        metavar="N",
        help=f"consumers of one batch reconciled at once, 1-{MAX_RECONCILE_WORKERS}: their overlay writes "
        "overlap instead of queueing behind each other; worth it only when the API server has CPU to "
        "spare (default: %(default)s)",
    )
    log_level: str = setting(
        "info", choices=("debug", "info", "warning", "error"), help="least severe log line written"
    )
    health_port: int | None = setting(
        None, type=int, metavar="PORT", help="serve /healthz and /metrics (Prometheus) on this port (default: neither)"
    )
    health_host: str = setting("127.0.0.1", help="address for /healthz and /metrics (in a pod: 0.0.0.0)")
    leader_elect: bool = setting(
        True, group=ELECTION, help="hold a coordination.k8s.io Lease before writing (default: on)"
    )
    lease_name: str = setting(DEFAULT_LEASE_NAME, type=object_name, group=ELECTION, help="Lease name in --namespace")
    lease_duration: int = setting(
        15,
        type=_whole_positive,
        metavar="SECONDS",
        group=ELECTION,
        help="how long an unrenewed lease blocks a successor; the holder stops writing after "
        "two thirds of it without a successful renew",
    )
    lease_renew_interval: float = setting(
        5.0, type=positive, metavar="SECONDS", group=ELECTION, help="how often the holder renews"
    )
    lease_retry_period: float = setting(
        1.0,
        type=positive,
        metavar="SECONDS",
        group=ELECTION,
        help="how often a follower looks at the lease (and a failed renew is retried)",
    )
    identity: str | None = setting(
        None, group=ELECTION, help="this process's lease identity (default: host_pid_random)"
    )

    def __post_init__(self) -> None:
        check_shard_count(self.overlay_shards)
        if not 1 <= self.reconcile_workers <= MAX_RECONCILE_WORKERS:
            raise ValueError(f"reconcile workers must be between 1 and {MAX_RECONCILE_WORKERS}")
        problems = self.timings.problems()
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def timings(self) -> LeaseTimings:
        return LeaseTimings(
            duration=self.lease_duration, renew_interval=self.lease_renew_interval, retry_period=self.lease_retry_period
        )


def parse_settings(argv: list[str] | None) -> Settings:
    """The operator's settings from its command line; a usage error exits 2 naming the flag."""
    return parse(Settings, argv, prog=PROG, description="Run the AGN operator.")
