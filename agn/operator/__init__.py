"""The AGN operator: watches providers, networks and consumers, probes providers, publishes overlays.

Modules:
- :mod:`.settings` — every flag of the operator, declared once (one frozen dataclass).
- :mod:`.informer` — list+watch caches of the AGN objects (one thread per resource).
- :mod:`.caches` — the operator's informers, and which consumers a change marks dirty.
- :mod:`.workqueue` — the coalescing queue of consumer names that need a reconcile.
- :mod:`.prometheus` — parsing the providers' Prometheus text (pure).
- :mod:`.provider_status` — provider status and conditions from probe outcomes (pure).
- :mod:`.prober` — the probe scheduler and the only writer of provider status.
- :mod:`.probe_recorder` — what a probe's outcome does: the per-provider memory, re-checks, the status write.
- :mod:`.reconcile` — the overlay plan for one consumer (pure).
- :mod:`.diffing` — what a publication changed: the diff, the log line's changes, the Event's note (pure).
- :mod:`.storage` — writing and removing an overlay's index and shards (through :mod:`.writes`).
- :mod:`.memory` — what one leadership term remembers, and forgetting it.
- :mod:`.ownership` — the consumer → overlay ownerReference and the cleanup verdicts (pure).
- :mod:`.pruning` — dropping per-object memory of deleted objects (pure).
- :mod:`.lease` — leader election over a coordination.k8s.io Lease: the rules (pure).
- :mod:`.elector` — the leader-election loop over the Lease (the API calls).
- :mod:`.writes` — the only path to API writes: refused unless leading, and counted.
- :mod:`.controller` — lifecycle and the reconcile of one consumer; with :mod:`.storage`, the
  only writer of overlays.
- :mod:`.health` — ``/healthz`` (JSON: health, leadership, write counters).

The operator is never on the request path, never writes provider spec, talks to the API
only through :class:`agn.kube.Kube`, and writes only while it holds the lease.
"""
