"""The ``local`` runtime: a whole AGN environment as supervised local processes.

etcd + kube-apiserver (:mod:`xtask.runtime.controlplane`), then the CRDs and the env's
objects, one fake provider per provider, the operator, and one consumer gateway per
consumer. Every process is tracked by a pid file under the env's state folder and stopped
by pid. ``up`` is idempotent (running pieces are kept, dead ones restarted); ``down``
stops everything, removes the kube context and the state folder, and collects every error.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

from agn.kube import CONSUMERS, OVERLAYS, Kube, KubeError, kubeconfig_path
from xtask.crds import install_crds
from xtask.envdef import EnvDef
from xtask.errors import ComponentFailed, XtaskError
from xtask.procs import Supervisor, log_tail
from xtask.runtime import kubeconfig
from xtask.runtime.assets import ensure_assets
from xtask.runtime.controlplane import ControlPlane, free_port, port_free
from xtask.runtime.steps import Progress, Step, run_steps
from xtask.state import REPO_ROOT, EnvRecord, env_dir

RUNTIME = "local"
FIELD_MANAGER = "agn-xtask-env"


def context_name(env: str) -> str:
    return f"local-{env}"


class LocalEnv:
    """One environment on the local runtime."""

    def __init__(self, env: str) -> None:
        self.env = env
        self.dir = env_dir(env)
        self.supervisor = Supervisor(self.dir / "run", self.dir / "logs")
        self._ports_file = self.dir / "ports.json"

    # -- helpers ----------------------------------------------------------------------------
    def _ports(self) -> dict[str, int]:
        try:
            return json.loads(self._ports_file.read_text())
        except (OSError, ValueError):
            return {}

    def _port_for(self, key: str) -> int:
        """A stable loopback port per component, reused across restarts while free."""
        ports = self._ports()
        port = ports.get(key)
        if port is None or (not self.supervisor.running(key) and not port_free(port)):
            port = free_port()
            ports[key] = port
            self.dir.mkdir(parents=True, exist_ok=True)
            self._ports_file.write_text(json.dumps(ports, indent=2))
        return port

    def _python(self, name: str, module: str, args: list[str], *, ready_url: str | None) -> bool:
        """Start ``python -m module`` unless running; wait for ``ready_url``. True if started."""
        if self.supervisor.running(name):
            return False
        pythonpath = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
        env = {**os.environ, "PYTHONPATH": pythonpath, "PYTHONUNBUFFERED": "1"}
        rec = self.supervisor.start(name, [sys.executable, "-m", module, *args], env=env, cwd=REPO_ROOT)
        if ready_url:
            deadline = time.monotonic() + 30
            while not _http_ok(ready_url):
                if self.supervisor.exited(rec) is not None or time.monotonic() > deadline:
                    raise ComponentFailed(f"{name} did not start", log_tail=log_tail(rec.log), hint=f"log: {rec.log}")
                time.sleep(0.05)
        return True

    # -- up -------------------------------------------------------------------------------
    def up(self, envdef: EnvDef, *, progress: Progress, retain: bool = False, wait_timeout: float = 60.0) -> dict:
        """Bring the environment up (or repair it). Returns what was started."""
        record = EnvRecord.load(self.env)
        if record is not None and record.runtime != RUNTIME:
            raise XtaskError(f"environment {self.env} is up on the {record.runtime} runtime", hint=f"run `env down --env {self.env}` first")
        kubeconfig_file = Path(kubeconfig_path())
        context = context_name(self.env)
        started: list[str] = []
        state: dict = {}

        assets = ensure_assets()
        cp = ControlPlane(self.dir, assets)
        kube_args = ["--kubeconfig", str(kubeconfig_file), "--context", context, "--namespace", envdef.namespace]
        fresh = record is None

        def start_control_plane() -> None:
            started.extend(cp.start())
            EnvRecord(self.env, RUNTIME, context, str(kubeconfig_file), envdef.namespace).save()

        def write_context() -> None:
            kubeconfig.add_context(
                kubeconfig_file,
                kubeconfig.context_entries(
                    name=context, server=cp.server, ca_cert=cp.certs.ca_cert, client_cert=cp.certs.admin_cert,
                    client_key=cp.certs.admin_key, namespace=envdef.namespace,
                ),
            )
            state["kube"] = Kube.from_kubeconfig(kubeconfig=str(kubeconfig_file), context=context, field_manager=FIELD_MANAGER)

        def crds() -> None:
            install_crds(state["kube"])
            state["kube"].ensure_namespace(envdef.namespace)

        def providers() -> None:
            endpoints = {}
            for p in envdef.providers:
                if p.endpoint:
                    continue
                name = f"fake-{p.name}"
                port = self._port_for(name)
                url = f"http://127.0.0.1:{port}"
                if self._python(name, "agn.provider", ["--name", p.name, "--port", str(port)], ready_url=f"{url}/healthz"):
                    started.append(name)
                endpoints[p.name] = url
            kube: Kube = state["kube"]
            for obj in envdef.network_objects() + envdef.consumer_objects() + envdef.provider_objects(endpoints):
                kube.apply(obj, namespace=envdef.namespace)

        def operator() -> None:
            port = self._port_for("operator")
            if self._python("operator", "agn.operator", [*kube_args, "--health-port", str(port)],
                            ready_url=f"http://127.0.0.1:{port}/healthz"):
                started.append("operator")

        def gateways() -> None:
            for c in envdef.consumers:
                name = f"gateway-{c.name}"
                port = self._port_for(name)
                if self._python(name, "agn.gateway", [*kube_args, "--consumer", c.name, "--port", str(port)],
                                ready_url=f"http://127.0.0.1:{port}/healthz"):
                    started.append(name)

        def wait_served() -> None:
            state["served"] = wait_first_overlays(state["kube"], envdef, timeout=wait_timeout)

        def undo_all() -> None:
            # Only a fresh bring-up is rolled back whole; a repair keeps what was running before.
            for name in reversed(started):
                if name not in ("etcd", "kube-apiserver"):
                    self.supervisor.stop(name)
            if fresh:
                cp.stop()
                kubeconfig.remove_context(kubeconfig_file, context)
                shutil.rmtree(self.dir, ignore_errors=True)

        steps = [
            Step("start etcd and kube-apiserver", start_control_plane, undo_all),
            Step(f"write kube context {context} to {kubeconfig_file}", write_context),
            Step("install AGN CRDs", crds),
            Step("start fake providers and apply the environment's objects", providers),
            Step("start the AGN operator", operator),
            Step("start consumer gateways", gateways),
            Step("wait for every consumer to serve its first overlay", wait_served),
        ]
        try:
            run_steps(steps, progress=progress, retain=retain)
        finally:
            if "kube" in state:
                state["kube"].close()
        return {"started": started, "context": context, "kubeconfig": str(kubeconfig_file), "served": state.get("served", {})}

    # -- down -----------------------------------------------------------------------------
    def down(self, *, progress: Progress) -> dict:
        record = EnvRecord.load(self.env)
        errors: list[str] = []
        stopped: list[str] = []
        recs = self.supervisor.records()
        # Gateways and the operator before providers, the control plane last.
        order = {"etcd": 3, "kube-apiserver": 2}
        for rec in sorted(recs, key=lambda r: order.get(r.name, 1 if r.name.startswith("fake-") else 0)):
            try:
                progress(f"stop {rec.name} (pid {rec.pid})")
                if self.supervisor.stop(rec.name):
                    stopped.append(rec.name)
            except OSError as exc:
                errors.append(f"{rec.name}: {exc}")
        context = record.context if record else context_name(self.env)
        kubeconfig_file = Path(record.kubeconfig if record else kubeconfig_path())
        try:
            removed = kubeconfig.remove_context(kubeconfig_file, context)
            if removed:
                progress(f"remove kube context {context}")
        except OSError as exc:
            errors.append(f"kubeconfig {kubeconfig_file}: {exc}")
        if self.dir.exists():
            shutil.rmtree(self.dir, ignore_errors=True)
        return {"stopped": stopped, "errors": errors, "was_up": record is not None or bool(recs)}

    # -- inspection ---------------------------------------------------------------------------
    def components(self) -> list[dict]:
        out = []
        record = EnvRecord.load(self.env)
        if record is None:
            return out
        cp = ControlPlane(self.dir, Path("/nonexistent"))
        for h in cp.health():
            out.append({"name": h.name, "pid": h.pid, "running": h.running, "healthy": h.healthy})
        ports = self._ports()
        for rec in self.supervisor.records():
            if rec.name in ("etcd", "kube-apiserver"):
                continue
            running = self.supervisor.running(rec.name) is not None
            port = ports.get(rec.name)
            healthy = running and (port is None or _http_ok(f"http://127.0.0.1:{port}/healthz"))
            entry = {"name": rec.name, "pid": rec.pid, "running": running, "healthy": healthy}
            if port:
                entry["address"] = f"http://127.0.0.1:{port}"
            out.append(entry)
        return out


def wait_first_overlays(kube: Kube, envdef: EnvDef, *, timeout: float) -> dict[str, int]:
    """Wait until every consumer serves an overlay revision; returns consumer -> revision."""
    deadline = time.monotonic() + timeout
    last: dict[str, str] = {}
    while True:
        served: dict[str, int] = {}
        for c in envdef.consumers:
            try:
                overlay = kube.get(OVERLAYS, envdef.namespace, c.name)
                consumer = kube.get(CONSUMERS, envdef.namespace, c.name)
            except KubeError as exc:
                last[c.name] = str(exc)
                continue
            revision = overlay.get("spec", {}).get("revision")
            serving = (consumer.get("status") or {}).get("servingRevision")
            expected = len(envdef.providers)
            admitted = sum(1 for x in overlay["spec"].get("candidates", []) if x.get("admission_state") == "admitted")
            if revision and serving == revision and admitted >= expected - len(c.excluded_providers):
                served[c.name] = revision
            else:
                last[c.name] = f"overlay revision {revision}, serving {serving}, {admitted} admitted"
        if len(served) == len(envdef.consumers):
            return served
        if time.monotonic() > deadline:
            lagging = {k: v for k, v in last.items() if k not in served}
            raise XtaskError(f"consumers did not serve their first overlay within {timeout:.0f}s: "
                             + "; ".join(f"{k}: {v}" for k, v in sorted(lagging.items())))
        time.sleep(0.2)


def _http_ok(url: str) -> bool:
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=1) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError):
        return False
