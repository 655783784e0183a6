"""A fleet of fake providers as the operator's pure core sees them (:class:`agn.model.ProviderView`),
for the unit tests and the pure benchmarks (``scripts/bench/overlay_forms.py``,
``scripts/bench/operator_plan.py``): one builder, so a fleet's shape is said once.

A test double, like the rest of :mod:`agn.provider`; pure: no I/O, no clock (``now`` is given).
"""

from __future__ import annotations

from collections.abc import Collection

from agn.model import ProviderView, candidate_id


def provider_views(
    n: int,
    *,
    now: float,
    name: str = "p{i}",
    groups: int = 3,
    ranks: int = 5,
    drained: Collection[int] = frozenset(),
    unhealthy: Collection[int] = frozenset(),
) -> list[ProviderView]:
    """``n`` providers named ``name.format(i=i)`` (uid ``uid-<i>``), served by one fake process's
    ``/pool/<name>/``, in ``groups`` selection groups and ``ranks`` ranks round-robin, metrics read
    at ``now``; the indexes in ``drained`` are drained, those in ``unhealthy`` fail their health."""
    views = []
    for i in range(n):
        provider = name.format(i=i)
        views.append(
            ProviderView(
                name=provider,
                endpoint=f"http://127.0.0.1:9000/pool/{provider}/",
                candidate_id=candidate_id(f"uid-{i}"),
                selection_group=f"g{i % groups}",
                rank=i % ranks,
                drain=i in drained,
                healthy=i not in unhealthy,
                metrics_observed_at=now,
            )
        )
    return views
