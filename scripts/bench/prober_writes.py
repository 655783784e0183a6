#!/usr/bin/env python3
"""Probe status writes and routing truth at fleet size (issue 19): one command, one table.

Environment: ``benchenv.py`` — the real etcd + kube-apiserver, ONE fake-provider process
standing in for every provider through ``/pool/<name>/`` paths, the real operator and one real
consumer gateway per consumer, all started and stopped by pid. Each (size, mode) runs in its
own namespace with its own operator and gateways. Modes: ``changes`` (the operator as it is:
status written on change, the probes heartbeat Lease ``agn-probes``) and, with ``--compare``,
``every-probe`` (the operator's ``--status-refresh``: the write-every-probe behaviour before
the heartbeat), measured in the same run.

Per row, once every provider is admitted and served by every consumer's gateway:

1. **admitted in**: from starting the operator and gateways to every provider admitted and
   served by every gateway.
2. **writes/s**: the change of the kube-apiserver's own ``apiserver_request_total`` (write
   verbs: POST, PUT, PATCH, DELETE) over ``--window`` seconds with nothing changing — all of
   them, and the provider status writes among them.
3. **probes/s**: the operator's own probe count (``agn_probe_duration_seconds_count``) over the
   same window (what the networks ask for: providers / interval), and the operator's
   ``/healthz`` backlog (``behind``) then.
4. **detection**: one provider's fake switched unhealthy (``/admin/state``); the clock runs
   until every consumer's overlay index counts one admitted provider fewer and every gateway
   serves that revision (``servingRevision``). Median and p99 of ``--trials``.
5. **re-admission**: switched healthy again, until every consumer serves it admitted again.
6. **single drain** (changes mode): ``provider-drain --provider`` with every consumer as a
   target, wall time as a user runs it, median of ``--drains`` (each undrained after), and its
   ratio to the first row's (the small env).
7. **--wait-idle** (changes mode): a provider holding one completion (the fake's
   ``holdCompletions``) is drained with ``--wait-idle``; once the operator has published it
   busy, the completion is released; the clock runs until the CLI exits (0: idle, after two
   distinct fresh idle readings).
8. **capacity** (``--capacity``, changes mode, the largest size): the network's interval set
   to 0.1 s, so the networks ask for more probes than the prober can run: probes/s over the
   window is the prober's capacity on this machine, with the fake pool on the same cores.

Usage: python scripts/bench/prober_writes.py [--providers 4,500,5000] [--consumers 10] [--compare]
       [--capacity] [--trials 3] [--drains 3] [--window 10] [--drained N] [--base-root DIR]
The interval is ``--small-interval`` (1 s) for sizes up to 4 providers, ``--interval`` (5 s)
up to 5,000 and ``--large-interval`` (10 s) above; the failure threshold is the operator's
default (3).
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import signal
import ssl
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.table import Table

from agn.kube import CONSUMERS, NETWORKS, OVERLAYS, PROVIDERS, NotFound
from benchenv import CTX, Bench, consumer_body, network_body, provider_body
from xtask import components
from xtask.runtime.controlplane import free_port

WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE", "APPLY")


@dataclass
class Row:
    providers: int
    consumers: int
    mode: str
    interval: float
    drained: int = 0
    writes_s: float | None = None
    status_writes_s: float | None = None
    writes_by_resource: dict[str, float] = field(default_factory=dict)  # per second, steady
    probes_s: float | None = None
    behind: bool | None = None
    detect_s: list[float] = field(default_factory=list)
    readmit_s: list[float] = field(default_factory=list)
    capacity_s: float | None = None
    capacity_interval: str | None = None
    admit_s: float | None = None
    drain_s: list[float] = field(default_factory=list)
    idle_s: float | None = None
    failure: str | None = None


class Timeout(Exception):
    pass


def wait(pred, *, timeout: float, what: str, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > deadline:
            raise Timeout(what)
        time.sleep(interval)


class Runner:
    def __init__(self, bench: Bench, args: argparse.Namespace) -> None:
        self.bench = bench
        self.args = args
        self._tls: ssl.SSLContext | None = None
        self.ns = ""
        self.consumers: list[str] = []
        self.operator_url = ""
        self.started: list[str] = []

    @property
    def kube(self):
        return self.bench.kube

    # -- readings --------------------------------------------------------------------------
    def api_writes(self) -> tuple[float, float]:
        """(every write, provider status writes) the kube-apiserver served since it started; the
        writes by resource, subresource and verb are kept in :attr:`by_resource`."""
        if self._tls is None:
            c = self.bench.cp.certs
            self._tls = ssl.create_default_context(cafile=str(c.ca_cert))
            self._tls.load_cert_chain(str(c.admin_cert), str(c.admin_key))
        with urllib.request.urlopen(f"{self.bench.cp.server}/metrics", context=self._tls, timeout=30) as r:
            text = r.read().decode()
        total = status = 0.0
        self.by_resource: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name != "apiserver_request_total" or s.labels.get("verb") not in WRITE_VERBS:
                    continue
                total += s.value
                key = f"{s.labels.get('verb')} {s.labels.get('resource')}/{s.labels.get('subresource') or ''}"
                self.by_resource[key] = self.by_resource.get(key, 0.0) + s.value
                if s.labels.get("resource") == "inferenceproviders" and s.labels.get("subresource") == "status":
                    status += s.value
        return total, status

    def probes(self) -> float:
        with urllib.request.urlopen(f"{self.operator_url}/metrics", timeout=10) as r:
            text = r.read().decode()
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if s.name == "agn_probe_duration_seconds_count":
                    return s.value
        return 0.0

    def healthz(self) -> dict:
        with urllib.request.urlopen(f"{self.operator_url}/healthz", timeout=10) as r:
            return json.loads(r.read())

    def admitted_and_served(self, consumer: str) -> tuple[int, bool]:
        """(admitted providers in the consumer's overlay index, whether its gateway serves that revision)."""
        try:
            index = self.kube.get(OVERLAYS, self.ns, consumer).get("spec") or {}
        except NotFound:
            return -1, False
        if "admission" in index:
            admitted = int((index.get("admission") or {}).get("admitted", 0))
        else:
            admitted = sum(1 for c in index.get("candidates") or () if c.get("admission_state") == "admitted")
        status = self.kube.get(CONSUMERS, self.ns, consumer).get("status") or {}
        return admitted, status.get("servingRevision") == index.get("revision")

    def everywhere(self, admitted: int) -> bool:
        with cf.ThreadPoolExecutor(8) as pool:
            seen = list(pool.map(self.admitted_and_served, self.consumers))
        return all(a == admitted and served for a, served in seen)

    # -- one row ---------------------------------------------------------------------------
    def setup(self, row: Row) -> None:
        self.ns = f"pw-{row.mode}-{row.providers}x{row.consumers}"
        k = self.kube
        k.ensure_namespace(self.ns)
        k.create(NETWORKS, self.ns, network_body({"probeIntervalSeconds": row.interval}))
        self.consumers = [f"c{i:02d}" for i in range(row.consumers)]
        for c in self.consumers:
            k.create(CONSUMERS, self.ns, consumer_body(c))
        # Each row's pool paths are its own: a provider's fake state never carries over.
        bodies = [
            provider_body(
                f"p{i:05d}", f"{self.bench.pool}/pool/{self.ns}-p{i:05d}", gateway="gw", group=f"g{i % 4}", rank=i
            )
            for i in range(row.providers)
        ]
        with cf.ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda b: k.create(PROVIDERS, self.ns, b), bodies))
        placement = components.Placement(kubeconfig=str(self.bench.kubeconfig), context=CTX)
        port = free_port()
        operator = components.operator(
            namespace=self.ns,
            port=port,
            placement=placement,
            probe_interval=row.interval,
            probe_concurrency=self.args.probe_concurrency,
            reconcile_workers=self.args.reconcile_workers,
            status_refresh=row.mode == "every-probe",
        )
        self.operator_url = f"http://127.0.0.1:{port}"
        gateways = [components.gateway(c, namespace=self.ns, port=0, placement=placement) for c in self.consumers]
        t0 = time.monotonic()
        base = self.args.base_root if row.mode == "base" else None
        for component in (operator, *gateways):
            # ``base`` rows run the operator of the checkout before the change (same argv).
            env, cwd = (self.bench.env, None) if base is None or component is not operator else self.base_env(base)
            self.bench.sup.start(component.name, component.argv(sys.executable), env=env, cwd=cwd)
            self.started.append(component.name)
        wait(
            lambda: self.everywhere(row.providers),
            timeout=self.args.size_timeout,
            what="every provider admitted and served",
            interval=0.5,
        )
        row.admit_s = time.monotonic() - t0  # operator start to every provider admitted and served
        if row.drained:
            self.drain_first(row)

    def base_env(self, root: Path) -> tuple[dict[str, str], Path]:
        """The environment and directory that run ``root``'s code (``--base-root``)."""
        return {**self.bench.env, "PYTHONPATH": str(root)}, root

    def drain_first(self, row: Row) -> None:
        """``--drained N``: the first N providers drained (as a gateway drain leaves them), until
        the operator has published a load reading for every one of them."""
        names = [f"p{i:05d}" for i in range(row.drained)]
        patch = {"spec": {"trafficPolicy": {"drain": True}}}
        with cf.ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda n: self.kube.merge_patch(PROVIDERS, self.ns, n, patch), names))

        def published() -> bool:
            items, _ = self.kube.list(PROVIDERS, self.ns)
            return sum(1 for o in items if (o.get("status") or {}).get("load")) >= row.drained

        wait(published, timeout=self.args.size_timeout, what="every drained provider's load published", interval=1.0)

    def steady(self, row: Row) -> None:
        time.sleep(2 * row.interval)  # settle: the admission's own writes are done
        w0, s0 = self.api_writes()
        by0 = dict(self.by_resource)
        p0, t0 = self.probes(), time.monotonic()
        time.sleep(self.args.window)  # the measurement window itself: nothing changes in it
        w1, s1 = self.api_writes()
        p1, t1 = self.probes(), time.monotonic()
        row.writes_by_resource = {
            k: round((v - by0.get(k, 0.0)) / (t1 - t0), 2) for k, v in self.by_resource.items() if v > by0.get(k, 0.0)
        }
        row.writes_s = (w1 - w0) / (t1 - t0)
        row.status_writes_s = (s1 - s0) / (t1 - t0)
        row.probes_s = (p1 - p0) / (t1 - t0)
        row.behind = bool(self.healthz()["probes"]["behind"])

    def flip(self, row: Row) -> None:
        target = f"{self.bench.pool}/pool/{self.ns}-p{row.providers // 2:05d}/admin/state"
        bound = 3 * row.interval + 2 + 60  # generous: a slow trial is a number, not an abort

        def admin(healthy: bool) -> None:
            req = urllib.request.Request(
                target,
                data=json.dumps({"healthy": healthy}).encode(),
                method="POST",
                headers={"Content-Type": "application/json"},
            )
            urllib.request.urlopen(req, timeout=10).read()

        serving = row.providers - row.drained  # the flipped provider is one of the admitted ones
        for _ in range(self.args.trials):
            admin(False)
            t0 = time.monotonic()
            wait(lambda: self.everywhere(serving - 1), timeout=bound, what="detection", interval=0.1)
            row.detect_s.append(time.monotonic() - t0)
            admin(True)
            t0 = time.monotonic()
            wait(lambda: self.everywhere(serving), timeout=bound, what="re-admission", interval=0.1)
            row.readmit_s.append(time.monotonic() - t0)

    def drain_and_idle(self, row: Row) -> None:
        """A single converged drain of one provider, every consumer a target, timed as a user
        runs it (``--drains`` times, each undrained after); then ``--wait-idle`` on a drained
        provider holding one completion, timed from the completion's release to the CLI's exit."""
        self.bench.ns = self.ns  # the CLI runs on this row's namespace
        # --force: at 4 providers each selection group has one, which the capacity guard keeps.
        targets = ["--network", "net", *[arg for c in self.consumers for arg in ("--consumer", c)], "--force"]
        name = f"p{row.providers // 3:05d}"
        for _ in range(self.args.drains):
            secs, _ = self.bench.xtask("--provider", name, *targets, "--timeout", "120")
            row.drain_s.append(secs)
            self.bench.xtask("--provider", name, "--undrain", *targets, "--timeout", "120")
        busy = f"p{row.providers // 4:05d}"
        fake = f"{self.bench.pool}/pool/{self.ns}-{busy}"
        post_json(f"{fake}/admin/state", {"holdCompletions": True})
        held = threading.Thread(target=post_json, args=(f"{fake}/v1/completions", {"prompt": "held"}), daemon=True)
        held.start()
        wait(lambda: get_json(f"{fake}/admin/state")["running"] >= 1, timeout=30, what="a held completion")
        argv = self.bench.drain_argv("--provider", busy, *targets, "--wait-idle", "--idle-timeout", "300")
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=self.bench.env)
        try:

            def busy_reading() -> bool:
                load = (self.kube.get(PROVIDERS, self.ns, busy).get("status") or {}).get("load") or {}
                return (load.get("running") or 0) >= 1

            # Drained, and the operator published it busy: what --wait-idle now waits out.
            wait(busy_reading, timeout=120, what="a busy reading of the drained provider", interval=0.1)
            post_json(f"{fake}/admin/state", {"holdCompletions": False})
            released = time.monotonic()
            out, err = proc.communicate(timeout=600)
            row.idle_s = time.monotonic() - released
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        held.join(timeout=30)
        if proc.returncode != 0:
            raise RuntimeError(f"--wait-idle exited {proc.returncode}: {err[-500:]}")
        self.bench.xtask("--provider", busy, "--undrain", *targets, "--timeout", "120")

    def capacity(self, row: Row) -> None:
        self.kube.merge_patch(NETWORKS, self.ns, "net", {"spec": {"probeIntervalSeconds": 0.1}})
        time.sleep(3.0)  # the schedule takes the new interval at each provider's next probe
        p0, t0 = self.probes(), time.monotonic()
        time.sleep(self.args.window)
        p1, t1 = self.probes(), time.monotonic()
        row.capacity_s = (p1 - p0) / (t1 - t0)
        row.capacity_interval = f"{row.providers / row.capacity_s:.1f}" if row.capacity_s else None
        self.kube.merge_patch(NETWORKS, self.ns, "net", {"spec": {"probeIntervalSeconds": row.interval}})

    def stop_row(self) -> None:
        for name in reversed(self.started):
            self.bench.sup.stop(name)
        self.started = []
        if self.ns:
            try:
                self.kube.delete_namespace(self.ns)
            except Exception:  # noqa: BLE001 - a namespace that lingers does not change the next row
                pass


def post_json(url: str, body: dict) -> dict:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read() or b"{}")


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.loads(r.read())


def spread(values: list[float]) -> str:
    """Median, p99 (nearest rank) and the number of trials."""
    if not values:
        return "-"
    ranked = sorted(values)
    p99 = ranked[min(len(ranked) - 1, max(0, -(-99 * len(ranked) // 100) - 1))]
    return f"{statistics.median(ranked):.1f} / {p99:.1f} s ({len(ranked)})"


def render(rows: list[Row], started: str) -> Table:
    table = Table(
        title=f"probe status writes and routing truth ({started}; kube-apiserver apiserver_request_total, writes only)",
        title_justify="left",
    )
    for col in (
        "providers x consumers",
        "mode",
        "interval",
        "API writes/s (steady)",
        "status writes/s",
        "probes/s (asked)",
        "behind",
        "detect: median / p99 (trials)",
        "re-admit: median / p99",
        "prober capacity",
        "admitted in",
        "single drain: median (x small)",
        "--wait-idle after idle",
        "note",
    ):
        table.add_column(col)
    small = next((statistics.median(r.drain_s) for r in rows if r.drain_s), None)
    for r in rows:
        drain = "-"
        if r.drain_s:
            drain = f"{statistics.median(r.drain_s):.2f} s"
            if small:
                drain += f" (x{statistics.median(r.drain_s) / small:.2f})"
        table.add_row(
            f"{r.providers:,} x {r.consumers}",
            r.mode + (f", {r.drained:,} drained" if r.drained else ""),
            f"{r.interval:g} s",
            "-" if r.writes_s is None else f"{r.writes_s:.1f}",
            "-" if r.status_writes_s is None else f"{r.status_writes_s:.1f}",
            "-" if r.probes_s is None else f"{r.probes_s:.0f}",
            "-" if r.behind is None else ("yes" if r.behind else "no"),
            spread(r.detect_s),
            spread(r.readmit_s),
            "-" if r.capacity_s is None else f"{r.capacity_s:.0f}/s (fits {r.capacity_interval} s)",
            "-" if r.admit_s is None else f"{r.admit_s:.1f} s",
            drain,
            "-" if r.idle_s is None else f"{r.idle_s:.1f} s",
            r.failure or "",
        )
    return table


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)

    def counts(text: str) -> list[int]:
        try:
            out = [int(p) for p in text.split(",") if p.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of whole numbers") from None
        if not out or any(n < 2 or n > 10_000 for n in out):
            raise argparse.ArgumentTypeError(f"{text!r}: each size must be within 2..10000")
        return out

    parser.add_argument("--providers", type=counts, default=[4, 500, 5000], help="sizes (4,500,5000)")
    parser.add_argument("--consumers", type=int, default=10, help="consumers, each with its own gateway (10)")
    parser.add_argument("--interval", type=float, default=5.0, help="network probe interval above 4 providers (5)")
    parser.add_argument(
        "--large-interval",
        type=float,
        default=10.0,
        help="probe interval above 5,000 providers (10: 10,000 at 5 s would ask 2,000 probes/s, more than "
        "the prober runs at that size on these 2 cores, 1,325 measured)",
    )
    parser.add_argument("--small-interval", type=float, default=1.0, help="probe interval at <= 4 providers (1)")
    parser.add_argument(
        "--probe-concurrency", type=int, default=64, help="operator --probe-concurrency (64, its default)"
    )
    parser.add_argument(
        "--reconcile-workers", type=int, default=1, help="operator --reconcile-workers (1, its default)"
    )
    parser.add_argument("--window", type=float, default=10.0, help="seconds of the steady-state window (10)")
    parser.add_argument("--trials", type=int, default=3, help="detection / re-admission trials per row (3)")
    parser.add_argument("--drains", type=int, default=3, help="single converged drains timed per row (3)")
    parser.add_argument("--drained", type=int, default=0, help="providers drained before the steady window (0)")
    parser.add_argument("--base-root", type=Path, default=None, help="also run each size with this checkout's operator")
    parser.add_argument("--compare", action="store_true", help="also run every size with --status-refresh")
    parser.add_argument("--capacity", action="store_true", help="measure the prober's capacity at the largest size")
    parser.add_argument("--size-timeout", type=float, default=600.0, help="seconds to admit one size (600)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the rows as JSON")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    def on_term(signum, frame) -> None:  # noqa: ANN001 - SIGTERM takes the Ctrl-C path (teardown by pid)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    modes = ["changes", "every-probe"] if args.compare else ["changes"]
    if args.base_root is not None:
        modes.append("base")
    largest = max(args.providers)
    rows: list[Row] = []
    interrupted = False
    with tempfile.TemporaryDirectory(prefix="agn-prober-writes-") as tmp:
        bench = Bench(Path(tmp))
        runner = Runner(bench, args)
        try:
            bench.start()
            for n in args.providers:
                for mode in modes:
                    interval = args.small_interval if n <= 4 else args.interval if n <= 5000 else args.large_interval
                    row = Row(n, args.consumers, mode, interval, drained=min(args.drained, n))
                    rows.append(row)
                    print(f"prober-writes: {n} x {args.consumers} {mode} ...", file=sys.stderr, flush=True)
                    try:
                        runner.setup(row)
                        runner.steady(row)
                        runner.flip(row)
                        if mode in ("changes", "base"):
                            runner.drain_and_idle(row)
                        if args.capacity and mode == "changes" and n == largest:
                            runner.capacity(row)
                    except KeyboardInterrupt:
                        row.failure = "INTERRUPTED"
                        raise
                    except Timeout as exc:
                        row.failure = f"TIMEOUT: {exc}"
                    except Exception as exc:  # noqa: BLE001 - one row's crash is its verdict, not the table's end
                        row.failure = f"FAILED: {type(exc).__name__}: {exc}"
                    finally:
                        runner.stop_row()
        except KeyboardInterrupt:
            interrupted = True
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            bench.stop()
    Console(width=220).print(render(rows, f"started {started}"))
    if args.json:
        args.json.write_text(json.dumps([row.__dict__ for row in rows], indent=2) + "\n")
    if interrupted:
        return 130
    return 1 if any(r.failure for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
