"""Checks of a drain's or a restoration's inputs that must pass before anything is written:
the journal folder can hold a journal, a journal's fields have the types a restoration
needs, the journal's namespace exists in the cluster. Each raises an error naming the input.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from agn.kube import PROVIDERS, Forbidden, Kube
from xtask.drain.edges.journal import JournalError, JournalReplay
from xtask.errors import XtaskError

_HINT = "choose a writable folder with --journal-dir or AGN_XTASK_JOURNAL_DIR"


def usable_journal_dir(folder: Path) -> Path:
    """``folder``, created if missing, once a file could be created in it (and removed again).

    Called before the first API request of a run that may write, so an unusable folder
    (``/proc/x``, a path below a regular file, a read-only file system) stops the run while
    nothing has changed, instead of after the dry run.
    """
    if folder.exists() and not folder.is_dir():
        raise JournalError(f"cannot use {folder} as the drain journal folder: it is not a folder", hint=_HINT)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise JournalError(
            f"cannot use {folder} as the drain journal folder: {exc.strerror or exc}", hint=_HINT
        ) from exc
    return folder


def journal_context(state: JournalReplay, path: Path) -> str | None:
    """The kube context a journal records (None when it records none)."""
    if state.context is not None and not isinstance(state.context, str):
        raise JournalError(f"{path}: not a drain journal: context must be a string, got {state.context!r}")
    return state.context or None


def require_namespace(kube: Kube, namespace: str, *, journal: Path, recorded_context: str | None) -> None:
    """Fail when the journal's namespace does not exist in the cluster ``kube`` talks to.

    Without this every provider of the journal would be reported "provider-deleted". A
    namespace that has providers exists (one LIST, with the client already loaded); only an
    empty answer needs a GET of the namespace. A caller who may not read namespaces gets no
    verdict here; restoration then reports per provider.
    """
    if kube.list(PROVIDERS, namespace)[0]:
        return
    try:
        exists = kube.namespace_exists(namespace)
    except Forbidden:
        return
    if exists:
        return
    here = kube.context or "in-cluster"
    hint = None
    if recorded_context and recorded_context != here:
        hint = f"the run drained context {recorded_context!r}; pass --context {recorded_context} to restore there"
    raise XtaskError(
        f"namespace {namespace!r} from journal {journal} does not exist in context {here!r}; nothing was restored",
        hint=hint,
    )
