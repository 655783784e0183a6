"""A process's identity as the kernel keeps it: its start time and the boot it runs in, read
from /proc. Nothing here starts or signals a process (:mod:`xtask.procs` does, by pid); a drain
reads these to name the writer of a journal it stages (:mod:`xtask.drain.edges.journal_staging`)
without loading the subprocess machinery.
"""

from __future__ import annotations

import os
from pathlib import Path


def proc_stat(pid: int) -> tuple[str, int] | None:
    """(state, start time in clock ticks) of a pid from /proc, or None if it does not exist."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name is in parentheses and may itself contain spaces or parentheses.
    fields = raw[raw.rindex(")") + 2 :].split()
    return fields[0], int(fields[19])


def pid_running(pid: int, start_ticks: int) -> bool:
    """True when ``pid`` is running (not a zombie) and started at ``start_ticks``: the same
    process, not one that reused its pid."""
    stat = proc_stat(pid)
    if stat is None:
        return False
    state, ticks = stat
    return state not in ("Z", "X") and ticks == start_ticks


def own_start_ticks() -> int | None:
    """This process's kernel start time (clock ticks since boot), None where /proc cannot say."""
    stat = proc_stat(os.getpid())
    return stat[1] if stat else None


def boot_id() -> str | None:
    """The kernel's id of this boot (differs per host and per boot), None where it cannot be read."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None
