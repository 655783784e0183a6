"""The ``local`` runtime: a whole AGN environment as supervised local processes.

etcd + kube-apiserver (:mod:`xtask.runtime.controlplane`), then the CRDs and the env's
objects, the fake providers (one process each up to :data:`POOL_THRESHOLD`, else one process
serving them all under ``/pool/<name>``), the operator, and one consumer gateway per
consumer, and (when Debian's ``prometheus`` is installed) a Prometheus scraping them
(:mod:`xtask.runtime.local_prometheus`). Every process is tracked by a pid file under the env's state folder from the moment
it is spawned and stopped by pid. ``up`` is idempotent (running pieces are kept, dead ones
restarted); ``down`` stops everything, removes the kube context and the state folder, and
collects every error.

Secrets stay in the env's state folder (mode 0700): the components are given
``<state>/kubeconfig``, which names the certificate and key files under ``<state>/certs/`` by
path, so no process needs a copy elsewhere. The user's kubeconfig context and ``env.json`` of
an env that is up are rewritten only after a repair succeeded.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import ClassVar

import yaml

from agn import kubeconfig
from agn.kube import ConfigError, Kube
from agn.kubeconfig import kubeconfig_path
from agn.outputfile import write_atomic
from agn.shards import DEFAULT_SHARD_COUNT
from xtask import components
from xtask.envdef import EnvDef
from xtask.errors import ComponentFailed, RefusedError, XtaskError
from xtask.procs import ProcessRecord, Supervisor, log_tail
from xtask.runtime import local_engines, local_prometheus, prometheus
from xtask.runtime.assets import ensure_assets, find_assets
from xtask.runtime.base import FIELD_MANAGER, Options, Runtime, context_name, refuse_other_runtime
from xtask.runtime.certs import CertPaths, private_dir
from xtask.runtime.controlplane import ControlPlane, free_port, port_free
from xtask.runtime.health import component_health, component_problem, http_ok
from xtask.runtime.steps import (
    Progress,
    Step,
    UpContext,
    apply_objects_step,
    install_crds_step,
    readiness_step,
    run_steps,
)
from xtask.state import REPO_ROOT, EnvRecord, claim_env_dir, env_dir, remove_env_dir

RUNTIME = "local"
# More fake providers than this are served by one process (POOL) under /pool/<name>, as the
# benchmarks do, instead of one process each.
POOL_THRESHOLD = 32
POOL = "provider-pool"
# Larger envs are refused before anything starts: every provider is an object the operator
# probes and writes the status of (about 100 status writes/s on 2 cores), and every consumer
# is a gateway process.
MAX_PROVIDERS = 10_000
MAX_CONSUMERS = 64


def check_size(envdef: EnvDef) -> None:
    """Refuse (exit 3) an env larger than the local runtime runs, before anything is started."""
    for count, cap, what in (
        (len(envdef.providers), MAX_PROVIDERS, "providers"),
        (len(envdef.consumers), MAX_CONSUMERS, "consumers (one gateway process each)"),
    ):
        if count > cap:
            raise RefusedError(
                f"env file {envdef.source}: {count} {what}, more than the {cap} the local runtime runs",
                hint="split the environment into smaller ones",
            )


def pooled(envdef: EnvDef) -> bool:
    """Whether the env's fake providers are served by one pool process."""
    return len(components.fake_provider_names(envdef)) > POOL_THRESHOLD


class LocalEnv(Runtime):
    """One environment on the local runtime."""

    name: ClassVar[str] = RUNTIME
    auto: ClassVar[bool] = True  # after kind: what `auto` falls back to

    @classmethod
    def create(cls, env: str, options: Options) -> LocalEnv:
        return cls(env)

    def problems(self) -> list[str]:
        if find_assets() is None and shutil.which("go") is None:
            return ["the control-plane binaries are missing and `go` (to build them) is not on PATH"]
        return []

    def __init__(self, env: str) -> None:
        self.env = env
        self.dir = env_dir(env)
        self.supervisor = Supervisor(self.dir / "run", self.dir / "logs")
        self._ports_file = self.dir / "ports.json"
        self._server_file = self.dir / "server"  # the API server address components were started against
        # The components' kubeconfig: certificate and key files named by path, all in this folder.
        self.components_kubeconfig = self.dir / "kubeconfig"

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
            write_atomic(self._ports_file, json.dumps(ports, indent=2))
        return port

    def _python(self, ctx: UpContext, name: str, module: str, args: list[str], *, ready_url: str | None) -> None:
        """Start ``python -m module`` unless running; wait for ``ready_url``. A process started
        joins ``ctx.started`` as soon as it is spawned, so rollback stops it even when the
        readiness wait is what failed or was interrupted."""
        if self.supervisor.running(name):
            return
        pythonpath = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
        env = {**os.environ, "PYTHONPATH": pythonpath, "PYTHONUNBUFFERED": "1"}
        rec = self.supervisor.start(name, [sys.executable, "-m", module, *args], env=env, cwd=REPO_ROOT)
        ctx.started.append(name)
        if ready_url:
            self._wait_answers(rec, ready_url)

    def _wait_answers(self, rec: ProcessRecord, url: str) -> None:
        """Wait up to 30 s until ``url`` answers 200; fail at once when the process exits."""
        deadline = time.monotonic() + 30
        while not http_ok(url, timeout=1):
            if self.supervisor.exited(rec) is not None or time.monotonic() > deadline:
                raise ComponentFailed(f"{rec.name} did not start", log_tail=log_tail(rec.log), hint=f"log: {rec.log}")
            time.sleep(0.05)

    # -- up -------------------------------------------------------------------------------
    def up(self, envdef: EnvDef, *, progress: Progress, retain: bool = False, wait_timeout: float = 60.0) -> dict:
        """Bring the environment up, or repair it: start what is dead, restart what lost its API server."""
        record = refuse_other_runtime(self.env, RUNTIME)
        check_size(envdef)
        ctx = UpContext(
            env=self.env,
            envdef=envdef,
            context=context_name(RUNTIME, self.env),
            kubeconfig=Path(kubeconfig_path()),
            fresh=record is None,
            wait_timeout=wait_timeout,
        )
        # A kubeconfig that cannot take the context fails now, before anything is started.
        kubeconfig.read_for_update(ctx.kubeconfig)
        cp = ControlPlane(self.dir, ensure_assets())
        steps = [
            Step(
                "start etcd and kube-apiserver",
                lambda c: self._start_control_plane(c, cp),
                undo=lambda c: self._remove_if_fresh(c, cp),
            ),
            Step("connect with the env's certificates", lambda c: self._connect(c, cp)),
            install_crds_step(),
            Step("start fake providers", self._start_providers, undo=self._stop_started),
            *self._engine_steps(envdef),
            apply_objects_step(),
            Step("start the AGN operator", self._start_operator, undo=self._stop_started),
            Step("start consumer gateways", self._start_gateways, undo=self._stop_started),
            self._prometheus_step(),
            readiness_step(diagnose=self.diagnose),
            # Last: a repair that fails leaves the user's context and env.json as they were.
            Step(f"write kube context {ctx.context} to {ctx.kubeconfig}", lambda c: self._publish(c, cp)),
        ]
        try:
            run_steps(steps, ctx, progress=progress, retain=retain)
        finally:
            ctx.close()
        return ctx.summary()

    def _start_control_plane(self, ctx: UpContext, cp: ControlPlane) -> None:
        claim_env_dir(self.env)  # the folder and its marker first: only a marked folder is ever removed
        private_dir(self.dir)
        if ctx.fresh:
            # Written first on a fresh bring-up: it marks the folder as this env's and tells
            # `env down` what to clean up should this run be killed outright.
            self._record(ctx).save()
        cp.start(on_spawn=ctx.started.append)
        self._server_file.write_text(cp.server)

    def _record(self, ctx: UpContext) -> EnvRecord:
        return EnvRecord(self.env, RUNTIME, ctx.context, str(ctx.kubeconfig), ctx.envdef.namespace)

    def _remove_if_fresh(self, ctx: UpContext, cp: ControlPlane) -> None:
        # Only a fresh bring-up is rolled back whole; a repair keeps what was running before.
        # Every process under the folder is this run's: stop them all (whether or not their
        # readiness wait finished) before the folder with their pid files goes.
        if ctx.fresh:
            try:
                self._stop_all(progress=lambda line: None)
                cp.stop()
            finally:
                remove_env_dir(self.env)

    def _connect(self, ctx: UpContext, cp: ControlPlane) -> None:
        self._write_components_kubeconfig(ctx, cp)
        ctx.kube = Kube.from_kubeconfig(
            kubeconfig=str(self.components_kubeconfig), context=ctx.context, field_manager=FIELD_MANAGER
        )

    def _write_components_kubeconfig(self, ctx: UpContext, cp: ControlPlane) -> None:
        """``<state>/kubeconfig`` (0600): the env's context with its certificate, key and CA named
        by path in ``<state>/certs/``. Written whole, then renamed into place."""
        certs = cp.certs
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": ctx.context, "cluster": {"server": cp.server, "certificate-authority": str(certs.ca_cert)}}
            ],
            "users": [
                {
                    "name": ctx.context,
                    "user": {"client-certificate": str(certs.admin_cert), "client-key": str(certs.admin_key)},
                }
            ],
            "contexts": [
                {
                    "name": ctx.context,
                    "context": {"cluster": ctx.context, "user": ctx.context, "namespace": ctx.envdef.namespace},
                }
            ],
            "current-context": ctx.context,
        }
        write_atomic(self.components_kubeconfig, yaml.safe_dump(config, sort_keys=False))

    def _publish(self, ctx: UpContext, cp: ControlPlane) -> None:
        """The user's kube context and ``env.json``, once everything else has succeeded."""
        kubeconfig.add_context(
            ctx.kubeconfig,
            cp.admin_context(ctx.context, namespace=ctx.envdef.namespace),
        )
        self._record(ctx).save()

    def _placement(self, ctx: UpContext) -> components.Placement:
        return components.Placement(kubeconfig=str(self.components_kubeconfig), context=ctx.context)

    def _start(self, ctx: UpContext, component: components.Component) -> None:
        """Start ``component`` unless running; wait until it answers its health path."""
        url = component.url(component.health_path)
        self._python(ctx, component.name, component.module, list(component.args), ready_url=url)

    def _start_providers(self, ctx: UpContext) -> None:
        fakes = components.fake_provider_names(ctx.envdef)
        if pooled(ctx.envdef):
            # One process answers for every fake under /pool/<name>; one process per
            # provider left from a smaller version of the env is stopped.
            for rec in self.supervisor.records():
                if rec.name.startswith("fake-"):
                    self.supervisor.stop(rec.name)
            pool = components.fake_provider(POOL, port=self._port_for(POOL), name=POOL)
            self._start(ctx, pool)
            ctx.endpoints.update({name: pool.url(f"/pool/{name}") for name in fakes})
            return
        self.supervisor.stop(POOL)  # the env got small again (a no-op when there is none)
        for fake in components.env_fake_providers(ctx.envdef, port_for=self._port_for, placement=self._placement(ctx)):
            self._start(ctx, fake)
            ctx.endpoints[fake.serves] = fake.url()

    def _engine_steps(self, envdef: EnvDef) -> list[Step]:
        """Start the real engines the env file declares (none: no step)."""
        if not local_engines.has_engines(envdef):
            return []

        def start(ctx: UpContext) -> None:
            local_engines.start_engines(
                ctx, self.supervisor, port_for=self._port_for, wait_answers=self._wait_answers, state_dir=self.dir
            )

        def store(ctx: UpContext) -> None:
            local_engines.store_keys(ctx, state_dir=self.dir)

        steps = [Step("start inference engines (llama-server)", start, undo=self._stop_started)]
        if local_engines.has_keys(envdef):
            steps.append(Step("store the engines' API keys in Secrets", store))
        return steps

    def _start_operator(self, ctx: UpContext) -> None:
        port = self._port_for("operator")
        operator = components.env_operator(ctx.envdef, port=port, placement=self._placement(ctx))
        self._restart_if_stale(operator.name, port, ctx)
        shards = str(ctx.envdef.overlay_shards)
        self._restart_if_changed("operator", "--overlay-shards", shards, default=str(DEFAULT_SHARD_COUNT), ctx=ctx)
        self._start(ctx, operator)

    def _start_gateways(self, ctx: UpContext) -> None:
        for gateway in components.env_gateways(ctx.envdef, port_for=self._port_for, placement=self._placement(ctx)):
            self._restart_if_stale(gateway.name, self._port_for(gateway.name), ctx)
            self._start(ctx, gateway)

    def _prometheus_step(self) -> Step:
        """Start Prometheus when it is installed; else a step that only says why it is not started."""
        if prometheus.binary() is None:
            return Step(f"Prometheus: not started, {prometheus.NOT_INSTALLED}", lambda c: None)

        def start(ctx: UpContext) -> None:
            targets = local_prometheus.scrape_targets(ctx.envdef, self._ports(), pooled=pooled(ctx.envdef))
            local_prometheus.start(
                ctx,
                self.supervisor,
                targets,
                state_dir=self.dir,
                port_for=self._port_for,
                wait_answers=self._wait_answers,
            )

        return Step("start Prometheus (scraping the operator and gateways)", start, undo=self._stop_started)

    def _restart_if_stale(self, name: str, port: int, ctx: UpContext) -> None:
        """Stop a running component whose health endpoint says it lost the API server (its watches
        have failed past their bound, or it talks to another address); the caller starts it again."""
        if not self.supervisor.running(name):
            return
        why = component_problem(f"http://127.0.0.1:{port}/healthz", server=self.server())
        if why:
            ctx.started.append(f"{name} (restarted: {why})")
            self.supervisor.stop(name)

    def _restart_if_changed(self, name: str, flag: str, value: str, *, default: str, ctx: UpContext) -> None:
        """Stop a running component started with another ``flag`` value (say the env file's
        ``overlayShards`` changed); the caller starts it again with this one."""
        rec = self.supervisor.running(name)
        if rec is None:
            return
        argv = rec.argv
        running = argv[argv.index(flag) + 1] if flag in argv[:-1] else default
        if running != value:
            ctx.started.append(f"{name} (restarted: {flag} {running} -> {value})")
            self.supervisor.stop(name)

    def _stop_started(self, ctx: UpContext) -> None:
        for name in reversed(ctx.started):
            if name not in ("etcd", "kube-apiserver") and self.supervisor.record(name) is not None:
                self.supervisor.stop(name)

    def _written(self) -> kubeconfig.Written | None:
        """What this env wrote into the kubeconfig (its server and CA): only that is removed."""
        return kubeconfig.Written.from_files(self.server(), CertPaths.under(self.dir / "certs").ca_cert)

    def server(self) -> str | None:
        try:
            return self._server_file.read_text().strip() or None
        except OSError:
            return None

    def diagnose(self) -> list[str]:
        """What the processes say about a failed readiness wait: who is not running or not healthy."""
        out = []
        for c in self.status():
            if not c["running"]:
                rec = self.supervisor.record(c["name"])
                out.append(f"{c['name']} is not running" + (f" (log: {rec.log})" if rec else ""))
            elif not c["healthy"]:
                out.append(f"{c['name']} is unhealthy: {c.get('detail') or 'no detail'}")
        return out

    # -- down -----------------------------------------------------------------------------
    def _stop_all(self, *, progress: Progress) -> tuple[list[str], list[str], bool]:
        """Stop every process with a pid file here: (stopped, errors, whether there were any)."""
        errors: list[str] = []
        stopped: list[str] = []
        recs = self.supervisor.records()
        # Gateways and the operator before providers, the control plane last.
        order = {"etcd": 3, "kube-apiserver": 2, POOL: 1}
        provider = ("fake-", local_engines.PREFIX)
        for rec in sorted(recs, key=lambda r: order.get(r.name, 1 if r.name.startswith(provider) else 0)):
            try:
                progress(f"stop {rec.name} (pid {rec.pid})")
                if self.supervisor.stop(rec.name):
                    stopped.append(rec.name)
            except OSError as exc:
                errors.append(f"{rec.name}: {exc}")
        return stopped, errors, bool(recs)

    def down(self, *, progress: Progress) -> dict:
        record = EnvRecord.load(self.env)
        stopped, errors, had_processes = self._stop_all(progress=progress)
        context = record.context if record else context_name(RUNTIME, self.env)
        kubeconfig_file = Path(record.kubeconfig if record else kubeconfig_path())
        try:
            removed = kubeconfig.remove_context(kubeconfig_file, context, ours=self._written())
            if removed:
                progress(f"remove kube context {context}")
        except ConfigError as exc:  # names the file
            errors.append(str(exc))
        except OSError as exc:
            errors.append(f"kubeconfig {kubeconfig_file}: {exc}")
        try:
            remove_env_dir(self.env)
        except XtaskError as exc:  # not the env's own folder, or not all removed: says which
            errors.append(str(exc))
        return {"stopped": stopped, "errors": errors, "was_up": record is not None or had_processes}

    # -- inspection ---------------------------------------------------------------------------
    def status(self) -> list[dict]:
        out: list[dict] = []
        record = EnvRecord.load(self.env)
        if record is None:
            return out
        cp = ControlPlane(self.dir)
        for h in cp.health():
            out.append({"name": h.name, "pid": h.pid, "running": h.running, "healthy": h.healthy})
        ports = self._ports()
        server = self.server()
        for rec in self.supervisor.records():
            if rec.name in ("etcd", "kube-apiserver"):
                continue
            running = self.supervisor.running(rec.name) is not None
            port = ports.get(rec.name)
            entry: dict = {"name": rec.name, "pid": rec.pid, "running": running, "healthy": running}
            if port:
                entry["address"] = f"http://127.0.0.1:{port}"
                if rec.name == "operator" or rec.name.startswith("gateway-"):
                    entry["metricsUrl"] = f"{entry['address']}/metrics"  # Prometheus text, next to /healthz
                if running and rec.name == prometheus.NAME:
                    entry["healthy"], entry["detail"] = local_prometheus.health(entry["address"])
                elif running and rec.name.startswith(local_engines.PREFIX):
                    entry["metricsUrl"] = f"{entry['address']}/metrics"
                    entry["healthy"] = http_ok(f"{entry['address']}/health", timeout=2)
                    entry["detail"] = "model loaded" if entry["healthy"] else "/health does not answer 200 (loading?)"
                elif running:
                    # Fake providers answer plain 200; the operator and gateways say whether
                    # their watches are live and which API server and overlay they use.
                    entry["healthy"], entry["detail"] = component_health(f"{entry['address']}/healthz", server=server)
            out.append(entry)
        return out

    def prometheus(self) -> dict:
        """``env status``'s ``prometheus``: its URL while it runs, else why it does not."""
        return local_prometheus.status(self.supervisor, self._ports().get(prometheus.NAME))
