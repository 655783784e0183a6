#!/usr/bin/env python3
"""Fleet benchmark (issue #9, item 4): one command, one table, numbers from this run.

Environment: ``benchenv.py`` — the real etcd + kube-apiserver, ONE fake-provider process
standing in for every provider through ``/pool/<name>/`` paths, the real operator and one
real consumer gateway per consumer, all started and stopped by pid. Each (providers,
consumers) size runs in its own namespace with its own operator and gateways:

1. **admission**: operator and gateways run and serve their (empty) overlays first; then N
   healthy providers are created and the clock runs from the first create until every
   consumer serves (``servingRevision`` == its overlay's revision) an overlay holding all N
   (plus the 4 spares) as admitted, read when the poll (every <= 0.25 s) that saw it began; the
   table also says how long after the last create that was. Goal: <= 60 s.
2. **single drain**: the real CLI, ``python -m xtask env provider-drain --provider X
   --network net --consumer ... --timeout T``, converged on every consumer; median wall time
   of ``--repeat`` runs (each from a served, undrained state). The same is measured at
   ``--baseline`` (4) providers with the same consumers in this run. Goal: <= 3x baseline.
3. **gateway drain**: ``--gateway gw-drain`` (100 providers, or all N if fewer) with the same
   targets, converged: wall time and overlay revisions per consumer (max). Goal: <= 5.
4. **largest object**: the biggest compact-JSON size of any AGN object in the namespace
   (every AGN kind, RoutingOverlay and RoutingOverlayShard included), after admission and
   after the drains. Goal: <= 1 MiB.
5. **RSS**: peak resident memory (``VmHWM`` in ``/proc/<pid>/status``) of the operator and of
   the largest gateway this bench started, by pid. Goals: 300 MB / 150 MB.
6. **API requests per drain**: the change of the kube-apiserver's own ``apiserver_request_total``
   across each drain, but the prober's provider status writes (background traffic that goes on
   whether or not anything is drained) — every other client's requests in that interval
   (CLI, operator, gateways), read with the bench's admin client certificate; beside it the
   idle rate of the same count (requests per second with no drain running), for scale.

7. **bytes**: what the operator wrote to overlays (indexes and shards) during admission: per
   publication (median, max: the ``bytes_written`` of its log lines: the index and the network
   shards that publication wrote; an operator from before wt-publish counted its index only) and in total, as the
   operator counted it (``agn_operator_write_bytes_total``) and as the API server received it
   (its own ``apiserver_request_body_size_bytes_sum``: the cross-check, and the only count an
   operator from before #45 has); the same for one single drain (median).

With ``--before DIR`` (a checkout of the code before, e.g. ``git worktree add /tmp/before
<ref>``) every size runs twice in the same minutes: first with the operator and gateways of
``DIR``, then with this checkout's; the CLI is this checkout's in both. One table, both codes.

Also the operator's probe backlog (``agn_probe_backlog``, ``agn_probe_lag_seconds``, its own
``/metrics``): the highest reading seen while waiting for admission.

A size that cannot finish within ``--size-timeout`` is reported in its row with the phase that
timed out; the next size still runs. Overlays are read only through ``agn.overlays``, so the
inline and the sharded (index + shards) forms both count.

Usage: python scripts/bench/fleet.py [--providers 200] [--consumers 2] [--repeat 3]
       python scripts/bench/fleet.py --providers 500,2000,5000 --consumers 2,10
       python scripts/bench/fleet.py --providers 2000 --consumers 10 --before /tmp/before
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
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TypeVar

from drainstages import STAGES, PatchWatch, median_stages, stages
from fleetbytes import ByteReading, PhaseBytes, kib, reading, size
from prometheus_client.parser import text_string_to_metric_families
from rich.console import Console
from rich.table import Table
from tenacity import retry, retry_if_exception, stop_after_delay, wait_fixed

from agn.kube import AGN_RESOURCES, CONSUMERS, NETWORKS, OVERLAYS, PROVIDERS, KubeError, Resource
from agn.overlays import list_overlays
from benchenv import CTX, REPO, Bench, consumer_body, network_body, provider_body
from xtask.procs import ProcessRecord
from xtask.runtime.controlplane import free_port

T = TypeVar("T")

MAX_PROVIDERS = 10_000
# The admission wait polls the indexes (two small LISTs) at least this often: the time measured
# is when the served state was first read, so a coarser poll would add up to its own period.
ADMISSION_POLL = 0.25
SPARES = 4  # one per selection group, in gw-spare: draining gw-drain keeps every group admitted
GATEWAY_DRAIN = 100
BACKGROUND_WINDOW = 3.0  # seconds of idle API traffic measured per size
MIB = 1024 * 1024
GOALS = {
    "admit_s": 60.0,
    "drain_ratio": 3.0,
    "gw_revisions": 5,
    "largest_bytes": MIB,
    "operator_mb": 300.0,
    "gateway_mb": 150.0,
}


class PhaseTimeout(Exception):
    """A phase of one size did not finish in time; the row says which."""


class PhaseFailed(Exception):
    """A phase of one size failed (a CLI run exited non-zero); the row says which and why."""


def sizes(text: str, *, top: int) -> list[int]:
    """``"500,2000"`` -> ``[500, 2000]``; anything else is a usage error naming the flag."""
    out = []
    for part in text.split(","):
        try:
            n = int(part.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part.strip()!r} is not a whole number") from None
        if not 1 <= n <= top:
            raise argparse.ArgumentTypeError(f"{n} is outside 1..{top}")
        out.append(n)
    return sorted(set(out))


def wait(
    pred: Callable[[], T],
    *,
    deadline: float,
    what: str,
    on_poll: Callable[[], None] | None = None,
    max_sleep: float = 2.0,
) -> T:
    """Poll until ``pred`` is truthy. Polls back off to twice the time a check takes (so big
    lists do not load the machine they measure), at most ``max_sleep``; past ``deadline`` it
    raises PhaseTimeout."""
    while True:
        t0 = time.monotonic()
        value = pred()
        if on_poll is not None:
            on_poll()
        if value:
            return value
        now = time.monotonic()
        if now >= deadline:
            raise PhaseTimeout(what)
        time.sleep(min(max(0.05, 2 * (now - t0)), max_sleep, max(0.0, deadline - now)))


# -- readings -------------------------------------------------------------------------------
def metric_sum(text: str, name: str, *, skip: Callable[[dict[str, str]], bool] | None = None) -> float:
    """Sum of every sample of counter or gauge ``name`` in Prometheus text, but the samples whose
    labels ``skip`` says to leave out."""
    total = 0.0
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and not (skip and skip(s.labels)):
                total += s.value
    return total


def probe_status_write(labels: dict[str, str]) -> bool:
    """The operator's provider status writes: the prober's background traffic, whatever a drain does."""
    return labels.get("resource") == "inferenceproviders" and labels.get("subresource") == "status"


def rss_mb(pid: int) -> tuple[float, float]:
    """(current VmRSS, peak VmHWM) in MB of one process, from /proc by pid."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024  # kB
    return fields.get("VmRSS", 0.0), fields.get("VmHWM", 0.0)


def object_bytes(obj: dict) -> int:
    return len(json.dumps(obj, separators=(",", ":")).encode())


@dataclass
class Row:
    providers: int
    consumers: int
    code: str = "this"  # "before": the operator and gateways of --before
    create_s: float | None = None
    admit_s: float | None = None
    backlog: float = 0.0
    lag_s: float = 0.0
    single_s: list[float] = field(default_factory=list)
    single_requests: list[float] = field(default_factory=list)
    background_rps: float | None = None  # API requests per second with no drain running (operator, gateways)
    gw_size: int = 0
    gw_s: float | None = None
    gw_revisions: int | None = None
    gw_requests: float | None = None
    largest: tuple[int, str] = (0, "")
    operator_mb: float | None = None
    gateway_mb: float | None = None
    failure: str = ""
    admission_bytes: PhaseBytes | None = None
    single_bytes: list[PhaseBytes] = field(default_factory=list)
    # The drains' own phase timings (the JSON report's "timings"), for the --json output.
    single_timings: list[dict[str, float]] = field(default_factory=list)
    gw_timings: dict[str, float] = field(default_factory=dict)
    # Each single drain's stages (drainstages.py), and the longest gateway fetch + assembly.
    single_stages: list[dict[str, float]] = field(default_factory=list)
    single_assembly: list[float] = field(default_factory=list)


class Fleet:
    """One size at a time in its own namespace, on one Bench (control plane + fake pool)."""

    def __init__(self, bench: Bench, args: argparse.Namespace) -> None:
        self.bench = bench
        self.args = args
        self._tls: ssl.SSLContext | None = None
        self.ns = ""
        self.consumers: list[str] = []
        self.names: list[str] = []
        self.operator_url = ""
        self.last_timings: dict[str, float] = {}
        self.profiled = 0  # drains run under --profile so far
        self.observed_at = 0.0  # when the reads of the last agreeing converged() began (monotonic)

    @property
    def kube(self):
        return self.bench.kube

    # -- readings ------------------------------------------------------------------------
    def apiserver_metrics(self) -> str:
        """The kube-apiserver's own /metrics, read with the bench's admin client certificate."""
        if self._tls is None:  # the admin certificate exists once the control plane has started
            c = self.bench.cp.certs
            self._tls = ssl.create_default_context(cafile=str(c.ca_cert))
            self._tls.load_cert_chain(str(c.admin_cert), str(c.admin_key))
        with urllib.request.urlopen(f"{self.bench.cp.server}/metrics", context=self._tls, timeout=30) as r:
            return r.read().decode()

    def apiserver_requests(self) -> float:
        return metric_sum(self.apiserver_metrics(), "apiserver_request_total", skip=probe_status_write)

    def operator_log(self) -> Path:
        return self.bench.sup.log_dir / "operator.log"

    def bytes_now(self) -> ByteReading:
        """The overlay bytes so far, as the operator and the API server count them (:mod:`fleetbytes`)."""
        return reading(self.operator_metrics, self.apiserver_metrics, self.operator_log())

    def operator_metrics(self) -> str:
        try:
            with urllib.request.urlopen(f"{self.operator_url}/metrics", timeout=5) as r:
                return r.read().decode()
        except OSError:
            return ""

    def converged(self, *, admitted: int | None) -> bool:
        """Every consumer serves its overlay's revision and (if given) holds ``admitted`` admitted.

        Polled on the indexes alone (their ``admission`` counts: two small LISTs), so the bench's
        own reads do not load the API server it measures; once the indexes say so, one whole read
        (indexes and every shard, assembled) confirms it. :attr:`observed_at` is when the reads
        that agreed began (the time measured: not the confirming read's own seconds)."""
        started = time.monotonic()
        try:
            status = {
                o["metadata"]["name"]: (o.get("status") or {}).get("servingRevision")
                for o in self.kube.list(CONSUMERS, self.ns)[0]
            }
            indexes = {o["metadata"]["name"]: o.get("spec") or {} for o in self.kube.list(OVERLAYS, self.ns)[0]}
            if not all(self._agrees(indexes.get(c), status.get(c), admitted, whole=False) for c in self.consumers):
                return False
            overlays = list_overlays(self.kube, self.ns)
        except KubeError:
            return False
        agreed = all(self._agrees(overlays.get(c), status.get(c), admitted, whole=True) for c in self.consumers)
        if agreed:
            self.observed_at = started
        return agreed

    @staticmethod
    def _agrees(spec: object, serving: object, admitted: int | None, *, whole: bool) -> bool:
        if not isinstance(spec, dict) or not spec or serving != spec.get("revision"):
            return False
        if admitted is None:
            return True
        if not whole and "admission" in spec:
            return (spec["admission"] or {}).get("admitted") == admitted
        return sum(1 for x in spec.get("candidates") or () if x.get("admission_state") == "admitted") == admitted

    def revisions(self) -> dict[str, int]:
        overlays = list_overlays(self.kube, self.ns)
        out = {}
        for c in self.consumers:
            spec = overlays.get(c)
            if not isinstance(spec, dict):
                raise PhaseFailed(f"overlay of {c} unreadable: {spec!r}")
            out[c] = int(spec["revision"])
        return out

    @retry(
        retry=retry_if_exception(lambda e: isinstance(e, KubeError) and e.status == 429),
        wait=wait_fixed(1),
        stop=stop_after_delay(60),
        reraise=True,
    )
    def list_all(self, res: Resource) -> list[dict]:
        """A LIST that waits out 429 "storage is (re)initializing" (a CRD installed moments ago)."""
        return self.kube.list(res, self.ns)[0]

    def largest_object(self) -> tuple[int, str]:
        best = (0, "")
        for res in AGN_RESOURCES:
            for obj in self.list_all(res):
                best = max(best, (object_bytes(obj), f"{res.kind}/{obj['metadata']['name']}"))
        return best

    # -- setup ---------------------------------------------------------------------------
    def operator_argv(self) -> list[str]:
        a = self.args
        return [
            "--probe-interval",
            str(a.probe_interval),
            "--probe-concurrency",
            str(a.probe_concurrency),
            "--coalesce-window",
            str(a.coalesce_window),
            "--max-batch-wait",
            str(a.max_batch_wait),
            "--reconcile-workers",
            str(a.reconcile_workers),
            "--overlay-shards",
            str(a.overlay_shards),
        ]

    def start_size(self, providers: int, consumers: int, *, code: str = "this") -> None:
        """Namespace, network, consumers; operator and gateways (of ``code``: this checkout or
        ``--before``) up and serving empty overlays."""
        b = self.bench
        self.ns = f"fleet-{providers}x{consumers}" + ("-before" if code == "before" else "")
        self.consumers = [f"c{i:02d}" for i in range(consumers)]
        width = max(4, len(str(providers - 1)))
        self.names = [f"p{i:0{width}d}" for i in range(providers)]
        b.ns = self.ns
        self.kube.ensure_namespace(self.ns)
        spec = {
            "probeIntervalSeconds": self.args.network_probe_interval,
            "metricsMaxAgeSeconds": self.args.metrics_max_age,
        }
        self.kube.create(NETWORKS, self.ns, network_body(spec))
        for c in self.consumers:
            self.kube.create(CONSUMERS, self.ns, consumer_body(c))
        common = ["--kubeconfig", str(b.kubeconfig), "--context", CTX, "--namespace", self.ns]
        # `python -m` imports from its working directory first: run each in the code's checkout.
        root = self.args.before if code == "before" else REPO
        env = {**b.env, "PYTHONPATH": str(root)}
        self.start_operator(common, env=env, cwd=root)
        for c in self.consumers:
            b.sup.start(
                f"gateway-{c}",
                [sys.executable, "-m", "agn.gateway", *common, "--consumer", c, "--port", "0"],
                env=env,
                cwd=root,
            )

    def start_operator(self, common: list[str], *, env: dict, cwd: Path, tries: int = 3) -> None:
        """Start the operator with /healthz on a free port, and wait until it answers there. The
        port is free when chosen, not reserved: if another process binds it first, the operator
        exits ("cannot serve /healthz") and it is started again on another one."""
        b = self.bench
        for _ in range(tries):
            port = free_port()
            self.operator_url = f"http://127.0.0.1:{port}"
            argv = [sys.executable, "-m", "agn.operator", *common, *self.operator_argv(), "--health-port", str(port)]
            rec = b.sup.start("operator", argv, env=env, cwd=cwd)

            def up(rec: ProcessRecord = rec) -> str | None:
                if b.sup.exited(rec) is not None:
                    return "exited"
                try:
                    with urllib.request.urlopen(f"{self.operator_url}/healthz", timeout=2):
                        return "up"
                except urllib.error.HTTPError:
                    return "up"  # it answers on the port (not healthy yet, e.g. still syncing): it is ours
                except OSError:
                    return None  # not listening yet

            if wait(up, deadline=time.monotonic() + 60, what="the operator's /healthz", max_sleep=0.1) == "up":
                return
            b.sup.stop("operator")
        raise SystemExit(f"benchmark setup failed: the operator exited {tries} times (see its log in {b.sup.log_dir})")

    def create_providers(self) -> None:
        pool = self.bench.pool
        n_drain = min(GATEWAY_DRAIN, len(self.names))
        bodies = [
            provider_body(
                name,
                f"{pool}/pool/{self.ns}-{name}",
                gateway="gw-drain" if i < n_drain else "gw-big",
                group=f"g{i % 4}",
                rank=i,
            )
            for i, name in enumerate(self.names)
        ]
        bodies += [
            provider_body(f"spare{g}", f"{pool}/pool/{self.ns}-spare{g}", gateway="gw-spare", group=f"g{g}", rank=99999)
            for g in range(SPARES)
        ]
        with cf.ThreadPoolExecutor(16) as ex:
            list(ex.map(lambda body: self.kube.create(PROVIDERS, self.ns, body), bodies))

    def stop_size(self) -> None:
        """Stop this size's operator and gateways by pid and delete its objects (no namespace
        controller runs here, so the objects are deleted by collection, not by the namespace)."""
        b = self.bench
        for rec in b.sup.records():
            if rec.name == "operator" or rec.name.startswith("gateway-"):
                b.sup.stop(rec.name)
        if not self.ns:
            return
        for res in AGN_RESOURCES:
            try:
                self.kube.custom.delete_collection_namespaced_custom_object(res.group, res.version, self.ns, res.plural)
            except Exception as exc:  # noqa: BLE001 - cleanup between sizes is best effort, and said so
                print(f"cleanup of {res.plural} in {self.ns} failed: {exc}", file=sys.stderr)

    # -- actions -------------------------------------------------------------------------
    def drain_cli(self, *select: str, timeout: float) -> float:
        """The real CLI, converged on every consumer; its wall time. Non-zero exit: PhaseFailed."""
        b = self.bench
        targets = ["--network", "net"]
        for c in self.consumers:
            targets += ["--consumer", c]
        argv = b.drain_argv("--timeout", str(max(1.0, timeout)), *select, *targets)
        if self.args.profile is not None:  # the CLI under requestprobe.py: its requests and a cProfile
            self.profiled += 1
            self.args.profile.mkdir(parents=True, exist_ok=True)
            stem = self.args.profile / f"drain-{self.ns}-{self.profiled}"
            probe = Path(__file__).with_name("requestprobe.py")
            argv = [sys.executable, str(probe), f"{stem}.json", "--profile", f"{stem}.prof", *argv[1:]]
        t0 = time.monotonic()
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, env=b.env, timeout=timeout + 60)
        except subprocess.TimeoutExpired:
            raise PhaseTimeout(f"provider-drain {' '.join(select)} (no exit)") from None
        secs = time.monotonic() - t0
        if proc.returncode != 0:
            try:
                state = json.loads(proc.stdout)["convergence"]["state"]
            except (ValueError, KeyError, TypeError):
                state = proc.stderr.strip().splitlines()[-1:] or ["?"]
            raise PhaseFailed(f"provider-drain {' '.join(select)} exit {proc.returncode}: {state}")
        try:
            self.last_timings = dict(json.loads(proc.stdout).get("timings") or {})
        except ValueError:
            self.last_timings = {}
        return secs

    def run_size(self, row: Row, *, timeout: float) -> None:
        deadline = time.monotonic() + timeout

        def left(what: str) -> float:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise PhaseTimeout(f"{what}: not started, the size's time was used up")
            return remaining

        self.start_size(row.providers, row.consumers, code=row.code)
        wait(lambda: self.converged(admitted=0), deadline=deadline, what="operator+gateways serving empty overlays")
        log = self.operator_log()

        total = len(self.names) + SPARES

        def probe_reading() -> None:
            text = self.operator_metrics()
            if text:
                row.backlog = max(row.backlog, metric_sum(text, "agn_probe_backlog"))
                row.lag_s = max(row.lag_s, metric_sum(text, "agn_probe_lag_seconds"))

        bytes0 = self.bytes_now()
        t0 = time.monotonic()
        self.create_providers()
        row.create_s = time.monotonic() - t0
        wait(
            lambda: self.converged(admitted=total),
            deadline=deadline,
            what=f"all {total} admitted and served",
            on_poll=probe_reading,
            max_sleep=ADMISSION_POLL,
        )
        row.admit_s = self.observed_at - t0
        row.admission_bytes = PhaseBytes.between(bytes0, self.bytes_now(), log)
        row.largest = self.largest_object()

        if self.args.settle:  # a settled reading: the first probes' status writes done meanwhile
            time.sleep(min(self.args.settle, left("settle")))
        # The drains' request counts include the rest of the background traffic (lease renewals,
        # gateways' reports, events); measure that rate idle, for scale.
        before, t_idle = self.apiserver_requests(), time.monotonic()
        time.sleep(min(BACKGROUND_WINDOW, left("background request rate")))
        row.background_rps = (self.apiserver_requests() - before) / (time.monotonic() - t_idle)

        target = self.names[0]
        for _ in range(self.args.repeat):
            before, bytes_before = self.apiserver_requests(), self.bytes_now()
            watch = PatchWatch(self.kube, self.ns, target)
            started = time.time()
            row.single_s.append(self.drain_cli("--provider", target, timeout=left("single drain")))
            st = stages(
                started=started,
                ended=time.time(),
                patch_at=watch.result(),
                logs=self.bench.sup.log_dir,
                consumers=self.consumers,
            )
            row.single_stages.append(st.seconds)
            if st.assembly_max is not None:
                row.single_assembly.append(st.assembly_max)
            row.single_timings.append(self.last_timings)
            row.single_requests.append(self.apiserver_requests() - before)
            row.single_bytes.append(PhaseBytes.between(bytes_before, self.bytes_now(), log))
            self.bench.set_drain([target], None)
            wait(lambda: self.converged(admitted=total), deadline=deadline, what="undrain served (not measured)")

        row.gw_size = min(GATEWAY_DRAIN, len(self.names))
        revs = self.revisions()
        before = self.apiserver_requests()
        row.gw_s = self.drain_cli("--gateway", "gw-drain", timeout=left("gateway drain"))
        row.gw_timings = self.last_timings
        row.gw_requests = self.apiserver_requests() - before
        after = self.revisions()
        row.gw_revisions = max(after[c] - revs[c] for c in self.consumers)
        row.largest = max(row.largest, self.largest_object())

    def memory(self, row: Row) -> None:
        """Peak RSS of this size's operator and largest gateway, by the pids the bench recorded."""
        peaks = {}
        for rec in self.bench.sup.records():
            if rec.name == "operator" or rec.name.startswith("gateway-"):
                try:
                    peaks[rec.name] = rss_mb(rec.pid)[1]
                except OSError:
                    continue
        row.operator_mb = peaks.get("operator")
        gateways = [v for k, v in peaks.items() if k.startswith("gateway-")]
        row.gateway_mb = max(gateways) if gateways else None


# -- the table ------------------------------------------------------------------------------
def verdict(value: float | None, goal: float) -> str:
    if value is None:
        return ""
    return "[green]ok[/]" if value <= goal else "[red]MISSED[/]"


def fmt(value: float | None, spec: str, unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


def bytes_cells(r: Row) -> tuple[str, str]:
    """(admission: per publication median / max KiB, total MiB operator / server; single drain:
    KiB the API server received, median)."""
    a = r.admission_bytes
    admission = "-"
    if a is not None:
        admission = f"{kib(a.median)} / {kib(a.max)} KiB ×{a.count}; total {size(a.operator)} / {size(a.server)}"
    drains = [b.server for b in r.single_bytes]
    return admission, (f"{kib(statistics.median(drains))} KiB" if drains else "-")


def render(rows: list[Row], baselines: dict[tuple[str, int], float], args: argparse.Namespace, started: str) -> Table:
    caption = (
        f"Operator: --probe-interval {args.probe_interval:g} --probe-concurrency {args.probe_concurrency} "
        f"--coalesce-window {args.coalesce_window:g} --max-batch-wait {args.max_batch_wait:g} --reconcile-workers {args.reconcile_workers} --overlay-shards {args.overlay_shards}, other flags default "
        f"(--probe-timeout 1, leader election on). Network: probeIntervalSeconds {args.network_probe_interval:g}, "
        f"metricsMaxAgeSeconds {args.metrics_max_age}. Fleet: N healthy providers (+{SPARES} spares) served by one "
        f"fake-provider process. Single drain: median of {args.repeat}, vs {args.baseline} providers with the "
        f"same consumers. Gateway drain: {GATEWAY_DRAIN} providers (all N if fewer). API req: change of the "
        "kube-apiserver's apiserver_request_total across the drain, every client but the probe status writes. RSS: peak (VmHWM). "
        "Overlay bytes: index+shard bodies written during admission, per publication (median / max, from the operator's "
        "log, × publications) and in total as the operator counted / as the API server received them "
        "(apiserver_request_body_size_bytes_sum); drain bytes: the API server's, median. "
        + (f"Rows marked (before): operator and gateways of {args.before}. " if args.before else "")
        + f"Goals: admitted+served <= {GOALS['admit_s']:g}s; single drain <= {GOALS['drain_ratio']:g}x baseline; "
        f"<= {GOALS['gw_revisions']} revisions per consumer; largest object <= 1 MiB; operator <= "
        f"{GOALS['operator_mb']:g} MB, gateway <= {GOALS['gateway_mb']:g} MB. Per-size timeout "
        f"{args.size_timeout:g}s. {started}."
    )
    table = Table(title="AGN fleet benchmark (this machine, this run)", caption=caption, caption_justify="left")
    for col in (
        "N x consumers",
        "create / admitted+served",
        "overlay bytes (admission)",
        "probe backlog / lag",
        "single drain",
        "API req (single) / idle rate",
        "drain bytes",
        "gw drain",
        "revisions",
        "API req (gw)",
        "largest AGN object",
        "RSS operator",
        "RSS gateway (max)",
        "status",
    ):
        table.add_column(col, overflow="fold")
    for r in rows:
        single = statistics.median(r.single_s) if r.single_s else None
        base = baselines.get((r.code, r.consumers))
        if r.providers == args.baseline:
            ratio_text = "baseline"
        elif single is not None and base:
            ratio_text = f"x{single / base:.2f} {verdict(single / base, GOALS['drain_ratio'])}"
        else:
            ratio_text = ""
        req = statistics.median(r.single_requests) if r.single_requests else None
        size, name = r.largest
        admission_bytes, drain_bytes = bytes_cells(r)
        table.add_row(
            f"{r.providers} x {r.consumers}" + (" (before)" if r.code == "before" else ""),
            f"{fmt(r.create_s, '.1f', 's')} / {fmt(r.admit_s, '.1f', 's')} {verdict(r.admit_s, GOALS['admit_s'])}"
            + (f" ({r.admit_s - r.create_s:.1f}s after the last)" if r.admit_s and r.create_s else ""),
            admission_bytes,
            f"{r.backlog:.0f} / {r.lag_s:.2f}s",
            f"{fmt(single, '.2f', 's')} {ratio_text}",
            f"{fmt(req, '.0f')} / {fmt(r.background_rps, '.0f', '/s')}",
            drain_bytes,
            f"{fmt(r.gw_s, '.2f', 's')} ({r.gw_size})" if r.gw_size else "-",
            f"{fmt(r.gw_revisions, 'd')} {verdict(r.gw_revisions, GOALS['gw_revisions'])}",
            fmt(r.gw_requests, ".0f"),
            f"{size / 1024:.1f} KiB {verdict(size, GOALS['largest_bytes'])} {name}" if name else "-",
            f"{fmt(r.operator_mb, '.0f', 'MB')} {verdict(r.operator_mb, GOALS['operator_mb'])}",
            f"{fmt(r.gateway_mb, '.0f', 'MB')} {verdict(r.gateway_mb, GOALS['gateway_mb'])}",
            r.failure or "done",
        )
    return table


def render_stages(rows: list[Row]) -> Table:
    """The single drains' stages (drainstages.py), median per stage, and the longest gateway
    fetch + assembly (median over the drains)."""
    table = Table(title="Single drain by stage (medians, seconds; drainstages.py)")
    for col in ("N x consumers", *STAGES, "gateway fetch+assembly (max)", "drains"):
        table.add_column(col)
    for r in rows:
        med = median_stages(r.single_stages)
        assembly = statistics.median(r.single_assembly) if r.single_assembly else None
        table.add_row(
            f"{r.providers} x {r.consumers}" + (" (before)" if r.code == "before" else ""),
            *(fmt(med.get(name), ".3f") for name in STAGES),
            fmt(assembly, ".3f"),
            str(len(r.single_s)),
        )
    return table


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)

    def providers(text: str) -> list[int]:
        return sizes(text, top=MAX_PROVIDERS)

    def consumers(text: str) -> list[int]:
        return sizes(text, top=99)

    def positive(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not 0 < value < float("inf"):
            raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
        return value

    def non_negative(text: str) -> float:
        return 0.0 if text.strip() in ("0", "0.0") else positive(text)

    parser.add_argument(
        "--providers", type=providers, default=[200], help=f"comma-separated fleet sizes, 1..{MAX_PROVIDERS} (200)"
    )
    parser.add_argument("--consumers", type=consumers, default=[2], help="comma-separated consumer counts (2)")
    parser.add_argument("--baseline", type=int, default=4, help="providers of the single-drain baseline (4)")
    parser.add_argument("--repeat", type=int, default=3, help="single drains per size, median shown (3)")
    parser.add_argument("--size-timeout", type=positive, default=900.0, help="seconds one size may take (900)")
    parser.add_argument("--probe-interval", type=positive, default=1.0, help="operator --probe-interval (1.0)")
    parser.add_argument(
        "--probe-concurrency", type=int, default=64, help="operator --probe-concurrency (64, the operator's default)"
    )
    parser.add_argument("--coalesce-window", type=non_negative, default=0.1, help="operator --coalesce-window (0.1)")
    parser.add_argument(
        "--network-probe-interval",
        type=positive,
        default=120.0,
        help=(
            "the network's spec.probeIntervalSeconds (120): how often each provider is probed; every probe "
            "writes its status, and one kube-apiserver on 2 cores takes ~100 such writes/s, so 5,000 providers "
            "every 120 s use about 40%% of it"
        ),
    )
    parser.add_argument(
        "--metrics-max-age",
        type=int,
        default=360,
        help="the network's spec.metricsMaxAgeSeconds (360; at least twice the probe interval)",
    )
    parser.add_argument("--json", type=Path, metavar="FILE", help="also write the rows and settings as JSON")
    parser.add_argument(
        "--profile",
        type=Path,
        metavar="DIR",
        help="run every drain through requestprobe.py: its API requests (drain-*.json) and a cProfile "
        "of the run (drain-*.prof, for pstats) in DIR",
    )
    parser.add_argument(
        "--settle",
        type=non_negative,
        default=0.0,
        help="seconds to wait after admission before the single drains (0: right after admission)",
    )
    parser.add_argument("--max-batch-wait", type=non_negative, default=1.0, help="operator --max-batch-wait (1.0)")
    parser.add_argument("--reconcile-workers", type=int, default=1, help="operator --reconcile-workers (1)")
    parser.add_argument("--overlay-shards", type=int, default=16, help="operator --overlay-shards (16)")
    parser.add_argument(
        "--before",
        type=Path,
        metavar="DIR",
        help="a checkout of the code before (git worktree add DIR <ref>): each size also runs with its operator "
        "and gateways, first, in the same minutes",
    )
    args = parser.parse_args(argv)
    if args.before is not None and not (args.before / "agn" / "operator" / "__main__.py").is_file():
        parser.error(f"--before {args.before}: not a checkout of this project (no agn/operator/__main__.py there)")
    for flag in ("baseline", "repeat", "probe_concurrency", "reconcile_workers", "overlay_shards"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag.replace('_', '-')}: must be a whole number >= 1, got {getattr(args, flag)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    def on_term(signum, frame) -> None:  # noqa: ANN001 - turn SIGTERM into the Ctrl-C path (teardown by pid)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    plan = list(
        dict.fromkeys(
            [(args.baseline, c) for c in args.consumers] + [(p, c) for p in args.providers for c in args.consumers]
        )
    )
    codes = ["before", "this"] if args.before else ["this"]
    rows: list[Row] = []
    baselines: dict[tuple[str, int], float] = {}
    interrupted = False
    with tempfile.TemporaryDirectory(prefix="agn-fleet-") as tmp:
        bench = Bench(Path(tmp))
        fleet = Fleet(bench, args)
        try:
            bench.start()
            for providers, consumers, code in [(p, c, code) for p, c in plan for code in codes]:
                row = Row(providers, consumers, code)
                rows.append(row)
                print(f"fleet: {providers} x {consumers} ({code}) ...", file=sys.stderr, flush=True)
                try:
                    fleet.run_size(row, timeout=args.size_timeout)
                except KeyboardInterrupt:
                    row.failure = "INTERRUPTED"
                    raise
                except PhaseTimeout as exc:
                    row.failure = f"TIMEOUT after {args.size_timeout:g}s: {exc}"
                except PhaseFailed as exc:
                    row.failure = f"FAILED: {exc}"
                except Exception as exc:  # noqa: BLE001 - one size's crash is its row's verdict, not the table's end
                    row.failure = f"FAILED: {type(exc).__name__}: {exc}"
                finally:
                    fleet.memory(row)
                    fleet.stop_size()
                if providers == args.baseline and row.single_s and (code, consumers) not in baselines:
                    baselines[(code, consumers)] = statistics.median(row.single_s)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            # Teardown by pid must finish: a second Ctrl-C here would leave detached processes.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            bench.stop()
    Console(width=200).print(render(rows, baselines, args, f"started {started}"))
    Console(width=200).print(render_stages(rows))
    if args.json:
        settings = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
        args.json.write_text(json.dumps({"settings": settings, "rows": [asdict(r) for r in rows]}, indent=2) + "\n")
    if interrupted:
        print("interrupted: rows after the last finished size are missing", file=sys.stderr)
        return 130
    return 1 if any(r.failure for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
