"""The container engine kind runs nodes on: Docker or Podman, chosen as kind chooses.

kind's own rule (``sigs.k8s.io/kind/pkg/cluster``) is ``KIND_EXPERIMENTAL_PROVIDER`` when set,
else Docker when a ``docker`` CLI exists, else Podman. A Docker CLI without a daemon is common
(a client-only install, a stopped service), so :func:`detect_engine` asks each engine to answer
(``info``) before choosing it; whatever it chooses is then passed to kind explicitly.

:func:`qualified` is the name an engine lists an image under: Podman stores a reference without
a registry domain under ``localhost/``, Docker under ``docker.io/library/`` but lists it as
given. Pure, apart from the runner and ``which`` the caller passes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from xtask.procs import CmdRunner

ENGINES = ("docker", "podman")
PROVIDER_VARIABLE = "KIND_EXPERIMENTAL_PROVIDER"
INFO_FORMAT = {"docker": "{{.ServerVersion}}", "podman": "{{.Version.Version}}"}


def answers(cli: str, runner: CmdRunner) -> str | None:
    """None when ``cli info`` answers, else why not (one line)."""
    res = runner.run([cli, "info", "--format", INFO_FORMAT[cli]], check=False, timeout=30)
    if res.returncode == 0:
        return None
    lines = (res.stderr or res.stdout).strip().splitlines()
    return f"`{cli} info` fails: {lines[-1][:200] if lines else f'exit {res.returncode}'}"


def detect_engine(
    *, environ: Mapping[str, str], which: Callable[[str], str | None], runner: CmdRunner
) -> tuple[str | None, list[str]]:
    """The engine to run kind's nodes on and, when there is none, why each was passed over."""
    wanted = environ.get(PROVIDER_VARIABLE, "").strip()
    if wanted:
        if wanted not in ENGINES:
            return None, [f"{PROVIDER_VARIABLE}={wanted!r} is not supported here (use docker or podman)"]
        if which(wanted) is None:
            return None, [f"{PROVIDER_VARIABLE}={wanted}, and `{wanted}` is not on PATH"]
        why = answers(wanted, runner)
        return (None, [f"{PROVIDER_VARIABLE}={wanted}: {why}"]) if why else (wanted, [])
    reasons = []
    for cli in ENGINES:
        if which(cli) is None:
            reasons.append(f"`{cli}` is not on PATH")
            continue
        why = answers(cli, runner)
        if why is None:
            return cli, []
        reasons.append(why)
    return None, reasons


def qualified(ref: str, cli: str) -> str:
    """``ref`` as ``cli`` lists it: ``agn:dev`` is ``localhost/agn:dev`` on Podman."""
    if cli != "podman":
        return ref
    first, _, rest = ref.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return ref  # already names a registry
    return f"localhost/{ref}"
