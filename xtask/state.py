"""Where environments keep their state, and the small record that says how one was brought up.

Each environment has one folder (git-ignored): ``$AGN_XTASK_HOME/envs/<env>/``, by default
``<repo>/.xtask/envs/<env>/``, holding certificates, etcd data, pid files, logs and
``env.json`` (runtime, context, kubeconfig, namespace).

An env name is a DNS-1123 label, so the folder is always one level below ``envs/``; a name
that is not one is refused here too (the CLI refuses it first). The folder is created by
:func:`claim_env_dir`, which writes the marker file ``.agn-xtask-env`` holding the env's
name, and only :func:`remove_env_dir` removes it: never through a symbolic link, and only a
folder that is this env's own. A folder counts as the env's own when it carries the marker
naming the env, or (folders written before the marker existed) when its ``env.json`` names
the env, or when it is empty. Anything else is left alone with an error saying why.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
from pathlib import Path

from agn.names import is_label
from agn.outputfile import write_atomic
from agn.yamltext import show
from xtask.errors import ExitCode, UsageError, XtaskError
from xtask.record import Record

REPO_ROOT = Path(__file__).resolve().parents[1]  # the one definition; others import it
MARKER = ".agn-xtask-env"


class StateFolderError(XtaskError):
    """The state folder (or an env's folder in it) cannot be used or removed."""


class NotOwnStateFolder(StateFolderError):
    """An env's folder that is not its own: refused, left alone (exit 3)."""

    exit_code = ExitCode.REFUSED


def state_root() -> Path:
    """``$AGN_XTASK_HOME``; else ``.xtask`` in a checkout (or an editable install); else, installed
    from a wheel (no checkout around the package), ``$XDG_STATE_HOME/agn-xtask`` (default
    ``~/.local/state/agn-xtask``), never a folder inside site-packages."""
    explicit = os.environ.get("AGN_XTASK_HOME")
    if explicit:
        return Path(explicit)
    if (REPO_ROOT / "pyproject.toml").is_file():
        return REPO_ROOT / ".xtask"
    return Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state") / "agn-xtask"


def _check_root() -> Path:
    """``<state root>/envs``, once neither it nor the root is something other than a folder."""
    root = state_root()
    origin = "AGN_XTASK_HOME" if os.environ.get("AGN_XTASK_HOME") else "the default state folder"
    for folder in (root, root / "envs"):
        if folder.exists() and not folder.is_dir():
            raise StateFolderError(
                f"cannot use {folder} as the xtask state folder ({origin}): it is not a folder",
                hint="point AGN_XTASK_HOME at a folder (it is created when missing)",
            )
    return root / "envs"


def env_dir(env: str) -> Path:
    """The state folder of ``env`` (not created). Refuses a name that is not a DNS-1123 label."""
    if not is_label(env):
        raise UsageError(f"invalid environment name {show(env)}: use lowercase letters, digits and '-' (at most 63)")
    return _check_root() / env


def _owner(folder: Path) -> str | None:
    """The env name the folder's marker holds (None: no readable marker)."""
    marker = folder / MARKER
    try:
        if marker.is_symlink() or not marker.is_file():
            return None
        return marker.read_text(encoding="utf-8")[:256].strip()
    except (OSError, UnicodeDecodeError):
        return None


def _legacy_owner(folder: Path) -> str | None:
    """The env its ``env.json`` names: how a folder written before the marker existed says whose it is."""
    record = folder / "env.json"
    try:
        if record.is_symlink() or not record.is_file() or record.stat().st_size > 64 * 1024:
            return None
        env = json.loads(record.read_text(encoding="utf-8")).get("env")
    except (OSError, ValueError, AttributeError):
        return None
    return env if isinstance(env, str) else None


def is_own_env_dir(env: str) -> bool:
    """Whether the env's folder, which must exist, is its own (see the module docstring)."""
    folder = env_dir(env)
    if folder.is_symlink() or not folder.is_dir():
        return False
    if _owner(folder) == env or _legacy_owner(folder) == env:
        return True
    return not any(folder.iterdir())


def require_own_env_dir(env: str) -> None:
    """Raise when the env's folder exists but is not its own; nothing is read or changed then."""
    folder = env_dir(env)
    if (folder.exists() or folder.is_symlink()) and not is_own_env_dir(env):
        what = "a symbolic link" if folder.is_symlink() else "not a folder" if not folder.is_dir() else None
        why = what or f"it carries no {MARKER} marker naming {env!r} and no env.json naming it"
        raise NotOwnStateFolder(
            f"{folder} is not the state folder of environment {env!r}: {why}; it was left alone",
            hint="move it away if it is not needed",
        )


def claim_env_dir(env: str) -> Path:
    """The env's folder, created with its marker if missing (a folder of an older version gets one)."""
    require_own_env_dir(env)
    folder = env_dir(env)
    folder.mkdir(parents=True, exist_ok=True)
    if _owner(folder) != env:
        write_atomic(folder / MARKER, env + "\n")
    return folder


def remove_env_dir(env: str) -> bool:
    """Remove the env's folder if it is its own; True if something was removed.

    Raises :class:`StateFolderError` for a folder that is not the env's own (left alone) or
    that could not be removed completely.
    """
    folder = env_dir(env)
    if not (folder.exists() or folder.is_symlink()):
        return False
    require_own_env_dir(env)
    problems: list[str] = []

    def collect(_function: object, path: str, error: object) -> None:
        # onexc (3.12+) passes the exception, onerror (3.11) an exc_info tuple.
        problems.append(f"{path}: {error[1] if isinstance(error, tuple) else error}")

    if sys.version_info >= (3, 12):
        shutil.rmtree(folder, onexc=collect)
    else:
        shutil.rmtree(folder, onerror=collect)
    if problems:
        raise StateFolderError(f"could not remove all of {folder}: " + "; ".join(problems[:3]))
    return True


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class EnvRecord(Record):
    env: str
    runtime: str
    context: str
    kubeconfig: str
    namespace: str

    def __post_init__(self) -> None:
        # A record edited by hand must not lead a request elsewhere (`..` as a namespace).
        if not all(isinstance(v, str) for v in dataclasses.astuple(self)) or not is_label(self.namespace):
            raise ValueError("not an env record")

    @classmethod
    def load(cls, env: str) -> EnvRecord | None:
        try:
            return cls(**json.loads((env_dir(env) / "env.json").read_text()))
        except (OSError, ValueError, TypeError):
            return None

    def save(self) -> None:
        folder = claim_env_dir(self.env)
        write_atomic(folder / "env.json", json.dumps(dataclasses.asdict(self), indent=2))
