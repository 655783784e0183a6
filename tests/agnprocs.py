"""Starting the real AGN processes (operator, gateways, fake providers) from tests.

Every process goes through :class:`xtask.procs.Supervisor` — tracked by pid, stopped by pid
(TERM, then KILL) at teardown. Readiness is waited on a condition, never a fixed sleep.
"""

from __future__ import annotations

import json
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from xtask.procs import ProcessRecord, Supervisor, log_tail
from xtask.runtime.controlplane import free_port


def wait_for(predicate, *, timeout: float = 30.0, interval: float = 0.05, what: str = "condition"):
    """Poll ``predicate`` until it returns a truthy value; fail (never pass) on timeout."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last saw {last!r}")


def http_json(
    url: str, *, method: str = "GET", body: dict | None = None, headers: dict | None = None, timeout: float = 5.0
):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json", **(headers or {})}
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        return json.loads(resp.read() or b"null")


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """One scrape of a ``/metrics`` URL: ``{(sample name, sorted labels): value}``."""
    with urllib.request.urlopen(url, timeout=5) as resp:
        text = resp.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def sample(samples: dict, name: str, **labels: str) -> float | None:
    """The value of sample ``name`` with exactly ``labels`` in a :func:`scrape` (None: absent)."""
    return samples.get((name, tuple(sorted(labels.items()))))


class AgnProcesses:
    """Starts AGN processes against one control plane and namespace; ``stop_all`` at teardown."""

    def __init__(self, workdir: Path, *, kubeconfig: Path, context: str, namespace: str, env: dict[str, str]) -> None:
        self.sup = Supervisor(workdir / "run", workdir / "logs")
        self.kubeconfig = kubeconfig
        self.context = context
        self.namespace = namespace
        self.env = env
        self.names: list[str] = []

    def _start(self, name: str, argv: list[str]) -> ProcessRecord:
        rec = self.sup.start(name, [sys.executable, *argv], env=self.env)
        self.names.append(name)
        return rec

    def _kube_args(self) -> list[str]:
        return ["--kubeconfig", str(self.kubeconfig), "--context", self.context, "--namespace", self.namespace]

    def provider(self, name: str, *, port: int | None = None) -> str:
        """Start a fake provider; returns its base URL once /healthz answers."""
        port = port or free_port()
        self._start(f"provider-{name}", ["-m", "agn.provider", "--name", name, "--port", str(port)])
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: http_status(f"{url}/healthz") == 200, what=f"fake provider {name}")
        return url

    def operator(self, *extra: str, name: str = "operator") -> ProcessRecord:
        """Start an operator (``name`` tells several apart: pid file, log ``<name>.log``)."""
        return self._start(name, ["-m", "agn.operator", *self._kube_args(), *extra])

    def operator_with_health(self, *extra: str, name: str = "operator") -> str:
        """Start an operator serving /healthz and /metrics; returns its base URL once it answers."""
        port = free_port()
        self.operator("--health-port", str(port), *extra, name=name)
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: http_status(f"{url}/healthz") == 200, what=f"operator {name} /healthz")
        return url

    def gateway(self, consumer: str, *, port: int | None = None) -> str:
        """Start a consumer gateway; returns its base URL once /healthz answers."""
        port = port or free_port()
        self._start(
            f"gateway-{consumer}",
            ["-m", "agn.gateway", *self._kube_args(), "--consumer", consumer, "--port", str(port)],
        )
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: http_status(f"{url}/healthz") == 200, what=f"gateway {consumer}")
        return url

    def stop(self, name: str) -> None:
        self.sup.stop(name)

    def log(self, name: str) -> str:
        rec = self.sup.record(name)
        return log_tail(rec.log, lines=80) if rec else ""

    def stop_all(self) -> None:
        for name in reversed(self.names):
            self.sup.stop(name)
