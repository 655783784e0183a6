"""The operator's tunables: one frozen dataclass, checked when it is made.

:mod:`agn.operator.__main__` builds it from flags; the controller and the prober
read it (the prober through the controller). It holds no state and does no I/O.
"""

from __future__ import annotations

import dataclasses

from agn.shards import DEFAULT_SHARD_COUNT, check_shard_count

MAX_RECONCILE_WORKERS = 32


@dataclasses.dataclass(frozen=True)
class Settings:
    probe_interval: float = 1.0
    probe_timeout: float = 1.0
    probe_failure_threshold: int = 3
    # At most this many probes at once; more due ones wait (and are reported as backlog).
    probe_concurrency: int = 16
    # Random extra delay per probe, as a fraction of its interval, on top of its stable phase.
    probe_jitter: float = 0.1
    resync: float = 5.0
    coalesce_window: float = 0.1
    # During a long burst (a gateway-wide drain of hundreds of providers) no quiet period comes;
    # this caps how long a change waits, trading a few revisions for bounded latency.
    max_batch_wait: float = 1.0
    # Each consumer's overlay is stored as an index plus up to this many shards (agn.shards), so
    # no object grows with the fleet past etcd's request limit and a drain rewrites one shard.
    overlay_shards: int = DEFAULT_SHARD_COUNT
    # Consumers of one batch reconciled at once. Planning is cheap (sized by the change); what a
    # consumer waits for is its writes' round trips, which more workers overlap. On an API server
    # short of CPU (2 cores, measured) overlapping big shard writes only makes them compete, so
    # the default is one at a time; a larger control plane may gain from a few.
    reconcile_workers: int = 1

    def __post_init__(self) -> None:
        check_shard_count(self.overlay_shards)
        if not 1 <= self.reconcile_workers <= MAX_RECONCILE_WORKERS:
            raise ValueError(f"reconcile workers must be between 1 and {MAX_RECONCILE_WORKERS}")
