"""Kubeconfig files written the way kind writes them: one cluster, user and context entry per
env, all named after the context, put into the existing file without disturbing other
entries, under a lock, written atomically. Adding and removing entries is pure (dict in, dict
out); only :func:`locked`, :func:`read_for_update`, :func:`add_context` and
:func:`remove_context` touch files. Reading several files as kubectl does is :mod:`.read`'s.

**Writing** is kubectl's, made atomic: a kubeconfig that is a symlink is written through to
its target (the link stays); anything that is not a regular file (``/dev/null``, a FIFO, a
folder) is refused, naming it, and nothing is written. The new content goes to a temporary
file created exclusively (``mkstemp``: a random name, mode 0600) in the target's folder,
fsync'ed and renamed over the target, so a planted ``<kubeconfig>.tmp`` is never followed.

**The lock** is client-go's (and so kubectl's and kind's): ``<file>.lock`` created exclusively
and deleted after the write. kubectl refuses to write while that file exists, so it is always
removed. Ours also holds an ``flock`` on it and says ``agn-xtask pid N``: a lock left behind by
an xtask that was killed (its flock died with it) is recognised as stale and broken; any other
lock that outlives :data:`LOCK_WAIT_SECONDS` is an error naming it.

**Removing** an env's entries (:func:`remove_context`) happens only while they are still the
ones it wrote: its cluster entry must have the env's server and CA (:class:`Written`). Another
env of the same name under another ``AGN_XTASK_HOME`` writes another server and CA.

A file that is not a kubeconfig is an error naming it, never silently replaced. Every error
is :class:`agn.kubeerrors.ConfigError` (the reader's too), naming the file.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import dataclasses
import fcntl
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import yaml

from agn.inputfile import YAML_INPUT_LIMIT, InputFileError, kind_of, read_regular
from agn.kubeconfig.read import SECTIONS, Config, parse
from agn.kubeerrors import ConfigError
from agn.outputfile import write_atomic

LOCK_WAIT_SECONDS = 2.0  # kubectl holds the lock for milliseconds; longer means one was left behind


def empty_config() -> Config:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [],
        "users": [],
        "contexts": [],
        "current-context": "",
    }


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def context_entries(
    *, name: str, server: str, ca_cert: Path, client_cert: Path, client_key: Path, namespace: str
) -> Config:
    """A self-contained kubeconfig (certificates embedded) holding only this context."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server, "certificate-authority-data": _b64(ca_cert)}}],
        "users": [
            {"name": name, "user": {"client-certificate-data": _b64(client_cert), "client-key-data": _b64(client_key)}}
        ],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name, "namespace": namespace}}],
        "current-context": name,
    }


def with_entries(existing: Config, addition: Config, *, make_current: bool = True) -> Config:
    """``existing`` with every named entry of ``addition`` inserted or replaced."""
    out = copy.deepcopy(existing) if existing else empty_config()
    for section in SECTIONS:
        entries = out.get(section) or []
        for new in addition.get(section) or []:
            entries = [e for e in entries if e.get("name") != new["name"]] + [new]
        out[section] = entries
    if make_current and addition.get("current-context"):
        out["current-context"] = addition["current-context"]
    return out


def without_entries(existing: Config, name: str) -> Config:
    """``existing`` with the cluster, user and context called ``name`` removed."""
    out = copy.deepcopy(existing) if existing else empty_config()
    for section in SECTIONS:
        out[section] = [e for e in out.get(section) or [] if e.get("name") != name]
    if out.get("current-context") == name:
        out["current-context"] = ""
    return out


@dataclasses.dataclass(frozen=True)
class Written:
    """What an env wrote into its cluster entry, which makes the entries recognisably its own:
    the server URL and the ``certificate-authority-data`` (None when it wrote none)."""

    server: str
    ca_data: str | None = None

    @classmethod
    def of(cls, addition: Config, name: str) -> Written:
        """What ``addition`` (:func:`context_entries`) writes for the cluster ``name``."""
        body = _cluster(addition, name) or {}
        return cls(str(body.get("server") or ""), body.get("certificate-authority-data"))

    @classmethod
    def from_files(cls, server: str | None, ca_cert: Path) -> Written | None:
        """What an env with this server and CA file wrote; None when either is gone (then
        nothing in a kubeconfig can be shown to be the env's, and nothing is removed)."""
        try:
            return cls(server, _b64(ca_cert)) if server else None
        except OSError:
            return None

    def matches(self, config: Config, name: str) -> bool:
        """Whether the cluster ``name`` in ``config`` is still the one this env wrote."""
        body = _cluster(config, name)
        return (
            body is not None
            and body.get("server") == self.server
            and body.get("certificate-authority-data") == self.ca_data
        )


def _cluster(config: Config, name: str) -> dict | None:
    for e in config.get("clusters") or []:
        if e.get("name") == name:
            body = e.get("cluster")
            return body if isinstance(body, dict) else {}
    return None


def lock_path(path: Path) -> Path:
    return Path(str(path) + ".lock")


_LOCK_MARK = b"agn-xtask pid "


def _create_lock(lock: Path) -> int:
    """``lock`` created exclusively (client-go's lock), flock'ed and marked as ours; its fd."""
    fd = os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        # Blocking: only a process testing whether this lock is stale holds it, for microseconds.
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.write(fd, _LOCK_MARK + f"{os.getpid()}\n".encode())
    except OSError:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(lock)
        raise
    return fd


def _break_if_stale(lock: Path) -> bool:
    """Delete ``lock`` if an xtask that is gone left it (ours, and nobody holds its flock).
    True when it is gone now (the caller retries at once); False when it is held or not ours."""
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # a live xtask holds it
        if not os.read(fd, 64).startswith(_LOCK_MARK):
            return False  # kubectl's, kind's, or an older xtask's: not ours to judge
        try:
            if os.stat(lock, follow_symlinks=False).st_ino != st.st_ino:
                return True  # already broken and taken anew by someone else: retry
            os.unlink(lock)
        except FileNotFoundError:
            pass
        return True
    finally:
        os.close(fd)


@contextlib.contextmanager
def locked(path: Path, *, wait: float | None = None) -> Iterator[None]:
    """Hold client-go's lock on ``path``: create ``<path>.lock`` exclusively (retrying briefly
    while another writer holds it, breaking one a killed xtask left) and always delete it afterwards."""
    wait = LOCK_WAIT_SECONDS if wait is None else wait
    lock = lock_path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"kubeconfig {path}: cannot create its folder: {exc.strerror or exc}") from exc
    deadline = time.monotonic() + wait
    while True:
        try:
            fd = _create_lock(lock)
            break
        except FileExistsError:
            if _break_if_stale(lock):
                continue
            if time.monotonic() >= deadline:
                raise ConfigError(
                    f"kubeconfig {path} is locked: {lock} exists",
                    hint=f"another kubectl, kind or xtask is writing it; if none is, delete {lock}",
                ) from None
            time.sleep(0.05)
        except OSError as exc:
            raise ConfigError(f"kubeconfig {path}: cannot create the lock {lock}: {exc.strerror or exc}") from exc
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            if os.stat(lock, follow_symlinks=False).st_ino == os.fstat(fd).st_ino:
                os.unlink(lock)
        os.close(fd)


def read_for_update(path: Path) -> Config:
    """The file's configuration; a missing or empty file is an empty one. Anything else that
    is not a kubeconfig (or not a regular file) raises :class:`ConfigError` naming the file
    (it is never overwritten)."""
    try:
        data = read_regular(path, limit=YAML_INPUT_LIMIT)
    except FileNotFoundError:  # also a dangling link: it is written through to its target, as by kubectl
        return empty_config()
    except InputFileError as exc:
        raise ConfigError(f"kubeconfig {_named(path)}: {exc}") from exc
    return parse(data, str(path)) or empty_config()


def _named(path: Path) -> str:
    """``path``, and what it links to when it is a symlink."""
    return f"{path} (a link to {os.path.realpath(path)})" if path.is_symlink() else str(path)


def replaced_file(path: Path) -> Path:
    """The file a write of ``path`` replaces: ``path`` itself, or the file its symlinks lead to.

    Raises :class:`ConfigError` when that is not a regular file (nothing is written)."""
    target = Path(os.path.realpath(path))
    try:
        st = os.stat(target, follow_symlinks=False)
    except FileNotFoundError:
        return target
    except OSError as exc:
        raise ConfigError(f"kubeconfig {_named(path)}: cannot write it: {exc.strerror or exc}") from exc
    if stat.S_ISLNK(st.st_mode):
        raise ConfigError(f"kubeconfig {path}: a symlink loop; nothing was written")
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"kubeconfig {_named(path)}: is {kind_of(st.st_mode)}, not a regular file")
    return target


def _write(path: Path, config: Config) -> None:
    target = replaced_file(path)
    try:
        write_atomic(target, yaml.safe_dump(config, sort_keys=False))
    except OSError as exc:
        raise ConfigError(f"kubeconfig {_named(path)}: cannot write it: {exc.strerror or exc}") from exc


def add_context(path: Path, addition: Config) -> None:
    with locked(path):
        _write(path, with_entries(read_for_update(path), addition))


def set_context_namespace(path: Path, name: str, namespace: str) -> bool:
    """Give context ``name`` a default namespace (as ``kubectl config set-context NAME
    --namespace NS`` does). False when the file has no such context (nothing is written)."""
    with locked(path):
        config = read_for_update(path)
        for entry in config.get("contexts") or []:
            if isinstance(entry, dict) and entry.get("name") == name and isinstance(entry.get("context"), dict):
                if entry["context"].get("namespace") == namespace:
                    return True
                entry["context"]["namespace"] = namespace
                _write(path, config)
                return True
        return False


def remove_context(path: Path, name: str, *, ours: Written | None) -> bool:
    """Remove the cluster, user and context ``name`` if the cluster is still the one this env
    wrote (``ours``; None: nothing is provably ours, nothing is removed). True if removed."""
    if ours is None:
        return False
    with locked(path):
        current = read_for_update(path)
        if not ours.matches(current, name):
            return False
        _write(path, without_entries(current, name))
        return True
