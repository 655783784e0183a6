#!/usr/bin/env python3
"""Scale benchmark for provider-drain on the real local control plane.

Brings up etcd + kube-apiserver (the same code as the local runtime), one fake-provider
process standing in for N providers (each with its own endpoint path), the real operator
and two real consumer gateways, then measures with the real CLI:

1. gateway-wide patch-only drain of N providers at --concurrency 1 (the baseline) vs 8 vs 32;
2. gateway-wide drain with convergence targets: wall time until both consumers serve it, and
   how many overlay revisions each consumer saw (burst coalescing), for the operator's default
   coalesce window vs a zero window (the baseline);
3. single-provider drain: time until the overlays carry it (operator reaction).

Prints a table. Numbers are from this machine, this run; compare rows, not absolutes.
Usage: python scripts/bench/drain_scale.py [--providers 200] [--repeat 1]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from agn.kube import CONSUMERS, NETWORKS, OVERLAYS, PROVIDERS, Kube, NotFound  # noqa: E402
from xtask.crds import install_crds  # noqa: E402
from xtask.procs import Supervisor  # noqa: E402
from xtask.runtime import kubeconfig  # noqa: E402
from xtask.runtime.assets import ensure_assets  # noqa: E402
from xtask.runtime.controlplane import ControlPlane, free_port  # noqa: E402

CTX = "local-bench"


def wait(pred, *, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.02)
    raise SystemExit(f"benchmark setup failed: timed out waiting for {what}")


class Bench:
    def __init__(self, root: Path, providers: int) -> None:
        self.root = root
        self.n = providers
        self.cp = ControlPlane(root / "cp", ensure_assets(build=False))
        self.sup = Supervisor(root / "run", root / "logs")
        self.kubeconfig = root / "kubeconfig"
        self.env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "PYTHONPATH": str(REPO), "NO_COLOR": "1",
                    "AGN_XTASK_JOURNAL_DIR": str(root / "journal")}
        self.ns = ""
        self.kube: Kube | None = None

    def start(self) -> None:
        self.cp.start()
        c = self.cp.certs
        kubeconfig.add_context(self.kubeconfig, kubeconfig.context_entries(
            name=CTX, server=self.cp.server, ca_cert=c.ca_cert, client_cert=c.admin_cert, client_key=c.admin_key,
            namespace="default"))
        self.kube = Kube.from_kubeconfig(kubeconfig=str(self.kubeconfig), context=CTX, field_manager="bench")
        install_crds(self.kube)
        port = free_port()
        self.sup.start("fake-pool", [sys.executable, "-m", "agn.provider", "--name", "pool", "--port", str(port)], env=self.env)
        self.pool = f"http://127.0.0.1:{port}"

    def scenario(self, name: str, *, coalesce: float) -> None:
        """A fresh namespace with N providers in gateway gw-big, operator and two gateways."""
        for proc in ("operator", "gateway-c-a", "gateway-c-b"):
            self.sup.stop(proc)
        self.ns = name
        k = self.kube
        k.ensure_namespace(self.ns)
        k.create(NETWORKS, self.ns, {"apiVersion": "agn.dev/v1alpha1", "kind": "InferenceNetwork", "metadata": {"name": "net"},
                                     "spec": {}})
        for c in ("c-a", "c-b"):
            k.create(CONSUMERS, self.ns, {"apiVersion": "agn.dev/v1alpha1", "kind": "InferenceConsumer",
                                          "metadata": {"name": c}, "spec": {"network": "net"}})
        for i in range(self.n):
            k.create(PROVIDERS, self.ns, {"apiVersion": "agn.dev/v1alpha1", "kind": "InferenceProvider",
                                          "metadata": {"name": f"p{i:03d}"},
                                          "spec": {"endpoint": f"{self.pool}/pool/p{i:03d}", "providerGateway": "gw-big",
                                                   "selectionGroup": f"g{i % 4}", "rank": i}})
        # One extra admitted provider per group outside the gateway keeps the capacity guard satisfied.
        for g in range(4):
            k.create(PROVIDERS, self.ns, {"apiVersion": "agn.dev/v1alpha1", "kind": "InferenceProvider",
                                          "metadata": {"name": f"spare{g}"},
                                          "spec": {"endpoint": f"{self.pool}/pool/spare{g}", "providerGateway": "gw-spare",
                                                   "selectionGroup": f"g{g}", "rank": 1000}})
        base = [sys.executable, "-m"]
        args = ["--kubeconfig", str(self.kubeconfig), "--context", CTX, "--namespace", self.ns]
        self.sup.start("operator", [*base, "agn.operator", *args, "--coalesce-window", str(coalesce),
                                    "--max-batch-wait", str(max(coalesce, 1.0 if coalesce else 0.0))], env=self.env)
        for c in ("c-a", "c-b"):
            self.sup.start(f"gateway-{c}", [*base, "agn.gateway", *args, "--consumer", c, "--port", "0"], env=self.env)
        wait(lambda: all(self._admitted(c) == self.n + 4 and self._served(c) for c in ("c-a", "c-b")), timeout=180,
             what="all providers admitted and served")

    def _overlay(self, consumer: str) -> dict | None:
        try:
            return self.kube.get(OVERLAYS, self.ns, consumer)["spec"]
        except NotFound:
            return None

    def _admitted(self, consumer: str) -> int:
        o = self._overlay(consumer)
        return sum(1 for c in (o or {}).get("candidates", []) if c["admission_state"] == "admitted")

    def _served(self, consumer: str) -> bool:
        o = self._overlay(consumer)
        status = self.kube.get(CONSUMERS, self.ns, consumer).get("status") or {}
        return bool(o) and status.get("servingRevision") == o["revision"]

    def drain(self, *args: str) -> tuple[float, dict]:
        argv = [sys.executable, "-m", "xtask", "env", "provider-drain", "--context", CTX, "--namespace", self.ns,
                "--output", "json", *args]
        t0 = time.monotonic()
        proc = subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=600)
        elapsed = time.monotonic() - t0
        if proc.returncode != 0:
            raise SystemExit(f"drain failed ({proc.returncode}): {proc.stdout[-2000:]} {proc.stderr[-2000:]}")
        return elapsed, json.loads(proc.stdout)

    def revision(self, consumer: str) -> int:
        return self._overlay(consumer)["revision"]

    def stop(self) -> None:
        for rec in self.sup.records():
            self.sup.stop(rec.name)
        if self.kube:
            self.kube.close()
        self.cp.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--providers", type=int, default=200)
    args = parser.parse_args()
    rows: list[tuple[str, str, str, str]] = []
    with tempfile.TemporaryDirectory(prefix="agn-bench-") as tmp:
        bench = Bench(Path(tmp), args.providers)
        try:
            bench.start()
            bench.scenario("fanout", coalesce=0.1)
            baseline = None
            for conc in (1, 8, 32):
                secs, report = bench.drain("--gateway", "gw-big", "--concurrency", str(conc))
                apply = report["timings"]["applySeconds"]
                baseline = baseline or apply
                rows.append((f"patch-only drain of {args.providers}, --concurrency {conc}", f"{apply:.2f}s writes",
                             f"{secs:.2f}s total", f"x{baseline / apply:.1f} vs concurrency 1"))
                bench.drain("--gateway", "gw-big", "--undrain", "--concurrency", "32")

            targets = ["--network", "net", "--consumer", "c-a", "--consumer", "c-b"]
            results = {}
            for label, window in (("coalesce window 0 (baseline)", 0.0), ("coalesce 0.1s, batches <= 1s (default)", 0.1)):
                bench.scenario(f"conv-{int(window * 1000)}", coalesce=window)
                before = {c: bench.revision(c) for c in ("c-a", "c-b")}
                secs, report = bench.drain("--gateway", "gw-big", "--concurrency", "8", *targets)
                revs = max(bench.revision(c) - before[c] for c in ("c-a", "c-b"))
                results[label] = revs
                rows.append((f"drain {args.providers} + wait for 2 consumers, {label}",
                             f"{report['timings']['waitSeconds']:.2f}s wait", f"{secs:.2f}s total",
                             f"{revs} overlay revisions per consumer"))

            bench.scenario("single", coalesce=0.1)
            lat = []
            for i in range(5):
                name = f"p{i:03d}"
                t0 = time.monotonic()
                bench.kube.merge_patch(PROVIDERS, bench.ns, name, {"spec": {"trafficPolicy": {"drain": True}}})
                wait(lambda: all(any(c["provider"] == name and c["admission_state"] == "existing_only"
                                     for c in bench._overlay(x)["candidates"]) for x in ("c-a", "c-b")),
                     timeout=30, what="overlay change")
                lat.append(time.monotonic() - t0)
            lat.sort()
            rows.append(("single drain -> both overlays existing_only (5 runs)", f"median {lat[2] * 1000:.0f}ms",
                         f"max {lat[-1] * 1000:.0f}ms", "spec write to overlay, watch-driven"))
        finally:
            bench.stop()
    table = Table(title=f"provider-drain at scale ({args.providers} providers, 2 consumers, this machine)")
    for col in ("scenario", "measure", "total", "comparison"):
        table.add_column(col)
    for row in rows:
        table.add_row(*row)
    Console(width=160).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
