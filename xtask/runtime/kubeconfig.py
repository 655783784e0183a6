"""Kubeconfig merging the way kind does it: one cluster, user and context entry per env,
all named after the context, merged into the existing file without disturbing other
entries, under a lock, written atomically. The merge itself is pure (dict in, dict out).
"""
from __future__ import annotations

import base64
import contextlib
import copy
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

Config = dict[str, Any]


def empty_config() -> Config:
    return {"apiVersion": "v1", "kind": "Config", "preferences": {}, "clusters": [], "users": [], "contexts": [],
            "current-context": ""}


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def context_entries(*, name: str, server: str, ca_cert: Path, client_cert: Path, client_key: Path, namespace: str) -> Config:
    """A self-contained kubeconfig (certificates embedded) holding only this context."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server, "certificate-authority-data": _b64(ca_cert)}}],
        "users": [{"name": name, "user": {"client-certificate-data": _b64(client_cert), "client-key-data": _b64(client_key)}}],
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


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(str(path) + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def read(path: Path) -> Config:
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        return empty_config()
    return data if isinstance(data, dict) else empty_config()


def _write(path: Path, config: Config) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(yaml.safe_dump(config, sort_keys=False))
    os.chmod(tmp, 0o600)
    tmp.replace(path)


def add_context(path: Path, addition: Config) -> None:
    with _locked(path):
        _write(path, merged(read(path), addition))


def remove_context(path: Path, name: str) -> bool:
    """Remove the entries; True if the context was there."""
    with _locked(path):
        current = read(path)
        if not has_context(current, name) and not any(
            e.get("name") == name for s in ("clusters", "users") for e in current.get(s) or []
        ):
            return False
        _write(path, without(current, name))
        return True
