"""Provider views of a pool served at ``127.0.0.1:9000/pool/<name>/`` for the operator's unit
tests: provider ``p<i>`` (labels ``pool: a``, healthy, metrics read at ``now``), fields overridden
by keyword."""

from __future__ import annotations

from typing import Any

from agn.model import ProviderView, candidate_id


def pool_view(i: int, *, now: float, **kw: Any) -> ProviderView:
    base: dict[str, Any] = dict(
        name=f"p{i}",
        endpoint=f"http://127.0.0.1:9000/pool/p{i}/",
        candidate_id=candidate_id(f"uid-{i}"),
        labels={"pool": "a"},
        healthy=True,
        metrics_observed_at=now,
    )
    base.update(kw)
    return ProviderView(**base)
