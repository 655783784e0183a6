"""What the operator's planning costs per drain of one provider, at fleet size: pure functions only.

    .venv/bin/python scripts/bench/operator_plan.py [--providers 5000] [--consumers 1 10] [--repeat 9]

For each consumer count, one network of ``--providers`` providers is planned once, then one
provider at a time is drained (and undrained again before the next run); each run is timed from
the network's verdict to each consumer's log diff and Event note, two ways:

- **from scratch** — what every reconcile did before plans were moved by deltas: plan the whole
  overlay (:func:`agn.operator.reconcile.plan_overlay`), split it into shards, assemble the
  previous overlay from every stored shard and diff whole overlays twice (log line, Event);
- **by delta** — what the controller does now: :meth:`Operator._plan` moves the kept plan by the
  providers that changed, :func:`agn.operator.diffing.publication_diff` diffs only the shards whose
  digest changed, and the log line and Event note are both read from that one diff.

Prints the median wall time per run (all consumers), and per consumer. No API server is used.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from agn.logs import JsonLog  # noqa: E402
from agn.model import ConsumerView, NetworkView, Overlay, ProviderView  # noqa: E402
from agn.operator.controller import Operator  # noqa: E402
from agn.operator.diffing import change_log, note_for, overlay_changes, publication_diff, published_note  # noqa: E402
from agn.operator.reconcile import plan_overlay  # noqa: E402
from agn.operator.settings import Settings  # noqa: E402
from agn.operator.verdicts import Verdicts  # noqa: E402
from agn.provider.fleet import provider_views  # noqa: E402
from agn.shards import assemble, split  # noqa: E402

NOW = 1_700_000_000.0
NET = NetworkView("net", metrics_max_age_seconds=45)
SHARDS = 16


def fleet(n: int) -> list[ProviderView]:
    return provider_views(n, now=NOW, name="p{i:05d}", groups=4, ranks=3)


def drained(base: list[ProviderView], i: int) -> tuple[ProviderView, ...]:
    out = list(base)
    out[i] = dataclasses.replace(out[i], drain=True)
    return tuple(out)


def stored_objects(sharded) -> tuple[dict, dict]:
    index = {"metadata": {"name": sharded.index["consumer"]}, "spec": sharded.index}
    return index, {n: {"metadata": {"name": n}, "spec": s} for n, s in sharded.shards.items()}


def from_scratch(n: int, consumers: int, repeat: int) -> float:
    base, verdicts = fleet(n), Verdicts()
    cons = [ConsumerView(f"c{k}", "net") for k in range(consumers)]
    judged = verdicts.evaluate(NET, tuple(base), now=NOW)
    stored = {c.name: split(plan_overlay(c, judged, previous=None), SHARDS) for c in cons}
    times = []
    for rep in range(repeat):
        snapshot = drained(base, (rep * 997) % n)
        started = time.perf_counter()
        judged = verdicts.evaluate(NET, snapshot, now=NOW)
        for c in cons:
            overlay = plan_overlay(c, judged, previous=Overlay.from_spec(stored[c.name].index))
            split(overlay, SHARDS)
            before = Overlay.from_spec(assemble(stored[c.name].index, stored[c.name].shards))
            overlay_changes(before, overlay)
            published_note(before, overlay)
        times.append(time.perf_counter() - started)
        verdicts.evaluate(NET, tuple(base), now=NOW)  # undrained again (not timed, not planned)
    return statistics.median(times)


def by_delta(n: int, consumers: int, repeat: int) -> float:
    base, verdicts = fleet(n), Verdicts()
    op = Operator(
        None,  # type: ignore[arg-type]  # planning only: no API server
        "ns",
        settings=Settings(overlay_shards=SHARDS),
        log=JsonLog(component="bench", stream=io.StringIO()),
        stop=threading.Event(),
    )
    cons = [ConsumerView(f"c{k}", "net") for k in range(consumers)]
    judged = verdicts.evaluate(NET, tuple(base), now=NOW)
    published = {c.name: op._plan(c, judged, None) for c in cons}
    times = []
    for rep in range(repeat):
        snapshot = drained(base, (rep * 997) % n)
        started = time.perf_counter()
        judged = verdicts.evaluate(NET, snapshot, now=NOW)
        for c in cons:
            previous = published[c.name]
            planned = op._plan(c, judged, previous.overlay)
            current, shards = stored_objects(previous.sharded)
            change = publication_diff(planned, current, shards, None)
            states = planned.sharded.index["admission"]
            change_log(change.diff, states)
            note_for(
                change.diff,
                network="net",
                revision=planned.overlay.revision,
                states=states,
                previous_revision=change.previous_revision,
            )
        times.append(time.perf_counter() - started)
        # Undrained again and planned (as the operator would), not timed.
        judged = verdicts.evaluate(NET, tuple(base), now=NOW)
        for c in cons:
            published[c.name] = op._plan(c, judged, op.memory.plans[c.name].overlay)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--providers", type=int, default=5000)
    parser.add_argument("--consumers", type=int, nargs="+", default=[1, 10])
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    print(f"{args.providers} providers, {SHARDS} shards, one provider drained per run, median of {args.repeat}")
    print(f"{'consumers':>9}  {'from scratch':>14}  {'by delta':>10}  {'per consumer':>22}")
    for k in args.consumers:
        old = from_scratch(args.providers, k, args.repeat)
        new = by_delta(args.providers, k, args.repeat)
        per = f"{old / k * 1000:.1f} -> {new / k * 1000:.2f} ms"
        print(f"{k:>9}  {old * 1000:>11.1f} ms  {new * 1000:>7.2f} ms  {per:>22}   x{old / new:.0f}")


if __name__ == "__main__":
    main()
