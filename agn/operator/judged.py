"""The providers as the leader's reconcile judges them: each cache view as of the probes
heartbeat (:func:`agn.objects.with_heartbeat`), kept as the same object for as long as that
cannot change a verdict.

The heartbeat is renewed every couple of seconds. Judging every provider again at each renewal
made a new view object of each, so the verdicts' cache (keyed by view identity) missed for the
whole fleet: at 5,000 providers about 0.1 s of one core per reconcile on a quiet machine (more
beside a busy prober), paid by a single drain waiting for its overlay.

A heartbeat only ever makes a fresh reading count as observed later. A view judged at an
earlier heartbeat of the same term, whose reading is at most ``hold`` seconds old, is therefore
judged the same at the newer one: fresh by both, and a provider's verdict depends on the reading
only through that freshness. ``hold`` is half the smallest ``metricsMaxAgeSeconds`` of any
network (:func:`hold_seconds`), so a kept view is judged again well before its reading could age
out under the older heartbeat, and the verdict's expiry (computed from the older reading, so
never later than the truth) is never reached on a kept view. Any other change judges it again:
the provider (a new cache view), no heartbeat, or one older than the kept view's (a new term).

Reads only; one caller (the reconcile worker) at a time.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from agn.model import NetworkView, ProviderView
from agn.objects import with_heartbeat


def hold_seconds(networks: Iterable[NetworkView]) -> float:
    """How old a reading of a kept view may be: half the smallest metrics max age (0: none)."""
    return min((n.metrics_max_age_seconds for n in networks), default=0) / 2.0


class JudgedViews:
    """Every provider's judged view for one batch, the same objects while nothing that matters moved."""

    def __init__(self) -> None:
        # name -> (the cache's view, the heartbeat it was judged at, the judged view)
        self._kept: dict[str, tuple[ProviderView, float | None, ProviderView]] = {}

    def views(
        self, views: Sequence[ProviderView], *, heartbeat: float | None, hold: float, now: float
    ) -> tuple[ProviderView, ...]:
        """``views``: the cache's, each judged as of ``heartbeat`` (unix seconds; None: none
        renewed in this term); ``now``: unix seconds."""
        kept_all, fresh = self._kept, {}
        out = []
        for view in views:
            kept = kept_all.get(view.name)
            if kept is None or kept[0] is not view or not _still_judged(kept[1], kept[2], heartbeat, hold, now):
                kept = (view, heartbeat, with_heartbeat(view, heartbeat))
            fresh[view.name] = kept
            out.append(kept[2])
        self._kept = fresh
        return tuple(out)


def _still_judged(
    judged_at: float | None, judged: ProviderView, heartbeat: float | None, hold: float, now: float
) -> bool:
    """Whether a view judged at heartbeat ``judged_at`` stands for ``heartbeat``."""
    if judged_at == heartbeat:
        return True
    if heartbeat is None or judged_at is None or heartbeat < judged_at:
        return False
    seen = judged.metrics_observed_at
    return seen is not None and now - seen <= hold
