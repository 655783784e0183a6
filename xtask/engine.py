"""The container engine that images are built in and kind's nodes run on: Docker or Podman.

- :class:`Engine` is one engine's CLI (``docker`` or ``podman``; the two take the same
  arguments for everything the project does, except where a method says otherwise).
- :func:`detect_engine` chooses an engine as kind does: ``KIND_EXPERIMENTAL_PROVIDER`` when set,
  else Docker, else Podman. kind itself takes Docker whenever ``docker -v`` says "Docker
  version", even with no daemon behind it (a client-only install, a stopped service); this
  module takes an engine only when its ``info`` answers, so callers must pass the chosen engine
  to kind explicitly (:func:`kind_environ`) rather than let kind choose again.
- :func:`qualified` is the name an engine lists an image under: Podman stores a reference
  without a registry domain under ``localhost/``.

The choice and the names are pure functions of what the caller passes (environment, ``which``,
a :class:`xtask.procs.CmdRunner`); nothing here knows about kind clusters or image recipes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from xtask.errors import CommandFailed
from xtask.procs import CmdRunner, CommandResult, RealCmdRunner

ENGINES = ("docker", "podman")
PROVIDER_VARIABLE = "KIND_EXPERIMENTAL_PROVIDER"
# kind's third provider and its aliases: kind accepts them, AGN xtask does not drive them.
NERDCTL = ("nerdctl", "finch", "nerdctl.lima")
# A field only this engine's `info` has: Podman's Docker-compatible `docker` wrapper fails the
# Docker template, so it is never taken for Docker.
INFO_FORMAT = {"docker": "{{.ServerVersion}}", "podman": "{{.Version.Version}}"}
INFO_TIMEOUT = 30.0


def _check_cli(cli: str) -> None:
    if cli not in ENGINES:
        raise ValueError(f"unknown container engine {cli!r} (use one of: {', '.join(ENGINES)})")


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip()[:300] if lines else ""


def has_domain(ref: str) -> bool:
    """True when ``ref`` starts with a registry domain (``registry.example/``, ``host:5000/``,
    ``localhost/``): the rule Docker, Podman and containerd all use to tell a domain from a path."""
    first, sep, _ = ref.partition("/")
    return bool(sep) and ("." in first or ":" in first or first == "localhost")


def qualified(ref: str, cli: str) -> str:
    """``ref`` as ``cli`` lists it after building or tagging it.

    Podman stores a reference without a registry domain under ``localhost/`` (``agn:dev`` is
    ``localhost/agn:dev``), and an archive it saves carries that name, so the nodes of a kind
    cluster know the image by it too. Docker lists a reference as it was given.
    """
    _check_cli(cli)
    if not ref or ref != ref.strip():
        raise ValueError(f"not an image reference: {ref!r}")
    if cli == "docker" or has_domain(ref):
        return ref
    return f"localhost/{ref}"


class Engine:
    """One engine's CLI: ``cli`` is "docker" or "podman"; ``host`` is a ``DOCKER_HOST`` (Docker
    only; None: the CLI's default)."""

    def __init__(self, cli: str = "docker", *, host: str | None = None, runner: CmdRunner | None = None) -> None:
        _check_cli(cli)
        if host and cli != "docker":
            raise ValueError(f"an engine host ({host}) applies to docker only, not to {cli}")
        self.cli = cli
        self.host = host
        self.runner = runner or RealCmdRunner()

    @classmethod
    def from_environ(cls, cli: str, environ: Mapping[str, str], *, runner: CmdRunner | None = None) -> Engine:
        """The engine ``cli`` as the environment names it (``DOCKER_HOST`` for Docker)."""
        return cls(cli, host=(environ.get("DOCKER_HOST") or None) if cli == "docker" else None, runner=runner)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(cli={self.cli!r}, host={self.host!r})"

    @property
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        if self.host:
            env["DOCKER_HOST"] = self.host
        return env

    @property
    def where(self) -> str:
        """The engine in words, for messages."""
        if self.cli == "docker":
            return f"Docker at {self.host or 'the default DOCKER_HOST'}"
        return "Podman"

    def __call__(self, *args: str, timeout: float = 120, check: bool = True, input: str | None = None) -> CommandResult:
        return self.runner.run([self.cli, *args], env=self.env, timeout=timeout, check=check, input=input)

    def run_argv(self, argv: Sequence[str], *, timeout: float) -> CommandResult:
        """Run a whole command line made for this engine (its first word must be :attr:`cli`)."""
        argv = list(argv)
        if not argv or argv[0] != self.cli:
            raise ValueError(f"{' '.join(argv[:2]) or 'an empty command'} is not a {self.cli} command")
        return self.runner.run(argv, env=self.env, timeout=timeout)

    def problem(self) -> str | None:
        """None when the engine answers ``info``, else why not (one line)."""
        return info_problem(self.cli, self.runner, env=self.env)

    def qualified(self, ref: str) -> str:
        return qualified(ref, self.cli)

    def image_exists(self, ref: str) -> bool:
        return self("image", "inspect", "--format", "{{.Id}}", ref, check=False).returncode == 0

    def inspect(self, ref: str, *, kind: str = "container") -> dict:
        return _first_object(self(kind, "inspect", ref).stdout)

    def save_argv(self, ref: str, path: Path) -> list[str]:
        # Podman's default archive format is its own; kind loads Docker archives.
        fmt = ["--format", "docker-archive"] if self.cli == "podman" else []
        return [self.cli, "save", *fmt, "-o", str(path), ref]

    def save(self, ref: str, path: Path, *, timeout: float = 600) -> Path:
        """Write image ``ref`` to ``path`` as a Docker image archive (what ``kind load
        image-archive`` reads). Written next to ``path`` and renamed into place, so a failed save
        leaves no partial archive behind."""
        part = path.with_name(f".{path.name}.part")
        try:
            self.run_argv(self.save_argv(ref, part), timeout=timeout)
            os.replace(part, path)
        finally:
            part.unlink(missing_ok=True)
        return path


def _first_object(text: str) -> dict:
    """The first object of an ``inspect`` answer (a JSON list)."""
    data = json.loads(text)
    if not isinstance(data, list) or not data or not isinstance(data[0], dict):
        raise ValueError(f"unexpected inspect output: {text[:200]!r}")
    return data[0]


def info_problem(cli: str, runner: CmdRunner, *, env: Mapping[str, str] | None = None) -> str | None:
    """None when ``cli info`` answers, else why not, as "`docker info` fails: <its last line>"."""
    _check_cli(cli)
    argv = [cli, "info", "--format", INFO_FORMAT[cli]]
    try:
        res = runner.run(argv, check=False, env=env, timeout=INFO_TIMEOUT)
    except CommandFailed as exc:  # not found, or no answer before the timeout
        return f"`{cli} info` fails: {_last_line(exc.output) or f'exit {exc.returncode}'}"
    if res.returncode == 0:
        return None
    return f"`{cli} info` fails: {_last_line(res.stderr or res.stdout) or f'exit {res.returncode}'}"


def detect_engine(
    environ: Mapping[str, str], which: Callable[[str], str | None], runner: CmdRunner
) -> tuple[str | None, list[str]]:
    """The engine to use, as kind would choose it, and when there is none, why each was passed over.

    ``KIND_EXPERIMENTAL_PROVIDER`` (docker or podman) decides when set, and is not second-guessed:
    if that engine does not answer there is no engine. Otherwise the first of Docker, Podman whose
    ``info`` answers. The reasons read as one sentence joined with "; ".
    """
    env = dict(environ)
    wanted = environ.get(PROVIDER_VARIABLE, "")
    if wanted:
        if wanted in NERDCTL:
            return None, [f"{PROVIDER_VARIABLE}={wanted}: AGN xtask drives kind over docker or podman only"]
        if wanted not in ENGINES:
            return None, [f"{PROVIDER_VARIABLE}={wanted!r} is not an engine kind knows (use docker or podman)"]
        if which(wanted) is None:
            return None, [f"{PROVIDER_VARIABLE}={wanted}, but `{wanted}` is not on PATH"]
        why = info_problem(wanted, runner, env=env)
        return (None, [f"{PROVIDER_VARIABLE}={wanted}, but {why}"]) if why else (wanted, [])
    reasons = []
    for cli in ENGINES:
        if which(cli) is None:
            reasons.append(f"`{cli}` is not on PATH")
            continue
        why = info_problem(cli, runner, env=env)
        if why is None:
            return cli, []
        reasons.append(why)
    return None, reasons


def kind_environ(environ: Mapping[str, str], cli: str) -> dict[str, str]:
    """``environ`` with kind told to use ``cli`` (kind would otherwise take any Docker CLI)."""
    _check_cli(cli)
    return {**environ, PROVIDER_VARIABLE: cli}
