"""The local runtime's real inference engines: one ``llama-server`` per provider whose env-file
entry says ``engine: {kind: llamacpp}`` (docs/engines.md, "A real engine in the loop").

Each serves the tiny seeded model (:mod:`xtask.llamacpp.model`, written once into the cache) on
127.0.0.1 and a port of its own, with ``--metrics``, ``--parallel <slots>`` and one thread, its
log in the env's ``logs/`` folder; it is tracked by a pid file like every other process and
stopped by pid by ``env down``. Its URL becomes the provider's endpoint, its format ``llamacpp``.
A running engine started with other arguments (the slots changed, a rebuilt binary) is restarted.
"""

from __future__ import annotations

from collections.abc import Callable

from xtask import components
from xtask.envmodel import EnvDef
from xtask.llamacpp import assets
from xtask.llamacpp.model import ensure_model
from xtask.procs import ProcessRecord, Supervisor
from xtask.runtime.assets import cache_root
from xtask.runtime.steps import UpContext

PREFIX = "engine-"


def has_engines(envdef: EnvDef) -> bool:
    return any(p.engine is not None for p in envdef.providers)


def engine_components(envdef: EnvDef, *, port_for: Callable[[str], int]) -> list[components.Component]:
    """One ``llama-server`` per engine provider; needs the built binary (else a hint to build it)."""
    found = assets.require()
    model = ensure_model(cache_root() / "engines" / "models", found.vocab)
    return [
        components.llama_server(
            p.name,
            binary=str(found.server),
            model=str(model),
            port=port_for(f"{PREFIX}{p.name}"),
            slots=p.engine.slots,
        )
        for p in envdef.providers
        if p.engine is not None
    ]


def start_engines(
    ctx: UpContext,
    supervisor: Supervisor,
    *,
    port_for: Callable[[str], int],
    wait_answers: Callable[[ProcessRecord, str], None],
) -> None:
    """Start every engine that is not running (``wait_answers``: until its /health answers 200,
    i.e. its model is loaded) and record its URL as its provider's endpoint."""
    for engine in engine_components(ctx.envdef, port_for=port_for):
        argv = engine.argv("")
        running = supervisor.running(engine.name)
        if running is not None and running.argv != argv:
            ctx.started.append(f"{engine.name} (restarted: its command line changed)")
            supervisor.stop(engine.name)
            running = None
        if running is None:
            rec = supervisor.start(engine.name, argv)
            ctx.started.append(engine.name)
            wait_answers(rec, engine.url(engine.health_path))
        ctx.endpoints[engine.serves] = engine.url()
