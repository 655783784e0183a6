"""The local runtime's real inference engines: one ``llama-server`` per provider whose env-file
entry says ``engine: {kind: llamacpp}`` (docs/engines.md, "A real engine in the loop").

Each serves the tiny seeded model (:mod:`xtask.llamacpp.model`, written once into the cache) on
127.0.0.1 and a port of its own, with ``--metrics``, ``--parallel <slots>`` and one thread, its
log in the env's ``logs/`` folder; it is tracked by a pid file like every other process and
stopped by pid by ``env down``. Its URL becomes the provider's endpoint, its format ``llamacpp``.
A running engine started with other arguments (the slots changed, a rebuilt binary) is restarted.

An engine with ``apiKey: true`` requires a key: generated once (:mod:`secrets`) into
``<state>/engine-keys/<provider>.key`` (0600, the folder 0700) and given to the server as
``--api-key-file``, so it is never on a command line; the provider's Secret (its
``authorization``) is created holding it in the env's namespace, and kept as it is when it
exists (``env up`` is idempotent; whoever changed it meant to).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path

from agn.kube import Kube, NotFound
from xtask import components
from xtask.envmodel import EnvDef
from xtask.llamacpp import assets
from xtask.llamacpp.model import ensure_model
from xtask.procs import ProcessRecord, Supervisor
from xtask.runtime.assets import cache_root
from xtask.runtime.certs import private_dir, write_private
from xtask.runtime.steps import UpContext

PREFIX = "engine-"
KEYS_DIR = "engine-keys"  # in the env's state folder


def has_engines(envdef: EnvDef) -> bool:
    return any(p.engine is not None for p in envdef.providers)


def has_keys(envdef: EnvDef) -> bool:
    return any(p.engine is not None and p.engine.api_key for p in envdef.providers)


def ensure_key(path: Path) -> str:
    """The key in ``path``, generated (32 random bytes, URL-safe text) and written 0600 when absent."""
    if path.exists():
        return path.read_text().strip()
    key = secrets.token_urlsafe(32)
    private_dir(path.parent)
    write_private(path, (key + "\n").encode())
    return key


def engine_components(envdef: EnvDef, *, port_for: Callable[[str], int], state_dir: Path) -> list[components.Component]:
    """One ``llama-server`` per engine provider; needs the built binary (else a hint to build it).
    A keyed engine's key file is made here when absent."""
    found = assets.require()
    model = ensure_model(cache_root() / "engines" / "models", found.vocab)
    return [
        components.llama_server(
            p.name,
            binary=str(found.server),
            model=str(model),
            port=port_for(f"{PREFIX}{p.name}"),
            slots=p.engine.slots,
            api_key_file=_key_file(state_dir, p.name) if p.engine.api_key else None,
        )
        for p in envdef.providers
        if p.engine is not None
    ]


def _key_file(state_dir: Path, provider: str) -> str:
    path = state_dir / KEYS_DIR / f"{provider}.key"
    ensure_key(path)
    return str(path)


def start_engines(
    ctx: UpContext,
    supervisor: Supervisor,
    *,
    port_for: Callable[[str], int],
    wait_answers: Callable[[ProcessRecord, str], None],
    state_dir: Path,
) -> None:
    """Start every engine that is not running (``wait_answers``: until its /health answers 200,
    i.e. its model is loaded) and record its URL as its provider's endpoint."""
    for engine in engine_components(ctx.envdef, port_for=port_for, state_dir=state_dir):
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


def store_keys(ctx: UpContext, *, state_dir: Path) -> None:
    """Each keyed engine's Secret (its provider's ``authorization``) holding its key, created in
    the env's namespace unless it exists (then kept, whatever it holds)."""
    for p in ctx.envdef.providers:
        if p.engine is None or not p.engine.api_key or not p.authorization:
            continue
        ref = p.authorization["credentials"]
        key = ensure_key(state_dir / KEYS_DIR / f"{p.name}.key")
        if _create_if_absent(ctx.connected(), ctx.envdef.namespace, ref["name"], {ref["key"]: key}):
            ctx.started.append(f"secret {ref['name']} (the API key of {PREFIX}{p.name})")


def _create_if_absent(kube: Kube, namespace: str, name: str, data: dict[str, str]) -> bool:
    """Create the Secret holding ``data`` unless one of that name exists (it is then kept)."""
    try:
        kube.secret_data(namespace, name)
        return False
    except NotFound:
        pass
    body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": namespace}}
    kube.apply({**body, "type": "Opaque", "stringData": data}, namespace=namespace)
    return True
