"""What the leading operator remembers between reconciles, and forgetting it.

All of it belongs to one leadership term: another leader may publish (and consumers may come
and go) before this process leads again, so a new term starts from a fresh
:class:`TermMemory` and the caches are the truth. Within a term, what is kept per consumer,
network or provider is dropped once that object is gone (on its reconcile, and on every
resync against the cache), so nothing keyed by a deleted name stays and a long-running
operator does not only grow.

Plain data: it reads no cache and makes no API call; the controller says what is gone.
"""

from __future__ import annotations

import dataclasses

from agn.model import Overlay
from agn.netshards import NetworkSplit
from agn.operator.burst import Published
from agn.operator.events import HardFailures
from agn.operator.pruning import prune
from agn.operator.reconcile import Planned
from agn.operator.verdicts import Verdicts


@dataclasses.dataclass
class TermMemory:
    """One term's memory. Work proportional to change (:mod:`agn.operator.verdicts`) lives here:
    per network, each provider's selection and hard failure; per consumer, the last plan with
    what it was planned from."""

    # Per consumer: its uid and the last overlay published, for revision continuity if an
    # overlay is deleted under us.
    published: dict[str, tuple[str, Overlay]] = dataclasses.field(default_factory=dict)
    # Per consumer: the missing network last warned about, so the warning is logged once.
    missing_network: dict[str, str] = dataclasses.field(default_factory=dict)
    plans: dict[str, Planned] = dataclasses.field(default_factory=dict)
    # Per consumer: what its last publication was judged on, and since when additions are held
    # (agn.operator.burst).
    judged_on: dict[str, Published] = dataclasses.field(default_factory=dict)
    # Per network: the plan of its candidates, stored as network shards (agn.operator.network_storage).
    network_plans: dict[str, tuple[Planned, NetworkSplit]] = dataclasses.field(default_factory=dict)
    verdicts: Verdicts = dataclasses.field(default_factory=Verdicts)
    # Per (network, provider): the hard failure last reported, so only transitions become Events.
    hard_failures: HardFailures = dataclasses.field(default_factory=HardFailures)

    def published_overlay(self, consumer: str, uid: str) -> Overlay | None:
        """The overlay last published for this incarnation (uid) of the consumer, if any."""
        published = self.published.get(consumer)
        return published[1] if published is not None and published[0] == uid else None

    def forget(self, consumer: str) -> None:
        """Drop everything remembered about ``consumer`` (it is gone)."""
        self.published.pop(consumer, None)
        self.missing_network.pop(consumer, None)
        self.plans.pop(consumer, None)
        self.judged_on.pop(consumer, None)

    def forget_deleted(self, *, consumers: set[str], providers: set[str], networks: set[str]) -> list[str]:
        """Drop what is remembered about every object not among the live names given; returns
        the consumers forgotten, sorted."""
        self.hard_failures.forget(providers, networks)
        self.verdicts.forget(networks)
        prune(self.network_plans, networks)
        return sorted(
            set(prune(self.published, consumers))
            | set(prune(self.missing_network, consumers))
            | set(prune(self.plans, consumers))
            | set(prune(self.judged_on, consumers))
        )

    def consumers(self) -> set[str]:
        """Consumer names anything is remembered for."""
        return set(self.published) | set(self.missing_network) | set(self.plans) | set(self.judged_on)
