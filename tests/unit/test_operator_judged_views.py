"""The leader's judged provider views (agn/operator/judged.py): a renewed heartbeat keeps a view
as the same object (so the verdicts' cache holds) only while that cannot change its verdict,
and judges it again as every reader would otherwise."""

from __future__ import annotations

from agn.model import Exclusion, NetworkView, hard_failure, verdict_until
from agn.objects import provider_view, rfc3339, with_heartbeat
from agn.operator.judged import JudgedViews, hold_seconds
from agn.operator.verdicts import Verdicts

T0 = 1_700_000_000.0
NET = NetworkView("net", metrics_max_age_seconds=40)
HOLD = hold_seconds([NET, NetworkView("wide", metrics_max_age_seconds=360)])


def provider(name: str, *, observed: float = T0, healthy: bool = True) -> dict:
    return {
        "metadata": {"name": name, "uid": f"uid-{name}"},
        "spec": {"endpoint": f"http://127.0.0.1:9000/{name}"},
        "status": {
            "probe": {"healthy": healthy, "metricsObservedAt": rfc3339(observed)},
            "conditions": [{"type": "MetricsFresh", "status": "True"}],
        },
    }


FLEET = tuple(provider_view(provider(f"p{i}")) for i in range(50))


def test_the_hold_is_half_the_smallest_metrics_max_age():
    assert HOLD == 20.0
    assert hold_seconds([]) == 0.0


def test_a_renewed_heartbeat_keeps_every_recent_view_and_the_verdicts_cache_holds():
    judged, verdicts = JudgedViews(), Verdicts()
    first = judged.views(FLEET, heartbeat=T0 + 2, hold=HOLD, now=T0 + 3)
    verdicts.evaluate(NET, first, now=T0 + 3)
    again = judged.views(FLEET, heartbeat=T0 + 4, hold=HOLD, now=T0 + 5)
    assert all(a is b for a, b in zip(first, again, strict=True))
    assert verdicts.evaluate(NET, again, now=T0 + 5).recomputed == 0


def test_a_view_whose_reading_is_older_than_the_hold_is_judged_at_the_new_heartbeat():
    judged = JudgedViews()
    (old,) = judged.views(FLEET[:1], heartbeat=T0 + 2, hold=HOLD, now=T0 + 3)
    (new,) = judged.views(FLEET[:1], heartbeat=T0 + 30, hold=HOLD, now=T0 + 31)
    assert new is not old
    assert new.metrics_observed_at == T0 + 30


def test_no_heartbeat_or_an_older_one_judges_every_view_again():
    for heartbeat in (None, T0 + 1):
        judged = JudgedViews()
        (kept,) = judged.views(FLEET[:1], heartbeat=T0 + 5, hold=HOLD, now=T0 + 6)
        (again,) = judged.views(FLEET[:1], heartbeat=heartbeat, hold=HOLD, now=T0 + 7)
        assert again is not kept
        assert again == with_heartbeat(FLEET[0], heartbeat)


def test_a_changed_provider_is_judged_again():
    judged = JudgedViews()
    judged.views(FLEET[:1], heartbeat=T0 + 2, hold=HOLD, now=T0 + 3)
    down = provider_view(provider("p0", healthy=False))
    (view,) = judged.views((down,), heartbeat=T0 + 2, hold=HOLD, now=T0 + 3)
    assert view.healthy is False
    assert hard_failure(view, NET, now=T0 + 3) is Exclusion.UNAVAILABLE


def test_a_kept_view_is_judged_as_the_new_heartbeat_judges_it_whenever_it_is_kept():
    # Every heartbeat and clock a kept view can meet: fresh or not, and the verdict's expiry,
    # the same as judging the view at the newer heartbeat (the expiry never later).
    for observed in (T0 - 30, T0, T0 + 3):
        view = provider_view(provider("p0", observed=observed))
        for first in (T0, T0 + 2, T0 + 9):
            for step in (0.5, 2, 10, 19, 25):
                for late in (0, 5, 15, 19.9, 21, 35, 80):
                    judged = JudgedViews()
                    (kept,) = judged.views((view,), heartbeat=first, hold=HOLD, now=first)
                    heartbeat, now = first + step, first + step + late
                    (seen,) = judged.views((view,), heartbeat=heartbeat, hold=HOLD, now=now)
                    truth = with_heartbeat(view, heartbeat)
                    assert hard_failure(seen, NET, now=now) == hard_failure(truth, NET, now=now)
                    assert verdict_until(seen, NET, now=now) <= verdict_until(truth, NET, now=now)
                    if seen is kept and hard_failure(truth, NET, now=now) is None:
                        assert now < verdict_until(seen, NET, now=now)
