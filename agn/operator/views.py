"""The providers as the leader's reconcile judges them: the cache's views, with what this
term's probes decided and the API does not hold yet, as of the probes heartbeat.

A provider whose status this term's prober decided and has not written yet
(:meth:`agn.operator.prober.Prober.decided`) is judged by that status, not by the one in the
cache: its probe saw it, and the write only records it (for readers, and for a successor
leader, who judges by the statuses as every other reader does). So admission follows the
probes, not the round trip of their writes through a busy API server (docs/operator.md,
"Admission from the probes"). A provider not probed in this term has no decided status and is
judged by its stored one; one never probed has none and is not admitted.

Every view is then judged as every reader judges it (:func:`agn.objects.with_heartbeat`). View
objects are kept while neither the provider, its decided status nor the heartbeat changed, so
the verdicts' cache (keyed by view identity) holds. Reads only; one caller (the reconcile
worker) at a time.
"""

from __future__ import annotations

from collections.abc import Mapping

from agn.model import ProviderView
from agn.objects import Obj, provider_view, with_heartbeat
from agn.operator.informer import Store


class ProviderViews:
    """Every provider's view for one batch of reconciles, converted once per change."""

    def __init__(self, providers: Store) -> None:
        self._providers = providers
        # name -> (the view before the heartbeat, the heartbeat it was judged at, the judged view)
        self._judged: dict[str, tuple[ProviderView, float | None, ProviderView]] = {}
        # name -> (the stored object, the decided status, the object's view with that status)
        self._decided: dict[str, tuple[Obj, Obj, ProviderView]] = {}

    def views(self, *, heartbeat: float | None, decided: Mapping[str, tuple[str, Obj]]) -> tuple[ProviderView, ...]:
        """Every provider's view; ``decided``: name -> (uid, status) of the statuses decided and
        not yet written; ``heartbeat``: this process's last probes heartbeat (unix seconds)."""
        memo, fresh = self._judged, {}
        out = []
        for view in self._with_decided(self._providers.derived(provider_view), decided):
            kept = memo.get(view.name)
            if kept is not None and kept[0] is view and kept[1] == heartbeat:
                judged = kept[2]
            else:
                judged = with_heartbeat(view, heartbeat)
            fresh[view.name] = (view, heartbeat, judged)
            out.append(judged)
        self._judged = fresh
        return tuple(out)

    def _with_decided(self, views: list[ProviderView], decided: Mapping[str, tuple[str, Obj]]) -> list[ProviderView]:
        """``views`` (the cache's), each provider with a decided status of the same uid judged
        by that status instead."""
        if not decided and not self._decided:
            return views
        memo, fresh = self._decided, {}
        out = []
        for view in views:
            uid, status = decided.get(view.name, ("", None))
            obj = self._providers.peek(view.name) if status is not None else None
            if obj is None or status is None or (obj.get("metadata") or {}).get("uid", "") != uid:
                out.append(view)
                continue
            kept = memo.get(view.name)
            if kept is None or kept[0] is not obj or kept[1] is not status:
                kept = (obj, status, provider_view({**obj, "status": status}))
            fresh[view.name] = kept
            out.append(kept[2])
        self._decided = fresh
        return out
