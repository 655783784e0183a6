"""Kubeconfig merging the way kind does it: one cluster, user and context entry per env,
all named after the context, merged into the existing file without disturbing other
entries, under a lock, written atomically. The merge itself is pure (dict in, dict out).

The lock is client-go's (and so kubectl's and kind's): ``<file>.lock`` created exclusively
and deleted after the write. kubectl refuses to write while that file exists, so it is
always removed — a lock left behind would break ``kubectl config use-context``. A file that
is not a kubeconfig is an error naming it, never silently replaced.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from agn.kube import ConfigError
from agn.kubeconfig import parse
from xtask.errors import KubeconfigError

Config = dict[str, Any]
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


def merged(existing: Config, addition: Config, *, make_current: bool = True) -> Config:
    """``existing`` with every named entry of ``addition`` inserted or replaced."""
    out = copy.deepcopy(existing) if existing else empty_config()
    for section in ("clusters", "users", "contexts"):
        entries = out.get(section) or []
        for new in addition.get(section) or []:
            entries = [e for e in entries if e.get("name") != new["name"]] + [new]
        out[section] = entries
    if make_current and addition.get("current-context"):
        out["current-context"] = addition["current-context"]
    return out


def without(existing: Config, name: str) -> Config:
    """``existing`` with the cluster, user and context called ``name`` removed."""
    out = copy.deepcopy(existing) if existing else empty_config()
    for section in ("clusters", "users", "contexts"):
        out[section] = [e for e in out.get(section) or [] if e.get("name") != name]
    if out.get("current-context") == name:
        out["current-context"] = ""
    return out


def has_context(config: Config, name: str) -> bool:
    return any(c.get("name") == name for c in config.get("contexts") or [])


def lock_path(path: Path) -> Path:
    return Path(str(path) + ".lock")


@contextlib.contextmanager
def locked(path: Path, *, wait: float | None = None) -> Iterator[None]:
    """Hold client-go's lock on ``path``: create ``<path>.lock`` exclusively (retrying briefly
    while another writer holds it) and always delete it afterwards."""
    wait = LOCK_WAIT_SECONDS if wait is None else wait
    lock = lock_path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise KubeconfigError(f"kubeconfig {path}: cannot create its folder: {exc.strerror or exc}") from exc
    deadline = time.monotonic() + wait
    while True:
        try:
            os.close(os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
            break
        except FileExistsError:
            if time.monotonic() >= deadline:
                raise KubeconfigError(
                    f"kubeconfig {path} is locked: {lock} exists",
                    hint=f"another kubectl, kind or xtask is writing it; if none is, delete {lock}",
                ) from None
            time.sleep(0.05)
        except OSError as exc:
            raise KubeconfigError(f"kubeconfig {path}: cannot create the lock {lock}: {exc.strerror or exc}") from exc
    try:
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(lock)


def read(path: Path) -> Config:
    """The file's configuration; a missing or empty file is an empty one. Anything else that
    is not a kubeconfig raises :class:`KubeconfigError` naming the file (it is never overwritten)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return empty_config()
    except OSError as exc:
        raise KubeconfigError(f"kubeconfig {path}: cannot read it: {exc.strerror or exc}") from exc
    try:
        config = parse(data, str(path))
    except ConfigError as exc:
        raise KubeconfigError(str(exc)) from exc
    return config or empty_config()


def _write(path: Path, config: Config) -> None:
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(yaml.safe_dump(config, sort_keys=False))
        os.chmod(tmp, 0o600)
        tmp.replace(path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise KubeconfigError(f"kubeconfig {path}: cannot write it: {exc.strerror or exc}") from exc


def add_context(path: Path, addition: Config) -> None:
    with locked(path):
        _write(path, merged(read(path), addition))


def remove_context(path: Path, name: str) -> bool:
    """Remove the entries; True if the context was there."""
    with locked(path):
        current = read(path)
        if not has_context(current, name) and not any(
            e.get("name") == name for s in ("clusters", "users") for e in current.get(s) or []
        ):
            return False
        _write(path, without(current, name))
        return True
