"""The runtimes this tool knows, by name: the one place the CLI asks for a runtime.

Adding a runtime is one module implementing :class:`xtask.runtime.base.Runtime` and one line
in :data:`RUNTIMES`. ``--runtime``'s choices, what ``auto`` picks, which runtime ``env down``
and ``env status`` use for a recorded env, and which flags each runtime takes all come from
here and from the classes' own ``name``/``auto``/``accepts``.

Modules are imported only when a runtime is asked for (the CLI must stay fast to start).
"""

from __future__ import annotations

import importlib

from xtask.errors import UsageError, XtaskError
from xtask.runtime.base import Options, Runtime, unaccepted

# name: "module:class". The order is the order `auto` tries them in.
RUNTIMES: dict[str, str] = {
    "kind": "xtask.runtime.kind:KindEnv",
    "local": "xtask.runtime.local:LocalEnv",
    "cluster": "xtask.runtime.cluster:ClusterEnv",
}
AUTO = "auto"
# An env folder with no env.json is what a bring-up killed before it wrote its record leaves:
# processes with pid files, which this runtime's `down` stops and removes.
UNRECORDED = "local"


def names() -> list[str]:
    return list(RUNTIMES)


def runtime_class(name: str) -> type[Runtime]:
    target = RUNTIMES.get(name)
    if target is None:
        raise XtaskError(f"unknown runtime {name!r}", hint=f"known runtimes: {', '.join(RUNTIMES)}")
    module, attr = target.split(":")
    cls: type[Runtime] = getattr(importlib.import_module(module), attr)
    assert cls.name == name, f"{target} calls itself {cls.name!r}, the registry {name!r}"
    return cls


def auto_candidates() -> list[str]:
    """The runtimes `auto` may pick, in the order it tries them."""
    return [name for name in RUNTIMES if runtime_class(name).auto]


def choose(env: str, requested: str, *, recorded: str | None, options: Options) -> Runtime:
    """The runtime for ``env up``: ``requested`` by name; for ``auto`` the env's recorded runtime,
    else the first of :func:`auto_candidates` that reports no problems here (else the last, whose
    ``up`` then says why). Flags the chosen runtime does not take are a usage error."""
    if requested != AUTO:
        chosen = runtime_class(requested)
    elif recorded:
        chosen = runtime_class(recorded)
    else:
        candidates = [runtime_class(name) for name in auto_candidates()]
        chosen = next((cls for cls in candidates[:-1] if not cls.create(env, options).problems()), candidates[-1])
    refused = unaccepted(chosen, options)
    if refused:
        takers = [n for n in RUNTIMES if set(runtime_class(n).accepts) >= _fields(refused)]
        raise UsageError(
            f"{', '.join(refused)}: not an option of the {chosen.name} runtime",
            hint=f"runtimes that take it: {', '.join(takers)}" if takers else None,
        )
    return chosen.create(env, options)


def _fields(flags: list[str]) -> set[str]:
    by_flag = {flag: name for name, flag in Options.FLAGS.items()}
    return {by_flag[flag] for flag in flags}


def recorded(env: str, runtime: str | None) -> Runtime:
    """The runtime of an env as ``env.json`` records it (``None``: no record), for ``down`` and ``status``."""
    return runtime_class(runtime or UNRECORDED).create(env, Options())
