"""Image archives written directly, with no engine: layer tarballs and the ``docker save``
layout that ``docker load``, ``podman load``, ``kind load image-archive`` and ``ctr images
import`` read. Used by :mod:`xtask.images.nodeimage`.

Deterministic: fixed owners and timestamps, so the same inputs give the same bytes. Writes only
the files it is given; runs no command.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import tarfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from xtask.record import Record

EPOCH = 315532800  # 1980-01-01: every file's mtime, so equal recipes give equal layers
DEFAULT_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# -- layers ------------------------------------------------------------------------------------


class Layer:
    """A layer tarball written entry by entry: owned by root, fixed timestamps, parents first."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._tar = tarfile.open(path, "w", format=tarfile.PAX_FORMAT)
        self._dirs: set[str] = set()

    def _info(self, name: str, kind: bytes, mode: int) -> tarfile.TarInfo:
        info = tarfile.TarInfo(name)
        info.type = kind
        info.mode = mode
        info.mtime = EPOCH
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        return info

    def _parents(self, name: str) -> None:
        parts = name.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            d = "/".join(parts[:i])
            if d not in self._dirs:
                self._dirs.add(d)
                self._tar.addfile(self._info(d, tarfile.DIRTYPE, 0o755))

    def add_bytes(self, name: str, data: bytes, mode: int = 0o644) -> None:
        self._parents(name)
        info = self._info(name, tarfile.REGTYPE, mode)
        info.size = len(data)
        self._tar.addfile(info, io.BytesIO(data))

    def add_file(self, name: str, src: Path, mode: int | None = None) -> None:
        self._parents(name)
        info = self._info(name, tarfile.REGTYPE, mode if mode is not None else (src.stat().st_mode & 0o7777))
        info.size = src.stat().st_size
        with src.open("rb") as f:
            self._tar.addfile(info, f)

    def add_symlink(self, name: str, target: str) -> None:
        self._parents(name)
        info = self._info(name, tarfile.SYMTYPE, 0o777)
        info.linkname = target
        self._tar.addfile(info)

    def close(self) -> None:
        self._tar.close()


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class RunConfig(Record):
    """What a container of the image runs with: the image config's ``config`` section."""

    entrypoint: Sequence[str] = ()
    cmd: Sequence[str] = ()
    env: Sequence[str] = (DEFAULT_PATH,)
    labels: Mapping[str, str] | None = None
    stop_signal: str | None = None


def write_archive(
    out: Path, *, layers: Sequence[Path], repo_tags: Sequence[str], run: RunConfig = RunConfig(), arch: str = "amd64"
) -> str:
    """An image archive in the ``docker save`` layout, which ``docker load``, ``podman load``,
    ``kind load image-archive`` and ``ctr images import`` all read. Returns the image id."""
    diff_ids = [file_sha256(layer) for layer in layers]
    container_config: dict[str, object] = {"Env": list(run.env)}
    if run.entrypoint:
        container_config["Entrypoint"] = list(run.entrypoint)
    if run.cmd:
        container_config["Cmd"] = list(run.cmd)
    if run.labels:
        container_config["Labels"] = dict(run.labels)
    if run.stop_signal:
        container_config["StopSignal"] = run.stop_signal
    config = {
        "architecture": arch,
        "os": "linux",
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(EPOCH)),
        "config": container_config,
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{d}" for d in diff_ids]},
        # The module's old name, kept: the config bytes, and so the image id, stay as they were.
        "history": [{"created_by": "xtask.nodeimage"} for _ in layers],
    }
    config_bytes = json.dumps(config, sort_keys=True, separators=(",", ":")).encode()
    config_id = sha256_hex(config_bytes)
    manifest = [
        {"Config": f"{config_id}.json", "RepoTags": list(repo_tags), "Layers": [f"{d}/layer.tar" for d in diff_ids]}
    ]
    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:

        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), EPOCH, 0o644
            tar.addfile(info, io.BytesIO(data))

        add(f"{config_id}.json", config_bytes)
        for layer, digest in zip(layers, diff_ids, strict=True):
            info = tar.gettarinfo(str(layer), arcname=f"{digest}/layer.tar")
            info.mtime, info.uid, info.gid, info.uname, info.gname, info.mode = EPOCH, 0, 0, "", "", 0o644
            with layer.open("rb") as f:
                tar.addfile(info, f)
        add("manifest.json", json.dumps(manifest).encode())
    return f"sha256:{config_id}"
