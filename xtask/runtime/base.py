"""What every runtime is: the :class:`Runtime` protocol, the :class:`Options` a command line
gives it, and the few rules all runtimes share (one field manager, one context naming, one
guard against bringing an env up on a second runtime).

A runtime is one module implementing :class:`Runtime` plus one line in
:mod:`xtask.runtime.registry`; the CLI only ever talks to the registry and this protocol
(kind's ``providers.Provider``, hatch's ``EnvironmentInterface``). Bring-up is an ordered list
of :class:`xtask.runtime.steps.Step` over one :class:`xtask.runtime.steps.UpContext`.

Nothing here does I/O except :func:`refuse_other_runtime`, which reads ``env.json``.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, ClassVar, Protocol

from xtask.errors import XtaskError
from xtask.state import EnvRecord

if TYPE_CHECKING:
    from xtask.envdef import EnvDef
    from xtask.runtime.steps import Progress

# The server-side apply field manager of everything `env up` writes, on every runtime.
FIELD_MANAGER = "agn-xtask-env"


@dataclasses.dataclass(frozen=True)
class Options:
    """What the command line says about where and how, beyond ``--env``, ``--retain`` and
    ``--timeout`` (which every runtime takes). A runtime names the fields it uses in
    :attr:`Runtime.accepts`; giving it another one is a usage error (:func:`unaccepted`)."""

    context: str | None = None  # an existing kube context to deploy into
    kubeconfig: str | None = None  # the kubeconfig file holding it (default: as kubectl finds it)
    image: str | None = None  # the image the Deployments run
    dry_run: bool = False  # validate with server-side dry runs, change nothing
    wait: bool = True  # wait for rollouts and first overlays

    FLAGS: ClassVar[dict[str, str]] = {
        "context": "--context",
        "kubeconfig": "--kubeconfig",
        "image": "--image",
        "dry_run": "--dry-run",
        "wait": "--no-wait",
    }

    def given(self) -> list[str]:
        """The fields set away from their defaults, in declaration order."""
        return [f.name for f in dataclasses.fields(self) if getattr(self, f.name) != f.default]


class Runtime(Protocol):
    """One environment on one runtime. Made by :meth:`create`; the CLI calls the rest.

    Optional, looked up by ``env status``: ``describe()`` (what the runtime says beyond its
    components) and ``prometheus()`` (the env's Prometheus: ``url``, ``running``, ``detail``;
    a runtime without it starts none)."""

    name: ClassVar[str]  # what --runtime and env.json call it
    auto: ClassVar[bool]  # whether `--runtime auto` may choose it (in registry order)
    accepts: ClassVar[frozenset[str]]  # the Options fields it uses

    @classmethod
    def create(cls, env: str, options: Options) -> Runtime: ...

    def problems(self) -> list[str]:
        """Why this runtime cannot bring ``env`` up here (missing tools, no context); empty when it can."""
        ...

    def up(self, envdef: EnvDef, *, progress: Progress, retain: bool = False, wait_timeout: float = 60.0) -> dict:
        """Bring the env up or repair it. Returns ``started``, ``context``, ``kubeconfig``,
        ``served`` and ``excluded`` (:meth:`xtask.runtime.steps.UpContext.summary`)."""
        ...

    def down(self, *, progress: Progress) -> dict:
        """Remove what the env's ``up`` made; idempotent. Returns ``stopped``, ``errors`` (every
        one collected, none raised) and ``was_up``."""
        ...

    def status(self) -> list[dict]:
        """One entry per component: ``name``, ``pid``, ``running``, ``healthy`` and optionally
        ``address``, ``metricsUrl``, ``replicas``, ``detail`` (schemas/env-status)."""
        ...


def unaccepted(runtime: type[Runtime], options: Options) -> list[str]:
    """The flags of ``options`` that ``runtime`` does not take."""
    return [Options.FLAGS[name] for name in options.given() if name not in runtime.accepts]


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
