"""The AGN operator: watches providers, networks and consumers, probes providers, publishes overlays.

Modules:
- :mod:`.informer` — list+watch caches of the AGN objects (one thread per resource).
- :mod:`.workqueue` — the coalescing queue of consumer names that need a reconcile.
- :mod:`.prometheus` — parsing the providers' Prometheus text (pure).
- :mod:`.status` — provider status and conditions from probe outcomes (pure).
- :mod:`.prober` — the probe scheduler and the only writer of provider status.
- :mod:`.reconcile` — the overlay plan for one consumer (pure).
- :mod:`.ownership` — the consumer → overlay ownerReference and the cleanup verdicts (pure).
- :mod:`.pruning` — dropping per-object memory of deleted objects (pure).
- :mod:`.lease` — leader election over a coordination.k8s.io Lease: the rules (pure).
- :mod:`.elector` — the leader-election loop over the Lease (the API calls).
- :mod:`.writes` — the only path to API writes: refused unless leading, and counted.
- :mod:`.controller` — wires the pieces together and is the only writer of overlays.
- :mod:`.health` — ``/healthz`` (JSON: health, leadership, write counters).

The operator is never on the request path, never writes provider spec, talks to the API
only through :class:`agn.kube.Kube`, and writes only while it holds the lease.
"""
