"""Starting real ``llama-server`` processes for the engines suite and loading them with real
completions. Each server goes through :class:`xtask.procs.Supervisor` (tracked and stopped by
pid), with the command line :func:`xtask.components.llama_server` gives the local runtime."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from agnprocs import sample, scrape
from xtask import components
from xtask.llamacpp.assets import LlamaAssets
from xtask.procs import ProcessRecord, Supervisor
from xtask.runtime.controlplane import free_port


@dataclasses.dataclass
class Server:
    component: components.Component
    record: ProcessRecord

    @property
    def url(self) -> str:
        return self.component.url()

    def load(self) -> tuple[float | None, float | None]:
        """(requests_processing, requests_deferred) from the server's own /metrics."""
        samples = scrape(f"{self.url}/metrics")
        return sample(samples, "llamacpp:requests_processing"), sample(samples, "llamacpp:requests_deferred")


def health(url: str) -> int:
    """The status of ``GET url/health``; 0 when nothing answers."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


class LlamaServers:
    def __init__(self, workdir: Path, llama: LlamaAssets, model: Path) -> None:
        self.sup = Supervisor(workdir / "run", workdir / "logs")
        self.llama = llama
        self.model = model
        self.names: list[str] = []

    def component(
        self, provider: str, *, slots: int = 2, port: int | None = None, api_key_file: Path | None = None
    ) -> components.Component:
        return components.llama_server(
            provider,
            binary=str(self.llama.server),
            model=str(self.model),
            port=port or free_port(),
            slots=slots,
            api_key_file=str(api_key_file) if api_key_file else None,
        )

    def start(self, component: components.Component) -> Server:
        """Start it; returns at once (its model is loading: /health answers 503, then 200)."""
        rec = self.sup.start(component.name, component.argv(""))
        self.names.append(component.name)
        return Server(component, rec)

    def stop_all(self) -> None:
        for name in reversed(self.names):
            self.sup.stop(name)


@dataclasses.dataclass
class Completion:
    """One completion of exactly ``n_predict`` tokens (``ignore_eos``) running in a thread: to the
    server's own ``/completion``, or with ``group`` through a consumer gateway at ``url``
    (``/v1/completions`` in that selection group)."""

    url: str
    n_predict: int
    group: str | None = None
    status: int | None = None
    tokens: int | None = None
    provider: str | None = None  # the gateway's x-agn-provider
    ended: float | None = None  # time.monotonic() when the answer arrived
    thread: threading.Thread | None = None

    def start(self) -> Completion:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        body = {"prompt": "Once upon a time", "n_predict": self.n_predict, "ignore_eos": True, "seed": 1}
        headers = {"Content-Type": "application/json"}
        path = "/completion"
        if self.group is not None:
            path, body["max_tokens"], headers["x-selection-group"] = "/v1/completions", self.n_predict, self.group
        req = urllib.request.Request(f"{self.url}{path}", data=json.dumps(body).encode(), headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=600) as resp:
                self.status, answer = resp.status, json.loads(resp.read())
                self.provider = resp.headers.get("x-agn-provider")
                self.tokens = answer.get("tokens_predicted") or (answer.get("usage") or {}).get("completion_tokens")
        except urllib.error.HTTPError as exc:
            self.status = exc.code
        finally:
            self.ended = time.monotonic()

    def join(self, timeout: float) -> None:
        assert self.thread is not None
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"a completion of {self.n_predict} tokens did not end in {timeout}s"
