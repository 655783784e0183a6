"""Reading a file a user named (an env file, a kubeconfig, a drain journal): a regular file of
bounded size, or a one-line error.

A FIFO must not block the reader, a device (``/dev/zero``) must not be read until memory runs
out, and a directory must not give a confusing ``IsADirectoryError``. So the path is checked
with ``stat`` before it is opened (a device is never opened), opened with ``O_NONBLOCK`` (a
FIFO swapped in after the check does not block the open), checked again with ``fstat`` on the
open file, and at most ``limit + 1`` bytes are read. Nothing here parses the content or names
what kind of input the file is: callers prefix the path and the kind.
"""

from __future__ import annotations

import os
import stat

MIB = 1024 * 1024
# Env files and kubeconfigs are YAML, parsed in pure Python (so that every alias, nesting level
# and duplicate key can be checked, agn.yamltext): about a second per 100 KiB of the densest
# input on a busy machine. Real ones are a few KiB to a few hundred KiB.
YAML_INPUT_LIMIT = 4 * MIB
# A drain journal holds a few hundred bytes per provider; 64 MiB is a drain of 100,000s.
JOURNAL_LIMIT = 64 * MIB


class InputFileError(OSError):
    """The path is not a readable regular file of at most the limit. ``str()`` is one line
    without the path (callers add it); FileNotFoundError is raised as itself."""


def kind_of(mode: int) -> str:
    """What a file of this ``st_mode`` is, for messages: 'a FIFO (named pipe)', 'a directory', ..."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def _check(st: os.stat_result, limit: int) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise InputFileError(f"is {kind_of(st.st_mode)}, not a regular file")
    if st.st_size > limit:
        raise InputFileError(f"is too large: {st.st_size} bytes, the limit is {limit} bytes ({limit // MIB} MiB)")


def read_regular(path: str | os.PathLike[str], *, limit: int) -> bytes:
    """The content of ``path`` (symlinks followed) if it is a regular file of at most ``limit`` bytes.

    Raises FileNotFoundError when it does not exist, :class:`InputFileError` for anything else.
    """
    try:
        _check(os.stat(path), limit)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except InputFileError:
        raise
    except OSError as exc:
        raise InputFileError(f"cannot read it: {exc.strerror or exc}") from None
    try:
        _check(os.fstat(fd), limit)  # the path may have been replaced since the stat
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            chunk = os.read(fd, min(limit + 1 - size, MIB))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except InputFileError:
        raise
    except OSError as exc:
        raise InputFileError(f"cannot read it: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if size > limit:  # it grew while being read
        raise InputFileError(f"is too large: more than {limit} bytes ({limit // MIB} MiB)")
    return b"".join(chunks)
