"""Kubeconfig files: read as kubectl reads them, written as kind writes them. The one place
that knows the format; the operator, the gateway and xtask all use it.

* :mod:`.read` — which files kubectl reads, its merge, context selection and the checks that
  name a bad field before any request (pure, except :func:`load` and :func:`connection_problem`).
* :mod:`.write` — an env's entries added and removed under client-go's lock, written atomically
  through symlinks, removed only while they are still the ones it wrote (:class:`Written`).

One document type, :data:`Config`; one error type, :class:`agn.kubeerrors.ConfigError` (xtask maps it
to exit 1). Callers use this package (``from agn import kubeconfig``). The
``kubernetes`` package is never imported here.
"""

from __future__ import annotations

from agn.kubeconfig.read import (
    SECTIONS,
    Config,
    Files,
    Loaded,
    NoKubeconfig,
    connection_problem,
    exec_command,
    kubeconfig_files,
    kubeconfig_path,
    load,
    merge,
    namespace_of,
    parse,
    select_context,
    server_problem,
    shape_problems,
    usable_context,
    write_target,
)
from agn.kubeconfig.write import (
    Written,
    add_context,
    context_entries,
    empty_config,
    lock_path,
    locked,
    read_for_update,
    remove_context,
    replaced_file,
    set_context_namespace,
    with_entries,
    without_entries,
)

__all__ = [
    "SECTIONS",
    "Config",
    "Files",
    "Loaded",
    "NoKubeconfig",
    "Written",
    "add_context",
    "connection_problem",
    "context_entries",
    "empty_config",
    "exec_command",
    "kubeconfig_files",
    "kubeconfig_path",
    "load",
    "lock_path",
    "locked",
    "merge",
    "namespace_of",
    "parse",
    "read_for_update",
    "remove_context",
    "replaced_file",
    "set_context_namespace",
    "select_context",
    "server_problem",
    "shape_problems",
    "usable_context",
    "with_entries",
    "without_entries",
    "write_target",
]
