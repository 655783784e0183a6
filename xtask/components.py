"""The AGN components an environment runs, each described once.

A :class:`Component` is one program to start: its module (``python -m``), its arguments, the
port it serves HTTP on and the paths that say it is alive, ready and measured. It is made from
the env definition (:class:`xtask.envdef.EnvDef`) plus the runtime's facts (:class:`Placement`:
how the process finds the API server, which address it binds; and each one's port). The local
runtime starts components as processes, :mod:`xtask.manifests` puts them in pod templates, the
tests (``tests/agnprocs.py``) and the benchmarks (``scripts/bench/benchenv.py``) start them too.

The arguments come from the programs' settings dataclasses through :func:`agn.flags.argv_for`:
a flag's name is written only in its dataclass, and a value the program would refuse fails
here, before anything starts. Names are the local runtime's process names (pid files, ports);
:mod:`xtask.manifests` names the Kubernetes objects.

Pure: no processes, no I/O.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from agn.engines import FORMATS
from agn.flags import argv_for
from agn.gateway.settings import GatewaySettings
from agn.operator.settings import Settings as OperatorSettings
from agn.provider.settings import ProviderSettings
from xtask.envdef import EnvDef
from xtask.record import Record

HEALTH_PATH = "/healthz"
METRICS_PATH = "/metrics"
LOOPBACK = "127.0.0.1"


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Placement(Record):
    """Where the components run: each ``None`` leaves the programs' own default (in a pod: the
    in-cluster config, the current context, loopback)."""

    kubeconfig: str | None = None
    context: str | None = None
    bind: str | None = None  # the address every component listens on ("0.0.0.0" in a pod)


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Component(Record):
    name: str  # the process name: pid file, log file, port key
    kind: str  # "operator" | "gateway" | "provider" (the app.kubernetes.io/component label)
    module: str
    args: tuple[str, ...]
    port: int | None  # where it serves HTTP; None: it serves nothing
    health_path: str = HEALTH_PATH  # 200 while the process works (liveness)
    ready_path: str = HEALTH_PATH  # 200 once it does its job (readiness)
    metrics_path: str | None = METRICS_PATH  # its own Prometheus metrics (None: none)
    serves: str = ""  # the consumer a gateway serves, the provider a fake answers as
    program: str | None = None  # set: a binary run as it is (a real engine), not ``python -m module``

    @property
    def module_args(self) -> list[str]:
        """What follows ``python -m`` (a container's ``args`` under ``command: [python, -m]``)."""
        return [self.module, *self.args]

    def argv(self, python: str) -> list[str]:
        if self.program is not None:
            return [self.program, *self.args]
        return [python, "-m", *self.module_args]

    def url(self, path: str = "", *, host: str = LOOPBACK) -> str:
        if self.port is None:
            raise ValueError(f"{self.name} serves no HTTP")
        return f"http://{host}:{self.port}{path}"


def operator(
    *,
    namespace: str,
    port: int | None = None,
    placement: Placement = Placement(),
    name: str = "operator",
    extra: Sequence[str] = (),
    **settings: Any,
) -> Component:
    """The operator; ``settings`` are fields of :class:`agn.operator.settings.Settings`, ``extra``
    raw flags (tests of the command line itself). With ``port`` it serves /healthz and /metrics."""
    args = argv_for(
        OperatorSettings,
        kubeconfig=placement.kubeconfig,
        context=placement.context,
        namespace=namespace,
        **settings,
        health_host=placement.bind if port is not None else None,
        health_port=port,
    )
    return Component(name, "operator", "agn.operator", (*args, *extra), port)


def gateway(
    consumer: str, *, namespace: str | None, port: int, placement: Placement = Placement(), name: str | None = None
) -> Component:
    """One consumer's gateway: ready (``/readyz``) once it serves an overlay."""
    args = argv_for(
        GatewaySettings,
        kubeconfig=placement.kubeconfig,
        context=placement.context,
        namespace=namespace,
        consumer=consumer,
        host=placement.bind,
        port=port,
    )
    return Component(
        name or f"gateway-{consumer}",
        "gateway",
        "agn.gateway",
        tuple(args),
        port,
        ready_path="/readyz",
        serves=consumer,
    )


def fake_provider(
    provider: str,
    *,
    port: int,
    placement: Placement = Placement(),
    name: str | None = None,
    metrics_format: str | None = None,
    api_key_file: str | None = None,
) -> Component:
    """A fake provider answering as ``provider`` (a pool answers under ``/pool/<name>`` as well).
    Its /metrics is the provider's load report the operator probes, not the component's own.
    ``metrics_format`` (``--metrics-format``): serve a real engine's exposition, and its health
    where that engine serves it (``/health``); None is AGN's own (``/healthz``). ``api_key_file``
    (``--api-key-file``): require the keys in that file as llama.cpp's ``--api-key`` does."""
    args = argv_for(
        ProviderSettings,
        name=provider,
        host=placement.bind,
        port=port,
        metrics_format=metrics_format,
        api_key_file=api_key_file,
    )
    health = FORMATS[metrics_format or "agn"].health_path
    return Component(
        name or f"fake-{provider}",
        "provider",
        "agn.provider",
        tuple(args),
        port,
        health_path=health,
        ready_path=health,
        metrics_path=None,
        serves=provider,
    )


# Each llama-server slot's context (tokens), and its CPU threads: pinned, so a test's timing does
# not depend on the machine's core count.
LLAMA_SLOT_CONTEXT, LLAMA_THREADS = 8192, 1


def llama_server(
    provider: str,
    *,
    binary: str,
    model: str,
    port: int,
    slots: int,
    bind: str | None = None,
    api_key_file: str | None = None,
) -> Component:
    """llama.cpp's ``llama-server`` answering as ``provider``: ``model`` (a GGUF file), ``slots``
    requests generated at once (``-np``; more wait, as ``llamacpp:requests_deferred``), each with
    ``LLAMA_SLOT_CONTEXT`` tokens of context, on ``LLAMA_THREADS`` CPU threads. ``--metrics`` serves the Prometheus exposition
    the operator reads as format ``llamacpp``; health is ``/health`` (503 while the model loads).
    No web UI; loopback unless ``bind`` says otherwise. ``api_key_file``: the key it requires
    (``--api-key-file``: the key never shows on its command line; ``/health`` stays open)."""
    if slots < 1:
        raise ValueError(f"llama-server {provider}: slots must be >= 1, got {slots}")
    args = (
        *("--model", model),
        *("--host", bind or LOOPBACK),
        *("--port", str(port)),
        *("--parallel", str(slots)),
        *("--ctx-size", str(slots * LLAMA_SLOT_CONTEXT)),
        *("--threads", str(LLAMA_THREADS)),
        *("--threads-batch", str(LLAMA_THREADS)),
        "--metrics",
        "--no-webui",
        *(("--api-key-file", api_key_file) if api_key_file else ()),
    )
    health = FORMATS["llamacpp"].health_path
    return Component(
        f"engine-{provider}",
        "provider",
        "",
        args,
        port,
        health_path=health,
        ready_path=health,
        metrics_path=METRICS_PATH,
        serves=provider,
        program=binary,
    )


# -- from an env definition ------------------------------------------------------------------


def env_operator(envdef: EnvDef, *, port: int, placement: Placement) -> Component:
    """The env's operator: its namespace, and the overlay shard count its gateways' Roles name."""
    return operator(namespace=envdef.namespace, overlay_shards=envdef.overlay_shards, port=port, placement=placement)


def env_gateways(envdef: EnvDef, *, port_for: Callable[[str], int], placement: Placement) -> list[Component]:
    """One gateway per consumer; ``port_for(name)`` gives each its port."""
    return [
        gateway(c.name, namespace=envdef.namespace, port=port_for(f"gateway-{c.name}"), placement=placement)
        for c in envdef.consumers
    ]


def fake_provider_names(envdef: EnvDef) -> list[str]:
    """The providers the env runs a fake for (one with an ``endpoint`` is external, one with an
    ``engine`` is served by that engine)."""
    return [p.name for p in envdef.providers if not p.endpoint and p.engine is None]


def env_fake_providers(envdef: EnvDef, *, port_for: Callable[[str], int], placement: Placement) -> list[Component]:
    """One fake provider per provider without an external endpoint; ``port_for(name)`` gives each its port."""
    return [fake_provider(p, port=port_for(f"fake-{p}"), placement=placement) for p in fake_provider_names(envdef)]
