"""Status writes handed over by probes (agn/operator/probe_pending.py, agn/operator/prober.py):
a probe does not hold its slot across its status write, the writes of one provider run one at
a time and in order, and until a write is done its decided status is what the leader judges
the provider by (agn/operator/views.py) — never a provider's status that no probe decided."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from test_prober_keepalive import Writes, _unprobed, started_prober, stopped

from agn.model import NetworkView, hard_failure
from agn.objects import rfc3339
from agn.operator.informer import Store
from agn.operator.probe_pending import PendingStatuses
from agn.operator.views import ProviderViews
from agn.provider.server import ProviderState, serve_async
from agnprocs import wait_for

T0 = 1_700_000_000.0


class BlockedWrites(Writes):
    """Status writes that wait until ``release`` is set (an API server that takes its time)."""

    def __init__(self, providers: Store):
        super().__init__(providers)
        self.release = threading.Event()
        self.started: list[str] = []

    def merge_patch_status(self, res, namespace, name, patch):
        with self.lock:
            self.started.append(name)
        assert self.release.wait(30), "the test never released the writes"
        return super().merge_patch_status(res, namespace, name, patch)


def test_a_probe_frees_its_slot_before_its_status_write_is_done():
    """One slot, three providers, status writes that do not return: every provider is still
    probed (a slot held across a write would stop at the first), and each provider's decided
    status is there for the reconcile while its write waits."""
    server = serve_async(ProviderState(name="pool"), port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    providers = Store()
    providers.replace([_unprobed(n, f"{base}/pool/{n}") for n in ("a", "b", "c")])
    writes = BlockedWrites(providers)
    stop = threading.Event()
    prober = started_prober(writes, providers, stop, probe_concurrency=1, probe_interval=60.0)
    try:
        decided = wait_for(lambda: len(prober.decided()) == 3 and prober.decided(), timeout=30, what="3 decided")
        assert {n: (uid, s["probe"]["healthy"]) for n, (uid, s) in decided.items()} == {
            n: (f"uid-{n}", True) for n in ("a", "b", "c")
        }
        assert not prober.first_round.is_set()  # a probe counts for the round once its write is done
        writes.release.set()
        wait_for(lambda: not prober.decided(), timeout=30, what="every decided status written")
        assert prober.first_round.is_set()
        assert all(providers.peek(n)["status"]["probe"]["healthy"] is True for n in ("a", "b", "c"))
    finally:
        writes.release.set()
        stopped(prober, stop, server)


def test_writes_of_one_provider_run_one_at_a_time_in_order_and_only_the_latest_waits():
    gate, order = threading.Event(), []
    first_running = threading.Event()

    def write(label: str, ok: bool = True):
        def run() -> bool:
            if label == "first":
                first_running.set()
                assert gate.wait(30)
            order.append(label)
            return ok

        return run

    with ThreadPoolExecutor(4) as pool:
        pending = PendingStatuses(pool)
        pending.submit("p", "u1", {"v": 1}, write("first"))
        assert first_running.wait(30)
        pending.submit("p", "u1", {"v": 2}, write("second"))
        pending.submit("p", "u1", {"v": 3}, write("third"))  # replaces "second": it carries every change
        assert pending.busy("p") and pending.basis("p", "u1") == {"v": 3}
        assert pending.decided() == {"p": ("u1", {"v": 3})}
        gate.set()
        wait_for(lambda: not pending.decided(), timeout=30, what="both writes done")
    assert order == ["first", "third"]


def test_a_failed_write_keeps_its_status_decided_but_no_longer_under_way():
    with ThreadPoolExecutor(2) as pool:
        pending = PendingStatuses(pool)
        pending.submit("p", "u1", {"v": 1}, lambda: False)
        wait_for(lambda: not pending.busy("p"), timeout=30, what="the write ended")
        # The probe did see it: judged by it still; the next probe compares with what is written.
        assert pending.decided() == {"p": ("u1", {"v": 1})} and pending.basis("p", "u1") is None
        pending.keep_only(["q"])  # deleted
        assert pending.decided() == {}


def _provider(name: str, uid: str, status: dict | None = None) -> dict:
    obj = {"metadata": {"name": name, "uid": uid, "resourceVersion": "1"}, "spec": {"endpoint": "http://h:1"}}
    if status is not None:
        obj["status"] = status
    return obj


def _healthy(at: float) -> dict:
    return {
        "probe": {"healthy": True, "healthObservedAt": rfc3339(at), "metricsObservedAt": rfc3339(at)},
        "conditions": [{"type": "MetricsFresh", "status": "True"}],
    }


def test_the_reconcile_judges_a_provider_by_its_decided_status_of_the_same_uid_only():
    net = NetworkView("net", metrics_max_age_seconds=45)
    store = Store()
    store.replace([_provider("new", "u1"), _provider("old", "u2", _healthy(T0)), _provider("gone", "u3")])
    views = ProviderViews(store)

    def judged(decided) -> dict[str, object]:
        return {v.name: hard_failure(v, net, now=T0 + 1) for v in views.views(heartbeat=None, decided=decided)}

    # Not probed yet: not admissible, whatever a view of it says.
    assert judged({})["new"] is not None and judged({})["old"] is None
    decided = {"new": ("u1", _healthy(T0)), "gone": ("an-earlier-uid", _healthy(T0))}
    out = judged(decided)
    assert out["new"] is None  # judged by what its probe decided, before the write is back
    assert out["gone"] is not None  # a status decided for another object of that name counts for nothing
    unhealthy = {"probe": {"healthy": False, "healthObservedAt": rfc3339(T0)}, "conditions": []}
    assert judged({"old": ("u2", unhealthy)})["old"] is not None  # an unhealthy decision excludes at once
    # The same decided status keeps the same view object (the verdicts' cache holds).
    first = views.views(heartbeat=None, decided=decided)
    assert all(a is b for a, b in zip(first, views.views(heartbeat=None, decided=decided), strict=True))
