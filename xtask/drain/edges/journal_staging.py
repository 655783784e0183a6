"""The hidden file a drain journal's header is staged in, and what a run does with one left behind.

:meth:`xtask.drain.edges.journal.Journal.create` writes the header to
``.drain-<operation>.<writer>.jsonl.new`` before the journal appears under its name. ``<writer>``
is ``<boot>-<pid>-<start>``: the first 8 hex digits of the kernel's boot id, the pid and that
pid's kernel start time, so a later run can tell whether the process that wrote it still runs.

A run killed while creating its journal leaves that file behind. The next run that creates a
journal in the same folder removes it when its writer is gone (written during this boot, and the
pid is not running as that process), or when it is older than :data:`STALE_SECONDS` (a create
takes milliseconds); it says which it removed and why, and names every other one it leaves (one
written on another host sharing the folder, or before a reboot, or by an older xtask that did not
name its writer). One being created right now by a live run is left alone without a word.
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
from collections.abc import Callable
from pathlib import Path

from xtask.pids import boot_id, own_start_ticks, pid_running
from xtask.record import Record

STALE_SECONDS = 3600.0  # a staging file this old is stale whoever wrote it
STAGED_GLOB = ".drain-*.jsonl.new"
_NAME = re.compile(r"\.drain-(?P<op>[^/]+?)(?:\.(?P<boot>[0-9a-f]{8})-(?P<pid>[0-9]+)-(?P<ticks>[0-9]+))?\.jsonl\.new")


def _boot_prefix() -> str | None:
    boot = boot_id()
    return boot.replace("-", "")[:8].lower() if boot else None


def staged_path(path: Path) -> Path:
    """The hidden file the header of the journal ``path`` is written to, naming its writer."""
    stem = path.name.removesuffix(".jsonl")
    boot, ticks = _boot_prefix(), own_start_ticks()
    writer = f".{boot}-{os.getpid()}-{ticks}" if boot is not None and ticks is not None else ""
    return path.with_name(f".{stem}{writer}.jsonl.new")


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Leftover(Record):
    """A staging file found in the journal folder: its name, its writer (when named) and its age."""

    name: str
    boot: str | None
    pid: int | None
    ticks: int | None
    age: float


def parse_leftover(name: str, age: float) -> Leftover:
    m = _NAME.fullmatch(name)
    if m is None or m["pid"] is None:
        return Leftover(name, None, None, None, age)
    return Leftover(name, m["boot"], int(m["pid"]), int(m["ticks"]), age)


def leftover_verdict(left: Leftover, *, boot: str | None, running: Callable[[int, int], bool]) -> tuple[bool, str]:
    """(remove it, why) for one staging file; why is empty for one a live run is creating now.

    ``boot``: this boot's id prefix (None: unknown); ``running(pid, ticks)``: whether that
    process runs now."""
    this_boot = boot is not None and left.boot == boot
    if this_boot and left.pid is not None and left.ticks is not None:
        if running(left.pid, left.ticks):
            return False, ""  # a run creating its journal right now
        return True, f"its writer (pid {left.pid}) is no longer running: it was stopped while creating its journal"
    if left.age >= STALE_SECONDS:
        return True, f"it is {left.age / 60:.0f} minutes old; creating a journal takes milliseconds"
    who = "whose writer is not named" if left.pid is None else "written on another host or before a reboot"
    return False, f"a staging file {who}, {left.age:.0f}s old; a run removes it once it is an hour old"


def sweep_leftovers(folder: Path, *, now: float | None = None) -> list[str]:
    """Remove the stale staging files in ``folder``; one line per file removed or left, saying so."""
    now = time.time() if now is None else now
    boot = _boot_prefix()
    said = []
    for path in sorted(folder.glob(STAGED_GLOB)):
        try:
            age = max(0.0, now - path.lstat().st_mtime)
        except OSError:
            continue  # gone meanwhile: its run finished creating its journal
        remove, why = leftover_verdict(parse_leftover(path.name, age), boot=boot, running=pid_running)
        if not why:
            continue
        if not remove:
            said.append(f"left {path} in place: {why}")
            continue
        try:
            path.unlink(missing_ok=True)
        except OSError as exc:
            said.append(f"could not remove the stale staging file {path} ({why}): {exc.strerror or exc}")
            continue
        said.append(f"removed the stale staging file {path}: {why}")
    return said
