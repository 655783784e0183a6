"""What recording Kubernetes Events costs a drain: the same runs with Events and without.

    .venv/bin/python scripts/bench/drain_events.py [--providers 200] [--repeat 5]

On the real local control plane with the real operator and two gateways (:mod:`benchenv`),
``run_drain`` is called in-process (process start-up is the same either way and would only
add noise), alternating runs with Events and runs whose Event recorder records nothing:

- a single provider drained and undrained with targets (converged on both consumers);
- a patch-only drain of a whole gateway of ``--providers`` providers (reset between runs).

Prints one table: median wall time per scenario and mode, and the longest a run waited at
its end for Events still in flight.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchenv import CTX, TARGETS, Bench  # noqa: E402
from xtask.cli.env.drain_view import PlainReporter  # noqa: E402
from xtask.drain.core.request import DrainRequest  # noqa: E402
from xtask.drain.core.selection import Selector  # noqa: E402
from xtask.drain.edges import kube_events as drain_events  # noqa: E402
from xtask.drain.run import run_drain  # noqa: E402


class Measured(drain_events.DrainEvents):
    """The real recorder, timing how long the run's end waits for it."""

    scenario = ""
    waits: dict[str, list[float]] = {}  # per scenario

    def close(self, *, timeout: float = drain_events.CLOSE_TIMEOUT) -> list[str]:
        t0 = time.perf_counter()
        try:
            return super().close(timeout=timeout)
        finally:
            Measured.waits.setdefault(Measured.scenario, []).append(time.perf_counter() - t0)


class Silent(drain_events.DrainEvents):
    """Records nothing: the baseline."""

    def record(self, facts) -> None:  # noqa: ANN001 - same signature as the real one
        return None


def drain(bench: Bench, recorder: type, *, selector: Selector, drain: bool, targets: bool) -> float:
    import xtask.drain.run as run_module

    run_module.DrainEvents = recorder  # type: ignore[misc]  # the one thing that differs between modes
    req = DrainRequest(
        selector=selector,
        drain=drain,
        context=CTX,
        kubeconfig=str(bench.kubeconfig),
        namespace=bench.ns,
        network="net" if targets else None,
        consumers=tuple(TARGETS[3::2]) if targets else (),
        journal_dir=bench.journal_dir,
    )
    t0 = time.perf_counter()
    report = run_drain(req, progress=PlainReporter(io.StringIO()))
    elapsed = time.perf_counter() - t0
    if int(report.exit_code) != 0:
        raise SystemExit(f"drain failed: {report.summary}")
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--providers", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="agn-bench-") as tmp:
        bench = Bench(Path(tmp))
        try:
            bench.start()
            bench.scenario("bench-events", providers=args.providers)
            times: dict[tuple[str, str], list[float]] = {}
            one = Selector(provider="p000")
            gateway = Selector(gateway="gw-big")
            names = [f"p{i:03d}" for i in range(args.providers)]
            for _ in range(args.repeat):
                for mode, recorder in (("with Events", Measured), ("without", Silent)):
                    Measured.scenario = single = "single provider: drain + undrain, converged"
                    t = drain(bench, recorder, selector=one, drain=True, targets=True)
                    t += drain(bench, recorder, selector=one, drain=False, targets=True)
                    times.setdefault((single, mode), []).append(t)
                    Measured.scenario = many = f"patch-only drain of {args.providers}"
                    t = drain(bench, recorder, selector=gateway, drain=True, targets=False)
                    times.setdefault((many, mode), []).append(t)
                    bench.set_drain(names, None)
            for (scenario, mode), values in times.items():
                rows.append((scenario, mode, statistics.median(values), min(values), max(values)))
        finally:
            bench.stop()
    print(f"| scenario | mode | median | min–max ({args.repeat} runs) | run's end waited for Events (median, max) |")
    print("| --- | --- | --- | --- | --- |")
    for scenario, mode, med, lo, hi in rows:
        waits = Measured.waits.get(scenario, []) if mode == "with Events" else []
        waited = f"{statistics.median(waits) * 1000:.0f} ms, {max(waits) * 1000:.0f} ms" if waits else "-"
        print(f"| {scenario} | {mode} | {med:.3f} s | {lo:.3f}–{hi:.3f} s | {waited} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
