"""Where the operator's time and memory go while a fleet is admitted: the real operator, in this
process, against the real control plane (benchenv.py), with a profiler on its reconcile thread.

    .venv/bin/python scripts/bench/operator_profile.py [--providers 5000] [--consumers 10]
        [--reconcile-workers 1] [--tracemalloc] [--top 30]

The operator starts on an empty network with ``--consumers`` consumers, then ``--providers``
healthy providers are created (16 client threads, as fleet.py); it is timed until every overlay
index counts all of them admitted. Printed:

- **cProfile** of every reconcile (the reconcile thread, or each worker's with
  ``--reconcile-workers`` > 1: one profiler per thread, merged), top ``--top`` functions by
  cumulative and by own time: JSON encoding, digesting, planning, diffing, the writes' round trips;
- the reconcile count and their summed wall time, and the bytes and publications written
  (the operator's own counters);
- with ``--tracemalloc``: after admission, the top allocation sites still alive (grouped by
  file:line) and the live objects per type (``gc``) — what holds the operator's memory. Benchmark
  only: tracemalloc slows every allocation, so time is not measured in that mode.

Only the control plane and the fake-provider pool are separate processes (started and stopped by
pid); no gateway runs (nothing here waits for one).
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures as cf
import cProfile
import gc
import io
import pstats
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

from agn.kube import CONSUMERS, NETWORKS, OVERLAYS, PROVIDERS
from agn.logs import JsonLog
from agn.operator.consumers import ConsumerReconciler
from agn.operator.controller import Operator
from agn.operator.metrics import OperatorMetrics
from agn.operator.settings import parse_settings
from benchenv import CTX, Bench, consumer_body, network_body, provider_body


class Profiles:
    """One cProfile.Profile per reconciling thread (a profiler follows only the thread that enables it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_thread: dict[int, cProfile.Profile] = {}
        self.calls = 0
        self.seconds = 0.0

    def wrap(self, fn):  # noqa: ANN001, ANN201 - wraps ConsumerReconciler.reconcile_safely
        def profiled(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            with self._lock:
                prof = self._by_thread.setdefault(threading.get_ident(), cProfile.Profile())
            t0 = time.perf_counter()
            prof.enable()
            try:
                return fn(*args, **kwargs)
            finally:
                prof.disable()
                with self._lock:
                    self.calls += 1
                    self.seconds += time.perf_counter() - t0

        return profiled

    def reset(self) -> None:
        with self._lock:
            self._by_thread.clear()
            self.calls, self.seconds = 0, 0.0

    def report(self, top: int) -> str:
        out = io.StringIO()
        profs = list(self._by_thread.values())
        if not profs:
            return "no reconcile ran"
        stats = pstats.Stats(profs[0], stream=out)
        for p in profs[1:]:
            stats.add(p)
        stats.strip_dirs().sort_stats("cumulative").print_stats(top)
        stats.sort_stats("tottime").print_stats(top)
        return out.getvalue()


def admitted_everywhere(bench: Bench, ns: str, consumers: int, total: int) -> bool:
    indexes = bench.kube.list(OVERLAYS, ns)[0]
    counts = [((o.get("spec") or {}).get("admission") or {}).get("admitted") for o in indexes]
    return len(counts) == consumers and all(c == total for c in counts)


def memory_report(snapshot: tracemalloc.Snapshot, top: int) -> str:
    lines = ["top allocation sites still alive after admission (file:line, size, count):"]
    for stat in snapshot.statistics("lineno")[:top]:
        frame = stat.traceback[0]
        lines.append(f"  {stat.size / 1e6:8.1f} MB {stat.count:9d}  {frame.filename}:{frame.lineno}")
    counts = collections.Counter(type(o).__name__ for o in gc.get_objects())
    lines.append("live objects by type (gc):")
    lines += [f"  {n:9d} {name}" for name, n in counts.most_common(15)]
    return "\n".join(lines)


def existing_only_everywhere(bench: Bench, consumers: int, count: int) -> bool:
    indexes = bench.kube.list(OVERLAYS, bench.ns)[0]
    counts = [((o.get("spec") or {}).get("admission") or {}).get("existing_only", 0) for o in indexes]
    return len(counts) == consumers and all(c == count for c in counts)


def drains(args: argparse.Namespace, bench: Bench, profiles: Profiles) -> None:
    """``--drains``: one provider drained and undrained that many times right after admission;
    the time from each drain patch until every index shows it, and a profile of those reconciles."""
    profiles.reset()
    times = []
    for _ in range(args.drains):
        t0 = time.monotonic()
        bench.kube.merge_patch(PROVIDERS, bench.ns, "p00000", {"spec": {"trafficPolicy": {"drain": True}}})
        while not existing_only_everywhere(bench, args.consumers, 1):
            time.sleep(0.02)
        times.append(time.monotonic() - t0)
        bench.kube.merge_patch(PROVIDERS, bench.ns, "p00000", {"spec": {"trafficPolicy": {"drain": None}}})
        while not existing_only_everywhere(bench, args.consumers, 0):
            time.sleep(0.05)
    print(f"drain patch -> every index shows it: {', '.join(f'{t:.3f}' for t in times)} s")
    print(f"reconciles during the drains and undrains: {profiles.calls} taking {profiles.seconds:.2f}s")
    print(profiles.report(args.top))


class BacklogSampler:
    """The prober's backlog and lag (``/healthz``'s probe load), sampled every 0.2 s: the most of each."""

    def __init__(self, operator: Operator) -> None:
        self.operator, self.most = operator, {"backlog": 0, "lagSeconds": 0.0}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def now(self) -> dict[str, object]:
        load = self.operator.prober.load(time.monotonic())
        return {k: load[k] for k in ("backlog", "lagSeconds", "inFlight")}

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            load = self.now()
            for key in self.most:
                self.most[key] = max(self.most[key], load[key])  # type: ignore[call-overload]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(1.0)


def run(args: argparse.Namespace, bench: Bench) -> None:
    ns = f"profile-{args.providers}x{args.consumers}"
    bench.ns = ns
    kube = bench.kube
    kube.ensure_namespace(ns)
    kube.create(NETWORKS, ns, network_body({"probeIntervalSeconds": 120.0, "metricsMaxAgeSeconds": 360}))
    for i in range(args.consumers):
        kube.create(CONSUMERS, ns, consumer_body(f"c{i:02d}"))
    argv = ["--namespace", ns, "--kubeconfig", str(bench.kubeconfig), "--context", CTX, "--no-leader-elect"]
    argv += ["--reconcile-workers", str(args.reconcile_workers), "--log-level", "warning"]
    settings = parse_settings(argv)
    stop = threading.Event()
    metrics = OperatorMetrics()
    profiles = Profiles()
    ConsumerReconciler.reconcile_safely = profiles.wrap(ConsumerReconciler.reconcile_safely)  # type: ignore[method-assign]
    operator = Operator(
        kube, ns, settings=settings, log=JsonLog(component="operator", level="warning"), stop=stop, metrics=metrics
    )
    runner = threading.Thread(target=operator.run, name="operator", daemon=True)
    runner.start()
    while not admitted_everywhere(bench, ns, args.consumers, 0):
        time.sleep(0.2)
    calls0, secs0 = profiles.calls, profiles.seconds
    if args.tracemalloc:
        tracemalloc.start(1)
    bodies = [
        provider_body(f"p{i:05d}", f"{bench.pool}/pool/{ns}-p{i:05d}", gateway="gw", group=f"g{i % 4}", rank=i)
        for i in range(args.providers)
    ]
    t0 = time.monotonic()
    backlog = BacklogSampler(operator)
    with cf.ThreadPoolExecutor(16) as ex:
        list(ex.map(lambda body: kube.create(PROVIDERS, ns, body), bodies))
    created = time.monotonic() - t0
    at_last_create = (dict(operator.writes.counts()), backlog.now())
    while not admitted_everywhere(bench, ns, args.consumers, args.providers):
        time.sleep(0.25)
    done = time.monotonic() - t0
    backlog.stop()
    print(f"first probes pending at most / lag at most: {backlog.most} (at the last create: {at_last_create[1]})")
    print(f"writes at the last create: {at_last_create[0]}")
    written = operator.writes.bytes_written() if hasattr(operator.writes, "bytes_written") else {}
    print(
        f"{args.providers} x {args.consumers}: created in {created:.1f}s, all admitted at {done:.1f}s "
        f"({done - created:.1f}s after the last create); reconciles {profiles.calls - calls0} taking "
        f"{profiles.seconds - secs0:.1f}s; bytes written {written}; writes {operator.writes.counts()}"
    )
    if args.tracemalloc:
        print(memory_report(tracemalloc.take_snapshot(), args.top))
    elif not args.drains:
        print(profiles.report(args.top))
    if args.drains:
        drains(args, bench, profiles)
    stop.set()
    runner.join(15)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--providers", type=int, default=5000)
    parser.add_argument("--consumers", type=int, default=10)
    parser.add_argument("--reconcile-workers", type=int, default=1)
    parser.add_argument("--tracemalloc", action="store_true", help="report memory holders instead of time")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument(
        "--drains", type=int, default=0, help="then profile this many single drains (and undrains) of one provider"
    )
    args = parser.parse_args(argv)
    if not 1 <= args.providers <= 10_000 or not 1 <= args.consumers <= 99:
        parser.error("--providers must be 1..10000 and --consumers 1..99")
    with tempfile.TemporaryDirectory(prefix="agn-profile-") as tmp:
        bench = Bench(Path(tmp))
        try:
            bench.start()
            run(args, bench)
        finally:
            bench.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
