"""Starting the real AGN processes (operator, gateways, fake providers) from tests.

Their command lines are :mod:`xtask.components`' own, as the local runtime's are.

Every process goes through :class:`xtask.procs.Supervisor` — tracked by pid, stopped by pid
(TERM, then KILL) at teardown. Readiness is waited on a condition, never a fixed sleep.
"""

from __future__ import annotations

import json
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from xtask import components
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

    def _start(self, component: components.Component, *, code: Path | None = None) -> ProcessRecord:
        """Start ``component``; ``code``: from another checkout of this project (a release
        before), which ``python -m`` then imports from (its working directory and PYTHONPATH)."""
        env = self.env if code is None else {**self.env, "PYTHONPATH": str(code)}
        rec = self.sup.start(component.name, component.argv(sys.executable), env=env, cwd=code)
        self.names.append(component.name)
        return rec

    def _placement(self) -> components.Placement:
        return components.Placement(kubeconfig=str(self.kubeconfig), context=self.context)

    def provider(
        self, name: str, *, port: int | None = None, metrics_format: str | None = None, api_key_file: Path | None = None
    ) -> str:
        """Start a fake provider (``metrics_format``: a real engine's exposition and health path;
        ``api_key_file``: the keys it requires, as llama.cpp's ``--api-key-file``); returns its
        base URL once its health answers."""
        fake = components.fake_provider(
            name,
            port=port or free_port(),
            name=f"provider-{name}",
            metrics_format=metrics_format,
            api_key_file=str(api_key_file) if api_key_file else None,
        )
        self._start(fake)
        wait_for(lambda: http_status(fake.url(fake.health_path)) == 200, what=f"fake provider {name}")
        return fake.url()

    def operator(self, *extra: str, name: str = "operator", port: int | None = None) -> ProcessRecord:
        """Start an operator (``name`` tells several apart: pid file, log ``<name>.log``); ``extra``
        flags as a user would type them."""
        operator = components.operator(
            namespace=self.namespace, port=port, placement=self._placement(), name=name, extra=extra
        )
        return self._start(operator)

    def operator_with_health(self, *extra: str, name: str = "operator") -> str:
        """Start an operator serving /healthz and /metrics; returns its base URL once it answers."""
        port = free_port()
        self.operator(*extra, name=name, port=port)
        url = f"http://127.0.0.1:{port}"
        wait_for(lambda: http_status(f"{url}/healthz") == 200, what=f"operator {name} /healthz")
        return url

    def gateway(self, consumer: str, *, port: int | None = None, code: Path | None = None) -> str:
        """Start a consumer gateway (``code``: another checkout's, :meth:`_start`); returns its
        base URL once /healthz answers."""
        gateway = components.gateway(
            consumer, namespace=self.namespace, port=port or free_port(), placement=self._placement()
        )
        self._start(gateway, code=code)
        wait_for(lambda: http_status(gateway.url(gateway.health_path)) == 200, what=f"gateway {consumer}")
        return gateway.url()

    def stop(self, name: str) -> None:
        self.sup.stop(name)

    def log(self, name: str) -> str:
        rec = self.sup.record(name)
        return log_tail(rec.log, lines=80) if rec else ""

    def stop_all(self) -> None:
        for name in reversed(self.names):
            self.sup.stop(name)


class Traffic:
    """Completions through both gateways (loopback) until stopped: the error-ratio gate, which
    every soak reads, needs requests to count."""

    def __init__(self, gateways: list[str]) -> None:
        self.stop = threading.Event()
        self.codes: list[int] = []
        self.thread = threading.Thread(target=self._run, args=(gateways,), daemon=True)

    def _run(self, gateways: list[str]) -> None:
        while not self.stop.is_set():
            for g in gateways:
                req = urllib.request.Request(
                    f"{g}/v1/completions",
                    data=b'{"prompt": "hi"}',
                    method="POST",
                    headers={"Content-Type": "application/json", "x-selection-group": "chat"},
                )
                try:
                    with urllib.request.urlopen(req, timeout=5) as resp:
                        self.codes.append(resp.status)
                except urllib.error.HTTPError as exc:
                    self.codes.append(exc.code)
                except (urllib.error.URLError, OSError):
                    self.codes.append(0)
            self.stop.wait(0.05)

    def __enter__(self) -> Traffic:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join(timeout=10)
