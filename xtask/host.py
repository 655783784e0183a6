"""The machine the tool runs on, as the kind runtime's host checks read it: the tools on
``PATH``, the process environment, files under the host's root (containers.conf, ``/lib/modules``,
``/sys/fs/cgroup``) and the hard limit of open files.

Every such read goes through one :class:`Host`. The runtime is given ``Host.real()`` (the
machine itself); a test hands in a host of its own (:meth:`Host.fake`), so what a test sees does
not depend on how the machine it runs on was set up. ``tests/unit/conftest.py`` makes
``Host.real()`` a failure in the unit suite, so a unit test that reads the machine fails on every
host, not only on a newcomer's.

Pure data and lookups; it changes nothing on the host.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from xtask.record import Record


def _nofile_hard() -> int:
    import resource

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    return -1 if hard == resource.RLIM_INFINITY else hard


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Host(Record):
    """What the host checks read. ``nofile_hard`` is the hard limit of open files, -1 for none."""

    which: Callable[[str], str | None]
    environ: Mapping[str, str]
    root: Path
    nofile_hard: Callable[[], int]

    @classmethod
    def real(cls) -> Host:
        return cls(which=shutil.which, environ=os.environ, root=Path("/"), nofile_hard=_nofile_hard)

    @classmethod
    def fake(
        cls,
        root: Path,
        *,
        tools: Iterable[str] = (),
        environ: Mapping[str, str] | None = None,
        nofile_hard: int = -1,
    ) -> Host:
        """A host whose files are under ``root``, with ``tools`` on PATH (as ``/usr/bin/<tool>``)."""
        present = frozenset(tools)
        return cls(
            which=lambda tool: f"/usr/bin/{tool}" if tool in present else None,
            environ=dict(environ or {}),
            root=root,
            nofile_hard=lambda: nofile_hard,
        )

    def path(self, absolute: str) -> Path:
        """``absolute`` (a path on the host, such as ``/etc/containers``) under this host's root."""
        return self.root / absolute.lstrip("/")
