"""Forgetting deleted objects: every per-object memory of the operator is keyed by name and
must not outlive the object (a long-running operator would otherwise only grow).

Pure: the controller and the prober call :func:`prune` with the names their caches hold now.
"""

from __future__ import annotations

from collections.abc import Collection, MutableMapping, MutableSet
from typing import Any


def prune(state: MutableMapping[str, Any] | MutableSet[str], live: Collection[str]) -> list[str]:
    """Drop every key of ``state`` that is not in ``live``; returns the dropped keys, sorted."""
    gone = sorted(k for k in state if k not in live)
    for key in gone:
        if isinstance(state, MutableMapping):
            del state[key]
        else:
            state.discard(key)
    return gone
