"""The environment every benchmark runs in: the real local control plane (etcd +
kube-apiserver, the same code as the local runtime), one fake-provider process standing in
for any number of providers (each its own endpoint path, ``/pool/<name>``), the real
operator and two real consumer gateways (command lines from :mod:`xtask.components`, as
the local runtime's), all tracked by pid and stopped by pid.

Benchmarks import :class:`Bench`; nothing here measures anything.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from agn import kubeconfig  # noqa: E402
from agn.holds import HOLD_PREFIX  # noqa: E402
from agn.kube import CONSUMERS, NETWORKS, PROVIDERS, Kube  # noqa: E402
from agn.overlays import read_overlay  # noqa: E402
from agn.shards import Incomplete  # noqa: E402
from xtask import components as agn_components  # noqa: E402
from xtask.crds import install_crds  # noqa: E402
from xtask.procs import Supervisor  # noqa: E402
from xtask.runtime.assets import ensure_assets  # noqa: E402
from xtask.runtime.controlplane import ControlPlane, free_port  # noqa: E402

CTX = "local-bench"
CONSUMER_NAMES = ("c-a", "c-b")
TARGETS = ("--network", "net", "--consumer", "c-a", "--consumer", "c-b")


def wait(pred, *, timeout: float, what: str, interval: float = 0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(interval)
    raise SystemExit(f"benchmark setup failed: timed out waiting for {what}")


def network_body(spec: dict | None = None) -> dict:
    """The bench's one network, ``net`` (an empty spec selects every provider)."""
    return {
        "apiVersion": "agn.dev/v1alpha1",
        "kind": "InferenceNetwork",
        "metadata": {"name": "net"},
        "spec": spec or {},
    }


def consumer_body(name: str) -> dict:
    return {
        "apiVersion": "agn.dev/v1alpha1",
        "kind": "InferenceConsumer",
        "metadata": {"name": name},
        "spec": {"network": "net"},
    }


def provider_body(
    name: str, endpoint: str, *, gateway: str, group: str, rank: int, capacity: int | None = None
) -> dict:
    """One provider; ``capacity``: its ``spec.capacity.maxConcurrent`` (None: none declared)."""
    spec: dict = {"endpoint": endpoint, "providerGateway": gateway, "selectionGroup": group, "rank": rank}
    if capacity is not None:
        spec["capacity"] = {"maxConcurrent": capacity}
    return {"apiVersion": "agn.dev/v1alpha1", "kind": "InferenceProvider", "metadata": {"name": name}, "spec": spec}


class Bench:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.assets = ensure_assets(build=False)
        self.cp = ControlPlane(root / "cp", self.assets)
        self.sup = Supervisor(root / "run", root / "logs")
        self.kubeconfig = root / "kubeconfig"
        self.journal_dir = root / "journal"
        self.env = {
            **os.environ,
            "KUBECONFIG": str(self.kubeconfig),
            "PYTHONPATH": str(REPO),
            "NO_COLOR": "1",
            "AGN_XTASK_JOURNAL_DIR": str(self.journal_dir),
        }
        self.ns = ""
        self.kube: Kube | None = None
        self.pool = ""

    @property
    def kubectl(self) -> str:
        return str(self.assets / "kubectl")

    def start(self) -> None:
        self.cp.start()
        kubeconfig.add_context(
            self.kubeconfig,
            self.cp.admin_context(CTX, namespace="default"),
        )
        self.kube = Kube.from_kubeconfig(
            kubeconfig=str(self.kubeconfig), context=CTX, field_manager="bench", pool_size=32
        )
        install_crds(self.kube)
        pool = agn_components.fake_provider("pool", port=free_port(), name="fake-pool")
        self.sup.start(pool.name, pool.argv(sys.executable), env=self.env)
        self.pool = pool.url()

    def scenario(
        self,
        name: str,
        *,
        providers: int,
        coalesce: float = 0.1,
        components: bool = True,
        capacity: tuple[int, int] | None = None,
    ) -> None:
        """A fresh namespace: ``providers`` providers p000… in gateway gw-big plus one spare per
        selection group in gw-spare (so draining all of gw-big passes the capacity guard), one
        network, consumers c-a and c-b; with ``components``, the operator and both gateways,
        waited on until every provider is admitted and served. ``capacity``: the
        ``spec.capacity.maxConcurrent`` of each gw-big provider and of each spare."""
        for proc in ("operator", *(f"gateway-{c}" for c in CONSUMER_NAMES)):
            self.sup.stop(proc)
        self.ns = name
        k = self.kube
        k.ensure_namespace(self.ns)
        k.create(NETWORKS, self.ns, network_body())
        for c in CONSUMER_NAMES:
            k.create(CONSUMERS, self.ns, consumer_body(c))
        bodies = [
            provider_body(
                f"p{i:03d}",
                f"{self.pool}/pool/p{i:03d}",
                gateway="gw-big",
                group=f"g{i % 4}",
                rank=i,
                capacity=capacity and capacity[0],
            )
            for i in range(providers)
        ]
        bodies += [
            provider_body(
                f"spare{g}",
                f"{self.pool}/pool/spare{g}",
                gateway="gw-spare",
                group=f"g{g}",
                rank=1000,
                capacity=capacity and capacity[1],
            )
            for g in range(4)
        ]
        import concurrent.futures as cf

        with cf.ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda b: k.create(PROVIDERS, self.ns, b), bodies))
        self.total = len(bodies)
        if not components:
            return
        placement = agn_components.Placement(kubeconfig=str(self.kubeconfig), context=CTX)
        operator = agn_components.operator(
            namespace=self.ns,
            placement=placement,
            coalesce_window=coalesce,
            max_batch_wait=max(coalesce, 1.0 if coalesce else 0.0),
        )
        gateways = [agn_components.gateway(c, namespace=self.ns, port=0, placement=placement) for c in CONSUMER_NAMES]
        for component in (operator, *gateways):
            self.sup.start(component.name, component.argv(sys.executable), env=self.env)
        self.wait_all_admitted_and_served()

    def wait_all_admitted_and_served(self, *, timeout: float = 300) -> None:
        wait(
            lambda: all(self.admitted(c) == self.total and self.served(c) for c in CONSUMER_NAMES),
            timeout=timeout,
            what="every provider admitted and served",
            interval=0.05,
        )

    # -- observations ----------------------------------------------------------------------
    def overlay(self, consumer: str) -> dict | None:
        """The consumer's whole overlay spec (index plus shards, or inline), None if none yet;
        one whose shards have not caught up with its index reads as None (not yet) too."""
        try:
            return read_overlay(self.kube, self.ns, consumer)
        except Incomplete:
            return None

    def admitted(self, consumer: str) -> int:
        o = self.overlay(consumer)
        return sum(1 for c in (o or {}).get("candidates", []) if c["admission_state"] == "admitted")

    def served(self, consumer: str) -> bool:
        o = self.overlay(consumer)
        status = self.kube.get(CONSUMERS, self.ns, consumer).get("status") or {}
        return bool(o) and status.get("servingRevision") == o["revision"]

    def revision(self, consumer: str, *, timeout: float = 30.0) -> int:
        """The revision of the consumer's overlay, read whole (a read between a publication's
        shard and index writes is read again)."""
        deadline = time.monotonic() + timeout
        while (o := self.overlay(consumer)) is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"no whole overlay of {consumer} within {timeout:g}s")
            time.sleep(0.02)
        return o["revision"]

    # -- actions ---------------------------------------------------------------------------
    def drain_argv(self, *args: str) -> list[str]:
        """``python -m xtask env provider-drain`` on this bench's namespace, JSON out, plus ``args``."""
        drain = ["env", "provider-drain", "--context", CTX, "--namespace", self.ns, "--output", "json"]
        return [sys.executable, "-m", "xtask", *drain, *args]

    def xtask(self, *args: str) -> tuple[float, dict]:
        """Run ``python -m xtask env provider-drain`` as a user would; wall time and its JSON report."""
        argv = self.drain_argv(*args)
        t0 = time.monotonic()
        proc = subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=900)
        elapsed = time.monotonic() - t0
        if proc.returncode != 0:
            raise SystemExit(f"drain failed ({proc.returncode}): {proc.stdout[-2000:]} {proc.stderr[-2000:]}")
        return elapsed, json.loads(proc.stdout)

    def timed(self, argv: list[str]) -> float:
        t0 = time.monotonic()
        proc = subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=900)
        elapsed = time.monotonic() - t0
        if proc.returncode != 0:
            raise SystemExit(
                f"command failed ({proc.returncode}): {argv[:6]} {proc.stdout[-1000:]} {proc.stderr[-1000:]}"
            )
        return elapsed

    def set_drain(self, names: list[str], value: bool | None) -> None:
        """Reset providers directly (not measured)."""
        import concurrent.futures as cf

        def reset(name: str) -> None:
            patch: dict = {"spec": {"trafficPolicy": {"drain": value}}}
            if not value:  # a drain's hold stays until its owner (this bench's user) lets it go
                annotations = self.kube.get(PROVIDERS, self.ns, name)["metadata"].get("annotations") or {}
                held = {k: None for k in annotations if k.startswith(HOLD_PREFIX)}
                if held:
                    patch["metadata"] = {"annotations": held}
            self.kube.merge_patch(PROVIDERS, self.ns, name, patch)

        with cf.ThreadPoolExecutor(8) as pool:
            list(pool.map(reset, names))

    def stop(self) -> None:
        for rec in self.sup.records():
            self.sup.stop(rec.name)
        if self.kube:
            self.kube.close()
        self.cp.stop()
