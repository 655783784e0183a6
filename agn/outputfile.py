"""Replacing a file the way kubectl does: the new content goes to a file created exclusively
(``mkstemp``: a random name, mode 0600) in the target's folder, is fsync'ed, and is renamed over
the target; then the folder is fsync'ed. A planted ``<file>.tmp`` (a symlink to a file of the
user's) is never followed or written, and a crash leaves the old file or the new one, never half.

It replaces ``path`` itself: callers that must write through a symlink (a kubeconfig) resolve
it first. Raises ``OSError``; callers name the file and what it holds.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: bytes | str, *, mode: int = 0o600) -> None:
    """Replace ``path`` with ``data`` (str: UTF-8), atomically and durably, as a file of ``mode``."""
    payload = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            if mode != 0o600:
                os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def fsync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (best effort: some file systems refuse)."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
