"""The runtimes this tool knows, by name: the one place the CLI asks for a runtime.

Adding a runtime is one module with a :class:`xtask.runtime.base.Runtime` subclass and one line
in :data:`RUNTIMES`. ``--runtime``'s choices, what ``auto`` picks, which runtime ``env down``
and ``env status`` use for a recorded env, ``env up``'s runtime flags (:func:`flags`) and the
env-file sections (:func:`sections`) all come from here and from the classes' own
``name``/``auto``/``flags``/``section``.

Modules are imported only when a runtime is asked for (the CLI must stay fast to start).
"""

from __future__ import annotations

import importlib

from xtask.errors import UsageError, XtaskError
from xtask.runtime.base import Flag, Options, Runtime, Section

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
    refused = [key for key in options.given() if key not in {f.key for f in chosen.flags}]
    if refused:
        by_key = {flag.key: flag for flag in flags()}
        takers = [n for n in RUNTIMES if set(refused) <= {f.key for f in runtime_class(n).flags}]
        raise UsageError(
            f"{', '.join(by_key[key].name for key in refused)}: not an option of the {chosen.name} runtime",
            hint=f"runtimes that take it: {', '.join(takers)}" if takers else None,
        )
    return chosen.create(env, options)


def flags() -> list[Flag]:
    """Every runtime's ``env up`` flags, each once, in registry order."""
    out: dict[str, Flag] = {}
    for name in RUNTIMES:
        for flag in runtime_class(name).flags:
            if out.setdefault(flag.key, flag) != flag:
                raise AssertionError(f"{flag.name} is declared differently by two runtimes: declare it once, import it")
    return list(out.values())


def takers(flag: Flag) -> list[str]:
    """The runtimes that take ``flag``, in registry order."""
    return [name for name in RUNTIMES if flag in runtime_class(name).flags]


def sections() -> list[Section]:
    """The env-file sections the runtimes read, in registry order."""
    return [s for s in (runtime_class(name).section for name in RUNTIMES) if s is not None]


def recorded(env: str, runtime: str | None) -> Runtime:
    """The runtime of an env as ``env.json`` records it (``None``: no record), for ``down`` and ``status``."""
    return runtime_class(runtime or UNRECORDED).create(env, Options())
