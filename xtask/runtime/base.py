"""What every runtime is: the :class:`Runtime` base class, the :class:`Flag` and
:class:`Section` declarations a runtime makes, the :class:`Options` a command line gives it,
and the few rules all runtimes share (one field manager, one context naming, one guard
against bringing an env up on a second runtime).

A runtime is one module with a :class:`Runtime` subclass plus one line in
:mod:`xtask.runtime.registry` (kind's ``providers.Provider``, hatch's environment plugins). It
declares in its class the ``env up`` flags it takes (:attr:`Runtime.flags`) and the env-file
section it reads (:attr:`Runtime.section`); the CLI builds its options and the env-file check
from those declarations, so neither the CLI nor :mod:`xtask.envdef` names a runtime's flags or
keys. Bring-up is an ordered list of :class:`xtask.runtime.steps.Step` over one
:class:`xtask.runtime.steps.UpContext`.

Nothing here does I/O except :func:`refuse_other_runtime`, which reads ``env.json``; nothing
here knows a particular runtime.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from xtask.errors import XtaskError
from xtask.record import Record
from xtask.state import EnvRecord

if TYPE_CHECKING:
    from xtask.envmodel import EnvDef
    from xtask.progress import Progress

# The server-side apply field manager of everything `env up` writes, on every runtime.
FIELD_MANAGER = "agn-xtask-env"


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Flag(Record):
    """One ``env up`` flag a runtime takes, beyond ``--env``, ``--retain`` and ``--timeout``
    (which every runtime takes). Declared once, in :attr:`Runtime.flags`; ``env up`` makes its
    click option from it. Two runtimes that take the same flag declare the same :class:`Flag`
    (one object, imported), so it means one thing."""

    name: str  # as typed: "--dry-run"
    help: str
    type: type[str] | type[bool] = str  # bool: a switch, off unless given
    default: str | None = None  # a value flag's value when it is not given
    metavar: str | None = None

    @property
    def key(self) -> str:
        """The flag's key in :class:`Options` (and click's parameter name): ``dry_run``."""
        return self.name.removeprefix("--").replace("-", "_")


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Section(Record):
    """The env-file section a runtime reads (``kind:``): its top-level key and the JSON Schema
    of its value. :mod:`xtask.envdef` checks it with the rest of the file (schemas/env.schema.json
    names no runtime's section); the runtime reads it back with :meth:`xtask.envdef.EnvDef.section`."""

    key: str
    schema: Mapping[str, Any]


class Options:
    """The runtime flags given to ``env up``, by :attr:`Flag.key`. A flag not given (a value flag
    left ``None``, a switch left off) is not in it: :meth:`given` lists only what the user typed,
    and giving a runtime one it does not declare is a usage error (:func:`xtask.runtime.registry.choose`)."""

    def __init__(self, **values: str | bool | None) -> None:
        self._given: dict[str, str | bool] = {k: v for k, v in values.items() if v is not None and v is not False}

    def given(self) -> list[str]:
        """The keys of the flags given, in the order given."""
        return list(self._given)

    def text(self, flag: Flag) -> str | None:
        """A value flag's value (its declared default when not given)."""
        value = self._given.get(flag.key)
        return value if isinstance(value, str) else flag.default

    def switch(self, flag: Flag) -> bool:
        """Whether a switch was given."""
        return self._given.get(flag.key) is True


class Runtime(abc.ABC):
    """One environment on one runtime. Made by :meth:`create`; the CLI calls the rest.

    A subclass sets ``name`` and ``auto``, and may declare ``flags`` and ``section``; it
    implements the abstract methods, and overrides :meth:`describe` and :meth:`prometheus`
    when it has more to say than their defaults."""

    name: ClassVar[str]  # what --runtime and env.json call it
    auto: ClassVar[bool]  # whether `--runtime auto` may choose it (in registry order)
    flags: ClassVar[tuple[Flag, ...]] = ()  # the `env up` flags it takes
    section: ClassVar[Section | None] = None  # the env-file section it reads

    @classmethod
    @abc.abstractmethod
    def create(cls, env: str, options: Options) -> Runtime: ...

    @abc.abstractmethod
    def problems(self) -> list[str]:
        """Why this runtime cannot bring ``env`` up here (missing tools, no context); empty when it can."""

    @abc.abstractmethod
    def up(self, envdef: EnvDef, *, progress: Progress, retain: bool = False, wait_timeout: float = 60.0) -> dict:
        """Bring the env up or repair it. Returns ``started``, ``context``, ``kubeconfig``,
        ``served`` and ``excluded`` (:meth:`xtask.runtime.steps.UpContext.summary`)."""

    @abc.abstractmethod
    def down(self, *, progress: Progress) -> dict:
        """Remove what the env's ``up`` made; idempotent. Returns ``stopped``, ``errors`` (every
        one collected, none raised) and ``was_up``."""

    @abc.abstractmethod
    def status(self) -> list[dict]:
        """One entry per component: ``name``, ``pid``, ``running``, ``healthy`` and optionally
        ``address``, ``metricsUrl``, ``replicas``, ``detail`` (schemas/env-status)."""

    def describe(self) -> dict | None:
        """What the runtime says about the env beyond its components (``env status``'s
        ``runtimeDetail``); None: nothing."""
        return None

    def prometheus(self) -> dict:
        """The env's Prometheus for ``env status``: ``url``, ``running``, ``detail``. By default the
        runtime starts none."""
        return {"url": None, "running": False, "detail": f"the {self.name} runtime does not start Prometheus"}


def context_name(runtime: str, env: str) -> str:
    """The kube context a runtime that makes its own cluster writes: ``<runtime>-<env>``."""
    return f"{runtime}-{env}"


def refuse_other_runtime(env: str, runtime: str) -> EnvRecord | None:
    """The env's record; refused when it says the env is up on another runtime."""
    record = EnvRecord.load(env)
    if record is not None and record.runtime != runtime:
        raise XtaskError(
            f"environment {env} is up on the {record.runtime} runtime",
            hint=f"run `python -m xtask env down --env {env}` first",
        )
    return record
