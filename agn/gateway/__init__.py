"""The consumer gateway: follows one consumer's RoutingOverlay and routes completions.

- :mod:`agn.gateway.routing` — the pure routing decision (overlay candidates + affinities +
  session -> candidate). No I/O, no clock.
- :mod:`agn.gateway.validation` — the pure check that an overlay is fit to serve.
- :mod:`agn.gateway.table` — the thread-safe routing table the HTTP handlers read and the
  follower swaps overlays into.
- :mod:`agn.gateway.follower` — list+watch of the overlay (index and shards).
- :mod:`agn.gateway.acceptance` — a whole revision accepted, swapped in and reported serving, or rejected.
- :mod:`agn.gateway.status_writer` — the background writer of ``status`` (ordered, retried).
- :mod:`agn.gateway.server` / :mod:`agn.gateway.upstream` — HTTP in, HTTP out.
- :mod:`agn.gateway.__main__` — ``python -m agn.gateway``: wiring, signals, exit codes.

The gateway writes only its own consumer's ``status`` and never any overlay or provider.
"""
