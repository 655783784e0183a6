"""The prober's transport: probes of many providers behind one host:port share a few kept-alive
connections (counted by the server that accepts them), and the prober still probes each of them."""

from __future__ import annotations

import io
import threading
import time

from aiohttp import web

from agn.logs import JsonLog
from agn.operator.informer import Store
from agn.operator.prober import Prober, ProbeStores
from agn.operator.provider_status import ProbeOutcome
from agn.operator.settings import Settings
from agn.provider.server import FLEET_BACKLOG, AsyncServer, FakeProvider, make_app, serve_async
from agnprocs import http_json, wait_for


class Leader:
    identity = "me"

    def is_leader(self):
        return True

    def term(self):
        return 1


class Writes:
    """Stands in for the API server: answers a status merge patch with the object patched."""

    def __init__(self, providers: Store):
        self.providers = providers
        self.lock = threading.Lock()
        self.patched: list[str] = []

    def merge_patch_status(self, res, namespace, name, patch):
        with self.lock:
            self.patched.append(name)
        obj = self.providers.get(name)
        meta = dict(obj["metadata"], resourceVersion=str(int(obj["metadata"]["resourceVersion"]) + 1))
        return dict(obj, metadata=meta, status=dict(obj.get("status") or {}, **patch["status"]))


def started_prober(writes: Writes, providers: Store, stop: threading.Event, **settings) -> Prober:
    """A real prober leading term 1 over ``providers``, with 4 slots, started."""
    prober = Prober(
        writes,
        "ns",
        settings=Settings(**{"probe_concurrency": 4, "probe_jitter": 0.0, **settings}),
        leadership=Leader(),
        stores=ProbeStores(providers=providers, networks=Store()),
        log=JsonLog(component="test", stream=io.StringIO()),
        stop=stop,
    )
    prober.begin_term(1)
    prober.start()
    return prober


class RecordingWrites(Writes):
    """Also records when each status write happened and the ``healthy`` it wrote."""

    def __init__(self, providers: Store):
        super().__init__(providers)
        self.written: list[tuple[float, object]] = []

    def merge_patch_status(self, res, namespace, name, patch):
        self.written.append((time.monotonic(), (patch["status"].get("probe") or {}).get("healthy")))
        return super().merge_patch_status(res, namespace, name, patch)

    def first(self, healthy: bool, *, what: str) -> float:
        """When ``healthy`` was first written, waiting up to 60 s for it."""
        return wait_for(
            lambda: next((at for at, h in self.written if h is healthy), None), timeout=60, interval=0.01, what=what
        )


def stopped(prober: Prober, stop: threading.Event, server) -> None:
    """Stop the prober, then the fake provider's server."""
    stop.set()
    prober.stop(timeout=10)
    server.shutdown()
    server.server_close()


def one_pooled_provider():
    """A fake provider pool serving in a thread, and a store holding its provider ``p``."""
    server = serve_async(FakeProvider(name="pool"), port=0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    providers = Store()
    providers.replace([_unprobed("p", f"{base}/pool/p")])
    return server, base, providers


def _unprobed(name: str, endpoint: str) -> dict:
    return {"metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "1"}, "spec": {"endpoint": endpoint}}


def counting_pool():
    """A fake provider pool that counts the connections it accepted."""
    app = make_app(FakeProvider(name="pool"))
    accepted: list[object] = []  # each connection's client address, once

    @web.middleware
    async def count(request: web.Request, handler):
        peer = request.transport.get_extra_info("peername") if request.transport else None
        if peer not in accepted:
            accepted.append(peer)
        return await handler(request)

    app.middlewares.append(count)
    server = AsyncServer(app, host="127.0.0.1", port=0, backlog=FLEET_BACKLOG)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, accepted


def test_probes_of_one_host_share_kept_alive_connections():
    server, accepted = counting_pool()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    names = [f"p{i}" for i in range(20)]
    providers = Store()
    providers.replace(
        [
            {
                "metadata": {"name": n, "uid": f"uid-{n}", "resourceVersion": "1"},
                "spec": {"endpoint": f"{base}/pool/{n}"},
            }
            for n in names
        ]
    )
    stop = threading.Event()
    prober = started_prober(Writes(providers), providers, stop, probe_interval=0.2, probe_timeout=5.0)
    try:
        deadline = time.monotonic() + 60
        while (prober.metrics.registry.get_sample_value("agn_probe_duration_seconds_count") or 0) < 3 * len(names):
            assert time.monotonic() < deadline, "the prober did not probe every provider three times"
            stop.wait(0.05)
        stop.set()
        prober.stop(timeout=10)
        connections = len(accepted)
        probes = prober.metrics.registry.get_sample_value("agn_probe_duration_seconds_count")
        # Each provider's own probes reached the pool (none was skipped as invalid).
        checks = {n: http_json(f"{base}/pool/{n}/admin/state")["healthChecks"] for n in names}
    finally:
        stopped(prober, stop, server)
    assert min(checks.values()) >= 1 and sum(checks.values()) == probes, checks
    # Two requests per probe; without keep-alive every one of them is a new connection.
    assert connections <= 4, f"{connections} connections for {probes:.0f} probes"


def test_a_failed_probe_of_an_available_provider_is_rechecked_at_the_fast_interval():
    """Interval 4 s: each grid slot is at least 2 s after the last probe, so without quick
    re-checks the two more failures the threshold asks for take 4 s or more after the first.
    With them (0.1 s) the provider is written unavailable well within that."""
    server, base, providers = one_pooled_provider()
    writes = RecordingWrites(providers)
    stop = threading.Event()
    prober = started_prober(
        writes,
        providers,
        stop,
        probe_interval=4.0,
        probe_timeout=2.0,
        probe_fast_interval=0.1,
        probe_failure_threshold=3,
    )
    failures = lambda: prober.metrics.registry.get_sample_value(  # noqa: E731
        "agn_probe_failures_total", {"provider": "p", "check": "health"}
    )
    try:
        deadline = time.monotonic() + 60
        writes.first(True, what="the first probe was not written healthy")
        http_json(f"{base}/pool/p/admin/state", method="POST", body={"healthy": False})
        while not failures():
            assert time.monotonic() < deadline, "no failed probe"
            stop.wait(0.01)
        first_failure = time.monotonic()
        excluded = writes.first(False, what="the provider was never written unavailable")
    finally:
        stopped(prober, stop, server)
    assert failures() == 3
    assert excluded - first_failure < 2.0, f"{excluded - first_failure:.2f}s from the first failed probe to exclusion"


def test_down_providers_are_rechecked_at_the_down_interval_and_many_down_stretch_it():
    """What each failed probe asks of the schedule: quick re-checks while the provider is still
    counted available, then down re-checks; with more providers down than a quarter of the
    slots holds (each for its whole timeout), the down re-checks stretch, up to the interval."""
    names = [f"p{i}" for i in range(40)]
    providers = Store()
    providers.replace([_unprobed(n, f"http://127.0.0.1:9/pool/{n}") for n in names])
    prober = Prober(
        Writes(providers),
        "ns",
        # A quarter of 8 slots: 2; timeout 0.5 s, so 4 providers down fit at 1 s.
        settings=Settings(
            probe_concurrency=8,
            probe_jitter=0.0,
            probe_interval=5.0,
            probe_timeout=0.5,
            probe_fast_interval=0.25,
            probe_down_interval=1.0,
            probe_failure_threshold=3,
        ),
        leadership=Leader(),
        stores=ProbeStores(providers=providers, networks=Store()),
        log=JsonLog(component="test", stream=io.StringIO()),
        stop=threading.Event(),
    )

    def probed(name: str, healthy: bool) -> float | None:
        outcome = ProbeOutcome(
            observed_at=time.time(), probed=True, healthy=healthy, health_error=None if healthy else "x"
        )
        write = prober.recorder.record(providers.peek(name), "http://127.0.0.1:9", outcome, seconds=0.01)
        if write is not None:
            write()
        return prober.recorder.memory[name].recheck_in

    assert probed("p0", True) is None  # healthy: its grid
    assert [probed("p0", False) for _ in range(3)] == [0.25, 0.25, 1.0]  # suspect, suspect, down
    assert probed("p0", False) == 1.0  # still down: re-checked at the down interval
    assert probed("p0", True) is None  # back: its grid again
    # A provider that failed its first probe (never healthy) is down at once.
    assert probed("p1", False) == 1.0
    # 40 down: they would hold 40 x 0.5 s of slots per second at 1 s; a quarter (2 slots) fits
    # them at 10 s, so they are re-checked at the interval (5 s), as without down re-checks.
    assert [probed(n, False) for n in names][-1] == 5.0
    assert probed("p2", True) is None
    assert probed("p3", False) == 5.0  # still 39 down
    for n in names[4:]:
        probed(n, True)  # 3 left down (p0, p1, p3): their re-checks fit at 1 s
    assert probed("p1", False) == 1.0
    # A deleted provider stops counting.
    providers.remove("p1")
    prober.tick(time.monotonic())
    assert "p1" not in prober.recorder.down


def test_a_down_provider_that_answers_again_is_readmitted_within_the_down_interval():
    """Interval 4 s: after the probe that made it unavailable, its next grid slot is 2 s or more
    away. With down re-checks (0.25 s here) a provider that answers again is written available within
    a fraction of that."""
    server, base, providers = one_pooled_provider()
    writes = RecordingWrites(providers)
    http_json(f"{base}/pool/p/admin/state", method="POST", body={"healthy": False})  # down from its first probe
    stop = threading.Event()
    # 4 slots, timeout 0.25 s: one provider down holds at most a quarter of the slots at 0.25 s.
    prober = started_prober(
        writes,
        providers,
        stop,
        probe_interval=4.0,
        probe_timeout=0.25,
        probe_fast_interval=0.1,
        probe_down_interval=0.1,
        probe_failure_threshold=3,
    )
    try:
        writes.first(False, what="the provider was never written unavailable")
        http_json(f"{base}/pool/p/admin/state", method="POST", body={"healthy": True})
        answering = time.monotonic()
        readmitted = writes.first(True, what="the provider was never written available again")
    finally:
        stopped(prober, stop, server)
    assert readmitted - answering < 1.5, f"{readmitted - answering:.2f}s from answering again to available"
