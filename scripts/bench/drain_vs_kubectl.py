#!/usr/bin/env python3
"""provider-drain against what a user would run instead, in one run on one machine.

Environment: ``benchenv.py`` (real etcd + kube-apiserver, the real operator and two real
consumer gateways, providers served by one fake-provider process). Baselines use the kubectl
built with the control plane and the official Python client. Every command is timed wall-clock
as a user would see it (process start included).

1. Single converged drain (median of ``--repeat`` runs, each from a freshly served state):
   ``kubectl patch`` + ``kubectl wait --for=jsonpath=…`` on both consumers' overlays, vs
   ``xtask env provider-drain --provider … --network … --consumer … --consumer …`` (which also
   waits for both consumers' accepted and serving revisions, over two observations).
   Beside them, the floor of any command on the official Python client: a fresh process that
   loads the kubeconfig and sends the one PATCH, waiting for nothing.
2. Patch-only drain of a whole gateway of ``--providers`` providers: a sequential
   ``kubectl patch`` loop, a raw client thread pool doing only the writes at the same
   concurrency, the same pool sending every request xtask sends per provider (a server-side
   dry run, the patch, an Event), that pool again with xtask's patch bodies (its annotations
   and the caller's hold with its owner, which the API server's hold policy checks; the first
   pool patches the flag alone), and ``xtask`` (selection, plan, server-side dry run, journal,
   writes, read-back, Events).
3. The same gateway drain with convergence targets: overlay revisions per consumer.
4. Journal bytes for the gateway drain and for a ``--fleet``-provider patch-only drain.

Beside each xtask and kubectl row, the API requests it sent: kubectl's are the responses its
``-v=6`` log lines name; xtask's are counted by ``requestprobe.py`` where every request of the
official client passes (``RESTClientObject.request``, under ``agn.kubeconnect``'s wrapper). The
raw pools send, by construction, one request per write (plus a dry run and an Event per
provider in the same-requests pools, and one SelfSubjectReview in the one with xtask's
bodies).

``--before DIR`` runs another checkout's CLI (``git archive COMMIT | tar -x -C DIR``) beside
this one in every round of rows 1 and 2, with the CPU seconds of each (steadier than wall time on
a shared, loaded machine). ``--patch-only`` measures only row 2, without the kubectl loop:
``--repeat`` rounds, each running the three raw pools, xtask and ``--before``'s xtask once, in turn.

Prints one table. Speed is shown here and never asserted in tests.
Usage: python scripts/bench/drain_vs_kubectl.py [--providers 200] [--fleet 1000] [--repeat 7] [--before DIR]
       [--single-only | --patch-only]
"""

from __future__ import annotations

import argparse
import compileall
import datetime as dt
import json
import os
import platform
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from agn.kube import OVERLAYS, PROVIDERS
from agn.model import candidate_id
from agn.shards import DEFAULT_SHARD_COUNT, index_shard_name, is_sharded, shard_of
from benchenv import CONSUMER_NAMES, CTX, TARGETS, Bench

REPO = Path(__file__).resolve().parents[2]

RAW_POOL = """
import concurrent.futures as cf, sys
from kubernetes import client, config
context, namespace, workers, value, names = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "true", sys.argv[5:]
cfg = client.Configuration()
config.load_kube_config(context=context, client_configuration=cfg)
cfg.connection_pool_maxsize = workers
api = client.CustomObjectsApi(client.ApiClient(cfg))
body = {"spec": {"trafficPolicy": {"drain": value}}}
with cf.ThreadPoolExecutor(workers) as pool:
    list(pool.map(lambda n: api.patch_namespaced_custom_object("agn.dev", "v1alpha1", namespace, "inferenceproviders", n, body), names))
"""

# The same client sending what a safe drain sends per provider (what xtask does beside its journal,
# selection, locks and report): every patch checked with a server-side dry run first, then the
# patches, then one Event per provider. The floor of that design on this client and API server.
RAW_POOL_SAME_REQUESTS = (
    RAW_POOL[: RAW_POOL.index("with cf.ThreadPoolExecutor")]
    + """
def patch(n, dry):
    kw = {"dry_run": "All"} if dry else {}
    return api.patch_namespaced_custom_object("agn.dev", "v1alpha1", namespace, "inferenceproviders", n, body, **kw)
def event(n):
    meta = {"generateName": n + ".drain-"}
    regarding = {"apiVersion": "agn.dev/v1alpha1", "kind": "InferenceProvider", "name": n, "namespace": namespace}
    ev = {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": meta, "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "bench/raw",
          "reportingInstance": "bench", "action": "Drain", "reason": "ProviderDrained", "type": "Normal",
          "regarding": regarding, "note": "drained"}
    return api.create_namespaced_custom_object("events.k8s.io", "v1", namespace, "events", ev)
with cf.ThreadPoolExecutor(workers) as pool:
    list(pool.map(lambda n: patch(n, True), names))
    list(pool.map(lambda n: patch(n, False), names))
    list(pool.map(event, names))
"""
)


# The same again with the patch bodies xtask sends (RAW_POOL_SAME_REQUESTS sends only the flag):
# the run's agn.dev/drain-* annotations and the caller's hold with its owner, built with xtask's
# own format functions, so the API server (and the hold admission policy) does the same work per
# patch. Without xtask's resourceVersion precondition (the pool would need xtask's re-read on a
# conflict with the operator's status writes); the caller's username comes from one
# SelfSubjectReview, as xtask's does (the policy requires the owner to be the writer).
RAW_POOL_SAME_BODIES = RAW_POOL_SAME_REQUESTS.replace(
    "def patch(n, dry):\n",
    """import datetime as dt, uuid
from agn.holds import hold_key, owner_key
from xtask.drain.core.holds import AT, BY, OPERATION, REASON, hold_value
review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
owner = client.AuthenticationV1Api(api.api_client).create_self_subject_review(review).status.user_info.username
op, now = "drain-" + uuid.uuid4().hex[:12], dt.datetime.now(dt.UTC).replace(microsecond=0)
key = hold_key(owner)
hold = hold_value(holder="bench@host", reason="bench", ticket=None, since=now, expires_in=None, operation=op)
annotations = {REASON: "bench", BY: "bench@host", AT: now.strftime("%Y-%m-%dT%H:%M:%SZ"), OPERATION: op}
body = {"metadata": {"annotations": {**annotations, key: hold, owner_key(key): owner}}, **body}
def patch(n, dry):
""",
)
assert RAW_POOL_SAME_BODIES != RAW_POOL_SAME_REQUESTS

# ``-v=6`` logs one line per response: klog's structured ``"Response" verb="GET" url=… status="200 OK"``
# (kubectl 1.30 and later), or ``GET https://… 200 OK in 3 milliseconds`` (older).
KUBECTL_REQUEST = re.compile(r'"Response" verb="[A-Z]+"|\b(?:GET|POST|PUT|PATCH|DELETE) https?://\S+ \d{3}\b')


def kubectl_counted(bench: Bench, argv: list[str]) -> tuple[float, int]:
    """Wall time of one kubectl command, and the API requests it sent (``-v=6`` logs each)."""
    t0 = time.monotonic()
    proc = subprocess.run([*argv, "-v=6"], capture_output=True, text=True, env=bench.env, timeout=120)
    elapsed = time.monotonic() - t0
    if proc.returncode != 0:
        raise SystemExit(f"kubectl failed ({proc.returncode}): {argv[:6]} {proc.stderr[-1000:]}")
    return elapsed, len(KUBECTL_REQUEST.findall(proc.stderr))


def xtask_probed(bench: Bench, tmp: Path, *args: str, code: Path | None = None) -> tuple[float, dict, dict]:
    """Like ``bench.xtask``, through ``requestprobe.py``: also when the first API request left
    (seconds after the process was started), how many requests the run sent and the CPU
    seconds it used (``cpuSeconds``: user + system; steadier than wall time on a loaded machine).
    ``code``: another checkout whose ``xtask`` and ``agn`` the CLI runs (``--before``)."""
    out = tmp / "probe.json"
    argv = bench.drain_argv(*args)
    argv = [sys.executable, str(Path(__file__).with_name("requestprobe.py")), str(out), *argv[1:]]
    env = bench.env if code is None else {**bench.env, "PYTHONPATH": str(code)}
    started = time.time()
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=900)
    elapsed = time.monotonic() - t0
    done = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"drain failed ({proc.returncode}): {proc.stdout[-2000:]} {proc.stderr[-2000:]}")
    probe = json.loads(out.read_text())
    probe["firstRequestSeconds"] = probe["firstRequest"] - started
    probe["cpuSeconds"] = (done.ru_utime - used.ru_utime) + (done.ru_stime - used.ru_stime)
    return elapsed, json.loads(proc.stdout), probe


def kubectl_patch(bench: Bench, name: str, value: bool) -> list[str]:
    body = f'{{"spec":{{"trafficPolicy":{{"drain":{str(value).lower()}}}}}}}'
    return [
        bench.kubectl,
        "--context",
        CTX,
        "-n",
        bench.ns,
        "patch",
        "inferenceprovider",
        name,
        "--type",
        "merge",
        "-p",
        body,
    ]


def overlay_object(bench: Bench, consumer: str, provider: str) -> str:
    """The object a kubectl user waits on to see ``provider``'s candidate for ``consumer``.

    An inline overlay (earlier operators) carries every candidate in the RoutingOverlay. A
    sharded one keeps them in RoutingOverlayShards: the candidate's shard follows from its id
    (the provider's UID, hashed) and the index's shard count and form alone, so the user
    computes it once. That shard is written before the index, so waiting on it sees the change as soon as
    the operator has stored it (not yet published in the index: a slightly easier baseline)."""
    index = bench.kube.get(OVERLAYS, bench.ns, consumer)["spec"]
    if not is_sharded(index):
        return f"routingoverlay/{consumer}"
    uid = bench.kube.get(PROVIDERS, bench.ns, provider)["metadata"]["uid"]
    count = int(index.get("shardCount") or DEFAULT_SHARD_COUNT)
    # The index names its shards (a consumer's own, or its network's, shared by its consumers).
    return f"routingoverlayshard/{index_shard_name(index, shard_of(candidate_id(uid), count))}"


def kubectl_wait(bench: Bench, target: str, provider: str, state: str) -> list[str]:
    """``kubectl wait`` until ``target`` (from :func:`overlay_object`) has ``provider`` in ``state``;
    indexes and shards both keep candidates under ``.spec.candidates``."""
    path = f'{{.spec.candidates[?(@.provider=="{provider}")].admission_state}}'
    return [
        bench.kubectl,
        "--context",
        CTX,
        "-n",
        bench.ns,
        "wait",
        target,
        f"--for=jsonpath={path}={state}",
        "--timeout=60s",
    ]


def reset(bench: Bench, names: list[str]) -> None:
    bench.set_drain(names, None)
    bench.wait_all_admitted_and_served(timeout=120)


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def compile_checkout(root: Path = REPO) -> None:
    """Byte-compile the checkout's ``xtask`` and ``agn``, as installing a wheel does: with
    ``PYTHONDONTWRITEBYTECODE`` set (or a fresh worktree) every run would compile them again."""
    for package in ("xtask", "agn"):
        compileall.compile_dir(root / package, quiet=1)


def single_drain_rows(bench: Bench, tmp: Path, args: argparse.Namespace) -> list[tuple[str, str, str, str]]:
    """Row 1: the single converged drain, kubectl's, xtask's (and ``--before``'s, in the same
    rounds: each round runs every variant once, from a freshly served state) and the floor."""
    bench.scenario("single", providers=4)
    variants = {"this": None, **({"before": args.before} if args.before else {})}
    kubectl_s: list[float] = []
    kubectl_reqs: list[int] = []
    floor: list[float] = []
    samples: dict[str, list[dict]] = {v: [] for v in variants}
    for _ in range(args.repeat):
        reset(bench, ["p000"])
        floor.append(bench.timed([sys.executable, "-c", RAW_POOL, CTX, bench.ns, "1", "true", "p000"]))
        reset(bench, ["p000"])
        waits = [kubectl_wait(bench, overlay_object(bench, c, "p000"), "p000", "existing_only") for c in CONSUMER_NAMES]
        runs = [kubectl_counted(bench, argv) for argv in [kubectl_patch(bench, "p000", True), *waits]]
        kubectl_s.append(sum(secs for secs, _ in runs))
        kubectl_reqs.append(sum(n for _, n in runs))
        for variant, code in variants.items():
            reset(bench, ["p000"])
            secs, report, probe = xtask_probed(bench, tmp, "--provider", "p000", *TARGETS, code=code)
            assert report["convergence"]["state"] == "converged", report
            samples[variant].append({"secs": secs, "wait": report["timings"]["waitSeconds"], **probe})
            if args.calls and variant == "this":
                args.calls.write_text(json.dumps(probe, indent=1))
    base = median(kubectl_s)
    rows = [
        (
            "single converged drain: kubectl patch + 2x kubectl wait (overlays only)",
            f"median {base:.2f}s",
            f"min {min(kubectl_s):.2f}s max {max(kubectl_s):.2f}s",
            f"baseline; {median(kubectl_reqs):.0f} API requests (kubectl -v=6)",
        )
    ]
    for variant, got in samples.items():
        secs = [g["secs"] for g in got]
        rows.append(
            (
                "single converged drain: xtask provider-drain --provider + targets (accepted+serving, 2 obs.)"
                + ("" if variant == "this" else f", code of {args.before}"),
                f"median {median(secs):.2f}s",
                f"min {min(secs):.2f}s max {max(secs):.2f}s",
                f"x{median(secs) / base:.2f} of kubectl (wait {median([g['wait'] for g in got]):.2f}s); "
                f"first API request at {median([g['firstRequestSeconds'] for g in got]) * 1000:.0f} ms; "
                f"CPU median {median([g['cpuSeconds'] for g in got]):.2f}s min {min(g['cpuSeconds'] for g in got):.2f}s; "
                f"{median([g['requests'] for g in got]):.0f} API requests",
            )
        )
    rows.append(
        (
            "floor: the official Python client alone (start, kubeconfig, one PATCH, no wait)",
            f"median {median(floor):.2f}s",
            f"min {min(floor):.2f}s max {max(floor):.2f}s",
            f"x{median(floor) / base:.2f} of kubectl's whole drain: where any command on this client starts; "
            "1 API request",
        )
    )
    return rows


def timed_cpu(bench: Bench, argv: list[str], env: dict | None = None) -> tuple[float, float]:
    """Wall and CPU seconds (user + system) of one command run to its end."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env or bench.env, timeout=900)
    elapsed = time.monotonic() - t0
    done = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"command failed ({proc.returncode}): {argv[:6]} {proc.stdout[-1000:]} {proc.stderr[-1000:]}")
    return elapsed, (done.ru_utime - used.ru_utime) + (done.ru_stime - used.ru_stime)


def patch_only_rounds(
    bench: Bench, tmp: Path, args: argparse.Namespace, rows: list, *, rounds: int, loop: float | None = None
) -> str:
    """Row 2: the patch-only drain of the gateway's ``--providers``, ``rounds`` times: each round
    runs the writes-only pool, the pool sending xtask's requests, xtask and (``--before``) the other
    checkout's xtask once, each from the undrained state. Appends the rows (wall and CPU medians;
    ``loop``: the kubectl loop's seconds, for its ratios); returns the last journal's path."""
    names = [f"p{i:03d}" for i in range(args.providers)]
    conc, n = str(args.concurrency), args.providers
    xtasks = {"this": None, **({"before": args.before} if args.before else {})}
    samples: dict[str, list[tuple[float, float]]] = {v: [] for v in ("raw", "same", "bodies", *xtasks)}
    reqs: dict[str, list[int]] = {v: [] for v in xtasks}
    journal = ""
    for _ in range(rounds):
        for variant, script in (("raw", RAW_POOL), ("same", RAW_POOL_SAME_REQUESTS), ("bodies", RAW_POOL_SAME_BODIES)):
            samples[variant].append(
                timed_cpu(bench, [sys.executable, "-c", script, CTX, bench.ns, conc, "true", *names])
            )
            reset(bench, names)
        for variant, code in xtasks.items():
            secs, report, probe = xtask_probed(bench, tmp, "--gateway", "gw-big", "--concurrency", conc, code=code)
            assert report["stored"]["ok"], report
            samples[variant].append((secs, probe["cpuSeconds"]))
            reqs[variant].append(probe["requests"])
            journal = journal if code else report["journal"]
            reset(bench, names)
    wall = {v: median([w for w, _ in got]) for v, got in samples.items()}
    cpu = {v: median([c for _, c in got]) for v, got in samples.items()}
    spread = {
        v: f"{len(got)} runs, min {min(w for w, _ in got):.2f}s; CPU median {cpu[v]:.2f}s" for v, got in samples.items()
    }
    versus = f"x{loop / wall['raw']:.1f} faster than the loop; " if loop else ""
    rows.append(
        (
            f"patch-only drain of {n}: raw client thread pool ({conc}), writes only",
            f"median {wall['raw']:.2f}s",
            spread["raw"],
            f"{versus}{n} API requests",
        )
    )
    rows.append(
        (
            f"patch-only drain of {n}: raw client thread pool ({conc}), a dry run + a patch + an Event each",
            f"median {wall['same']:.2f}s",
            spread["same"],
            f"x{wall['same'] / wall['raw']:.2f} of the writes-only pool: the floor of xtask's requests; {3 * n} API requests",
        )
    )
    rows.append(
        (
            f"patch-only drain of {n}: the same pool, with xtask's patch bodies (its annotations and hold)",
            f"median {wall['bodies']:.2f}s",
            spread["bodies"],
            f"x{wall['bodies'] / wall['same']:.2f} of the pool sending the flag alone; {3 * n + 2} API requests",
        )
    )
    for variant, code in xtasks.items():
        versus = f"x{loop / wall[variant]:.1f} faster than the loop, " if loop else ""
        rows.append(
            (
                f"patch-only drain of {n}: xtask --gateway --concurrency {conc} (dry run+journal+read-back)"
                + ("" if code is None else f", code of {code}"),
                f"median {wall[variant]:.2f}s",
                spread[variant],
                f"{versus}x{wall[variant] / wall['raw']:.2f} of the pool, x{wall[variant] / wall['same']:.2f} of the pool "
                f"sending the same requests (CPU x{cpu[variant] / cpu['same']:.2f}), x{wall[variant] / wall['bodies']:.2f} of it "
                f"with the same bodies (CPU x{cpu[variant] / cpu['bodies']:.2f}); {median(reqs[variant]):.0f} API requests",
            )
        )
    return journal


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--providers", type=int, default=200, help="providers in the drained gateway (default 200)")
    parser.add_argument("--fleet", type=int, default=1000, help="providers for the journal-size run (default 1000)")
    parser.add_argument("--repeat", type=int, default=7, help="runs per single-drain measurement (default 7)")
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--single-only", action="store_true", help="measure only the single converged drain")
    parser.add_argument(
        "--patch-only",
        action="store_true",
        help="measure only the patch-only drain of --providers (no kubectl loop): --repeat rounds, each running "
        "the writes-only pool, the same-requests pool, xtask and --before's xtask once, wall and CPU",
    )
    parser.add_argument(
        "--before",
        type=Path,
        help="a checkout of other code (e.g. git archive of the commit before) whose CLI also runs the single "
        "drain, in the same rounds (the env's operator and gateways stay this checkout's)",
    )
    parser.add_argument("--calls", type=Path, help="write the API requests of the last single drain here (JSON)")
    args = parser.parse_args()
    compile_checkout()
    if args.before:
        compile_checkout(args.before)
    conc = str(args.concurrency)
    rows: list[tuple[str, str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="agn-bench-") as tmp:
        bench = Bench(Path(tmp))
        try:
            bench.start()

            if args.patch_only:
                bench.scenario("gateway", providers=args.providers)
                patch_only_rounds(bench, Path(tmp), args, rows, rounds=args.repeat)
                return print_table(rows)

            # 1. single converged drain, small env (4 providers + 4 spares, like the example)
            rows += single_drain_rows(bench, Path(tmp), args)

            if args.single_only:
                return print_table(rows)

            # 2. patch-only gateway drain
            bench.scenario("gateway", providers=args.providers)
            names = [f"p{i:03d}" for i in range(args.providers)]
            loop, loop_reqs = 0.0, 0
            for name in names:
                secs, count = kubectl_counted(bench, kubectl_patch(bench, name, True))
                loop, loop_reqs = loop + secs, loop_reqs + count
            reset(bench, names)
            n = args.providers
            rows.append(
                (
                    f"patch-only drain of {n}: sequential kubectl patch loop",
                    f"{loop:.2f}s",
                    "1 run",
                    f"baseline; {loop_reqs} API requests",
                )
            )
            journal_bytes = Path(patch_only_rounds(bench, Path(tmp), args, rows, rounds=3, loop=loop)).stat().st_size

            # 3. the same drain with targets: burst coalescing in the operator
            before = {c: bench.revision(c) for c in CONSUMER_NAMES}
            secs, report, probe = xtask_probed(bench, Path(tmp), "--gateway", "gw-big", "--concurrency", conc, *TARGETS)
            revs = max(bench.revision(c) - before[c] for c in CONSUMER_NAMES)
            rows.append(
                (
                    f"drain of {n} with targets (converged on both consumers)",
                    f"{secs:.2f}s",
                    f"wait {report['timings']['waitSeconds']:.2f}s",
                    f"{revs} overlay revisions per consumer; {probe['requests']} API requests",
                )
            )

            # 4. journal size, linear in N
            bench.scenario("fleet", providers=args.fleet, components=False)
            fleet_names = [f"p{i:03d}" for i in range(args.fleet)]
            raw_fleet = bench.timed([sys.executable, "-c", RAW_POOL, CTX, bench.ns, conc, "true", *fleet_names])
            bench.set_drain(fleet_names, None)
            secs, report, probe = xtask_probed(bench, Path(tmp), "--gateway", "gw-big", "--concurrency", conc)
            fleet_bytes = Path(report["journal"]).stat().st_size
            rows.append(
                (
                    f"journal of the {n}-provider drain",
                    f"{journal_bytes / 1024:.1f} KiB",
                    f"{journal_bytes / n:.0f} B/provider",
                    "append-only, fsync per batch",
                )
            )
            rows.append(
                (
                    f"patch-only drain of {args.fleet} (no operator): xtask vs raw pool ({conc})",
                    f"{secs:.2f}s",
                    f"raw pool {raw_fleet:.2f}s",
                    f"journal {fleet_bytes / 1024:.1f} KiB ({fleet_bytes / args.fleet:.0f} B/provider); "
                    f"{probe['requests']} API requests (raw pool: {args.fleet})",
                )
            )
        finally:
            bench.stop()
    return print_table(rows)


def print_table(rows: list[tuple[str, str, str, str]]) -> int:
    title = (
        f"provider-drain vs kubectl / raw client — {dt.date.today()}, {platform.node()}, "
        f"{os.cpu_count()} cores, Python {platform.python_version()}, load {os.getloadavg()[0]:.2f}"
    )
    table = Table(title=title)
    for col in ("scenario", "result", "spread", "comparison"):
        table.add_column(col)
    for row in rows:
        table.add_row(*row)
    Console(width=220).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
