"""The env's Prometheus on the local runtime, as one of its supervised processes: the scrape
targets read from the env's ports (:func:`scrape_targets`), starting it (:func:`start`), and
what ``env status`` says of it (:func:`status`, :func:`health`). ``env up`` adds its step only
when the binary is installed (:mod:`xtask.runtime.local`); ``env down`` stops it by pid with
every other process. Its config, target files and API are :mod:`xtask.runtime.prometheus`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from xtask import components
from xtask.envdef import EnvDef
from xtask.procs import ProcessRecord, Supervisor
from xtask.runtime import prometheus
from xtask.runtime.health import http_ok
from xtask.runtime.steps import UpContext


def scrape_targets(envdef: EnvDef, ports: Mapping[str, int], *, pooled: bool) -> prometheus.ScrapeTargets:
    """The operator, the gateways and the fake providers that run as their own process (a
    pool of fakes is not scraped: one target would stand for thousands of providers)."""

    def addresses(names: dict[str, str]) -> dict[str, str]:  # label -> process name
        return {label: f"127.0.0.1:{ports[name]}" for label, name in names.items() if name in ports}

    fakes = {} if pooled else {p: f"fake-{p}" for p in components.fake_provider_names(envdef)}
    return prometheus.ScrapeTargets(
        operator=addresses({"operator": "operator"}).get("operator"),
        gateways=addresses({c.name: f"gateway-{c.name}" for c in envdef.consumers}),
        providers=addresses(fakes),
    )


def start(
    ctx: UpContext,
    supervisor: Supervisor,
    targets: prometheus.ScrapeTargets,
    *,
    state_dir: Path,
    port_for: Callable[[str], int],
    wait_answers: Callable[[ProcessRecord, str], None],
) -> None:
    """Write the config and targets (a running Prometheus rereads the targets on its own),
    then start it unless running; wait until it says it is ready."""
    binary = prometheus.binary()
    assert binary is not None, "the step is only added when the binary is installed"
    folder = state_dir / prometheus.NAME
    prometheus.write_files(folder, targets)
    port = port_for(prometheus.NAME)
    ctx.prometheus = f"http://127.0.0.1:{port}"
    if supervisor.running(prometheus.NAME):
        return
    rec = supervisor.start(prometheus.NAME, prometheus.argv(binary, folder, port=port), cwd=folder)
    ctx.started.append(prometheus.NAME)
    wait_answers(rec, prometheus.ready_url(ctx.prometheus))


def status(supervisor: Supervisor, port: int | None) -> dict[str, Any]:
    """``env status``'s ``prometheus``: its URL while it runs, else why it does not."""
    rec = supervisor.record(prometheus.NAME)
    if rec is not None and port and supervisor.running(prometheus.NAME):
        url = f"http://127.0.0.1:{port}"
        return {"url": url, "running": True, "detail": health(url)[1]}
    if rec is not None:
        return {"url": None, "running": False, "detail": f"exited (log: {rec.log}); `env up` starts it again"}
    if prometheus.binary() is None:
        return {"url": None, "running": False, "detail": f"not started: {prometheus.NOT_INSTALLED}"}
    return {
        "url": None,
        "running": False,
        "detail": "not started: installed after this env came up; `env up` starts it",
    }


def health(url: str) -> tuple[bool, str]:
    """Healthy once ready; the detail counts the scrape targets that are up."""
    if not http_ok(prometheus.ready_url(url), timeout=2):
        return False, "not ready (/-/ready does not answer 200)"
    counts = prometheus.targets_up(url)
    return True, "ready" if counts is None else f"{counts[0]}/{counts[1]} scrape targets up"
