"""The embedded control plane: a real etcd and kube-apiserver run as local processes.

Envtest-style (controller-runtime's ``pkg/internal/testing/controlplane``): free loopback
ports, a generated PKI, a client-certificate admin user, RBAC authorization, service-account
signing keys, readiness waited on ``/readyz``. etcd serves mutual TLS with the env's CA, as
kubeadm runs it: clients (kube-apiserver, and tooling holding a certificate from the env's
``certs/``) must present a certificate, so no other local user can read the store. Used by the
``local`` runtime and by the integration-test fixture. Processes are started and stopped only
through :class:`xtask.procs.Supervisor` (by pid).
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import ssl
import time
from collections.abc import Callable
from pathlib import Path

from tenacity import RetryError, Retrying, retry_if_result, stop_after_delay, wait_fixed

from agn import kubeconfig
from xtask.errors import ComponentFailed
from xtask.procs import ProcessRecord, Supervisor, log_tail
from xtask.record import Record
from xtask.runtime.certs import CertPaths, ensure_certs
from xtask.runtime.health import http_ok

ETCD = "etcd"
APISERVER = "kube-apiserver"
# How long `up` gives a running kube-apiserver that does not answer /readyz (its etcd untouched)
# before restarting it: one shutting down after a SIGTERM, paused or wedged never recovers alone.
UNREADY_GRACE = 10.0
# A file to write kube-apiserver's audit log of InferenceProvider writes to (who wrote what, at
# level RequestResponse): opt-in, for tests that must know which identity made a change (the
# chaos soak's hold-release invariant). Read when kube-apiserver starts.
AUDIT_LOG_ENV = "AGN_XTASK_AUDIT_LOG"
AUDIT_POLICY = """apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: RequestResponse
    verbs: [create, update, patch, delete]
    resources:
      - group: agn.dev
        resources: [inferenceproviders]
  - level: None
"""


def audit_args(state_dir: Path) -> list[str]:
    """kube-apiserver's audit flags when ``AGN_XTASK_AUDIT_LOG`` names a file, else none."""
    path = os.environ.get(AUDIT_LOG_ENV)
    if not path:
        return []
    policy = state_dir / "audit-policy.yaml"
    policy.write_text(AUDIT_POLICY)
    return [f"--audit-policy-file={policy}", f"--audit-log-path={path}", "--audit-log-mode=blocking"]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_free(port: int) -> bool:
    """Whether a server could listen on ``port`` now. SO_REUSEADDR as Go's (and Python's) servers
    set it: connections of a killed server in TIME_WAIT must not make its port look taken, or a
    restarted kube-apiserver would move and strand every client on the old address."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@dataclasses.dataclass
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class ComponentHealth(Record):
    name: str
    pid: int | None
    running: bool
    healthy: bool
    detail: str = ""


class ControlPlane:
    """etcd + kube-apiserver under ``state_dir`` (certs/, etcd/, logs/, run/). ``assets`` (the
    folder of the binaries) is needed to start them, not to read their health."""

    def __init__(self, state_dir: Path, assets: Path | None = None) -> None:
        self.state_dir = state_dir
        self.assets = assets
        self.supervisor = Supervisor(state_dir / "run", state_dir / "logs")
        self.certs: CertPaths = CertPaths.under(state_dir / "certs")
        self._ports_file = state_dir / "controlplane.json"

    # -- addresses ------------------------------------------------------------------------
    def ports(self) -> Ports | None:
        try:
            return Ports(**json.loads(self._ports_file.read_text()))
        except (OSError, ValueError, TypeError):
            return None

    @property
    def server(self) -> str:
        ports = self.ports()
        assert ports is not None, "control plane was never started"
        return f"https://127.0.0.1:{ports.apiserver}"

    def admin_context(self, name: str, *, namespace: str) -> kubeconfig.Config:
        """A kube context ``name`` for this control plane's admin user (cluster, user and context
        entries, certificates embedded as kind writes them), to add to a kubeconfig."""
        return kubeconfig.context_entries(
            name=name,
            server=self.server,
            ca_cert=self.certs.ca_cert,
            client_cert=self.certs.admin_cert,
            client_key=self.certs.admin_key,
            namespace=namespace,
        )

    def _allocate_ports(self) -> Ports:
        """Reuse the recorded ports when still free (so kubeconfigs stay valid), else pick new ones,
        three different ones: the kernel may hand a released port out again, and an etcd listening
        where kube-apiserver should would answer its /readyz (same CA) and then 404 every API path."""
        old = self.ports()
        taken = set(dataclasses.astuple(old)) if old is not None else set()
        fresh: list[int] = []
        while len(fresh) < 3:
            if (port := free_port()) not in taken:
                fresh.append(port)
                taken.add(port)
        ports = Ports(*fresh)
        if old is not None and old.etcd_client != old.etcd_peer:
            if self.supervisor.running(ETCD) or (port_free(old.etcd_client) and port_free(old.etcd_peer)):
                ports.etcd_client, ports.etcd_peer = old.etcd_client, old.etcd_peer
            distinct = old.apiserver not in (ports.etcd_client, ports.etcd_peer)  # a record an older version wrote
            if distinct and (self.supervisor.running(APISERVER) or port_free(old.apiserver)):
                ports.apiserver = old.apiserver
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self._ports_file.write_text(json.dumps(dataclasses.asdict(ports)))
        return ports

    # -- lifecycle ------------------------------------------------------------------------
    def start(self, *, timeout: float = 90.0, on_spawn: Callable[[str], None] | None = None) -> list[str]:
        """Start whatever is not running; returns the names of components started.

        ``on_spawn(name)`` is called as soon as a component's process exists (its pid file is
        written), before its readiness wait, so a caller interrupted during that wait knows
        to stop it.
        """
        if self.assets is None:
            raise ValueError("ControlPlane.start needs the folder of the binaries (assets)")
        ensure_certs(self.state_dir / "certs")
        self._stop_plain_etcd()
        started: list[str] = []
        ports = self._allocate_ports()
        spawned = on_spawn or (lambda name: None)
        if not self.supervisor.running(ETCD):
            self._start_etcd(ports, timeout=timeout, on_spawn=spawned)
            started.append(ETCD)
        rec = self.supervisor.running(APISERVER)
        if rec is not None:
            # A running kube-apiserver whose etcd was just restarted answers requests with
            # timeouts until it has reconnected; /readyz includes that check. One that is alive
            # but does not get ready otherwise (shutting down after a SIGTERM, paused, wedged)
            # is stopped after a short grace (by _wait_ready) and started again below.
            try:
                self._wait_ready(
                    rec, lambda: self._apiserver_ready(ports.apiserver), timeout=timeout if started else UNREADY_GRACE
                )
            except ComponentFailed:
                if started or self.supervisor.running(APISERVER) is not None:
                    raise
                rec = None
                # Stopped, but a killed multi-threaded process may hold its port a moment after
                # its pid reads as gone: start again on the same address (clients use it) once free.
                deadline = time.monotonic() + UNREADY_GRACE
                while not port_free(ports.apiserver) and time.monotonic() < deadline:
                    time.sleep(0.05)
        if rec is None:
            self._start_apiserver(ports, timeout=timeout, on_spawn=spawned)
            started.append(APISERVER)
        return started

    def stop(self) -> list[str]:
        """Stop both by pid, apiserver first. Returns errors (empty when clean); never raises."""
        errors = []
        for name in (APISERVER, ETCD):
            try:
                self.supervisor.stop(name)
            except OSError as exc:
                errors.append(f"{name}: {exc}")
        return errors

    def _stop_plain_etcd(self) -> None:
        """An env brought up before etcd served TLS runs a plain-HTTP etcd: stop it and the
        kube-apiserver using it, so both are started again with mutual TLS (the data stays)."""
        rec = self.supervisor.running(ETCD)
        if rec is not None and "--client-cert-auth=true" not in rec.argv:
            self.supervisor.stop(APISERVER)
            self.supervisor.stop(ETCD)

    def _binary(self, name: str) -> str:
        assert self.assets is not None, "checked by start()"
        return str(self.assets / name)

    def _start_etcd(self, ports: Ports, *, timeout: float, on_spawn: Callable[[str], None]) -> None:
        data = self.state_dir / "etcd"
        data.mkdir(parents=True, exist_ok=True)
        data.chmod(0o700)  # etcd itself insists on this for its data folder
        c = self.certs
        client = f"https://127.0.0.1:{ports.etcd_client}"
        peer = f"https://127.0.0.1:{ports.etcd_peer}"
        argv = [
            self._binary("etcd"),
            "--name=agn-local",
            f"--data-dir={data}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=agn-local={peer}",
            # Mutual TLS on both ports, with the env's CA (kubeadm's etcd flags).
            "--client-cert-auth=true",
            f"--trusted-ca-file={c.ca_cert}",
            f"--cert-file={c.etcd_server_cert}",
            f"--key-file={c.etcd_server_key}",
            "--peer-client-cert-auth=true",
            f"--peer-trusted-ca-file={c.ca_cert}",
            f"--peer-cert-file={c.etcd_peer_cert}",
            f"--peer-key-file={c.etcd_peer_key}",
            # A throwaway development store: fsync buys nothing here and costs seconds per test run.
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ]
        rec = self.supervisor.start(ETCD, argv)
        on_spawn(ETCD)
        self._wait_ready(rec, lambda: self._etcd_healthy(ports.etcd_client), timeout=timeout)

    def _start_apiserver(self, ports: Ports, *, timeout: float, on_spawn: Callable[[str], None]) -> None:
        c = self.certs
        argv = [
            self._binary("kube-apiserver"),
            f"--etcd-servers=https://127.0.0.1:{ports.etcd_client}",
            f"--etcd-cafile={c.ca_cert}",
            f"--etcd-certfile={c.etcd_client_cert}",
            f"--etcd-keyfile={c.etcd_client_key}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            # No kubernetes.default Endpoints to maintain: nothing runs in-cluster here.
            "--endpoint-reconciler-type=none",
            f"--secure-port={ports.apiserver}",
            f"--cert-dir={self.state_dir / 'certs'}",
            f"--tls-cert-file={c.serving_cert}",
            f"--tls-private-key-file={c.serving_key}",
            f"--client-ca-file={c.ca_cert}",
            "--authorization-mode=RBAC",
            f"--service-account-key-file={c.sa_pub}",
            f"--service-account-signing-key-file={c.sa_key}",
            "--service-account-issuer=https://kubernetes.default.svc",
            "--service-cluster-ip-range=10.96.0.0/24",
            "--allow-privileged=true",
            "--disable-admission-plugins=ServiceAccount",
            "--profiling=false",
            "--v=1",
            *audit_args(self.state_dir),
        ]
        rec = self.supervisor.start(APISERVER, argv)
        on_spawn(APISERVER)
        self._wait_ready(rec, lambda: self._apiserver_ready(ports.apiserver), timeout=timeout)

    def _wait_ready(self, rec: ProcessRecord, probe, *, timeout: float) -> None:
        def check() -> bool:
            if self.supervisor.exited(rec) is not None:
                raise ComponentFailed(
                    f"{rec.name} exited during start-up (status {self.supervisor.exited(rec)})",
                    log_tail=log_tail(rec.log),
                    hint=f"full log: {rec.log}",
                )
            return probe()

        retrying = Retrying(
            stop=stop_after_delay(timeout), wait=wait_fixed(0.1), retry=retry_if_result(lambda ok: not ok)
        )
        try:
            retrying(check)
        except RetryError:
            self.supervisor.stop(rec.name)
            raise ComponentFailed(
                f"{rec.name} did not become ready within {timeout:.0f}s",
                log_tail=log_tail(rec.log),
                hint=f"full log: {rec.log}",
            ) from None

    def _ssl_context(self, cert: Path, key: Path) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.certs.ca_cert))
        ctx.load_cert_chain(str(cert), str(key))
        return ctx

    def etcd_ssl_context(self) -> ssl.SSLContext:
        """What a client of this etcd needs: the env's CA and the apiserver-etcd-client certificate."""
        return self._ssl_context(self.certs.etcd_client_cert, self.certs.etcd_client_key)

    def _apiserver_ready(self, port: int) -> bool:
        try:
            context = self._ssl_context(self.certs.admin_cert, self.certs.admin_key)
        except (OSError, ssl.SSLError):
            return False
        return http_ok(f"https://127.0.0.1:{port}/readyz", context=context)

    def _etcd_healthy(self, port: int) -> bool:
        try:
            context = self.etcd_ssl_context()
        except (OSError, ssl.SSLError):
            return False  # a state folder from before etcd served TLS: `env up` adds the certificates
        return http_ok(f"https://127.0.0.1:{port}/health", context=context)

    # -- inspection -----------------------------------------------------------------------
    def health(self) -> list[ComponentHealth]:
        out = []
        ports = self.ports()
        for name in (ETCD, APISERVER):
            rec = self.supervisor.record(name)
            running = self.supervisor.running(name) is not None
            healthy = False
            if running and ports is not None:
                if name == ETCD:
                    healthy = self._etcd_healthy(ports.etcd_client)
                else:
                    healthy = self._apiserver_ready(ports.apiserver)
            out.append(ComponentHealth(name, rec.pid if rec else None, running, healthy))
        return out
