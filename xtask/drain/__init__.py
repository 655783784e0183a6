"""``env provider-drain`` and ``env drain-restore``, in three layers:

- :mod:`xtask.drain.core` — the pure decisions (selection, changes, holds, budget, guard,
  convergence, idle, waves, states, the request): plain data in and out, no I/O;
- :mod:`xtask.drain.edges` — what talks to the cluster and to files (fan-out, journal, waiters,
  Kubernetes Events, target readers, plan files, preflight checks);
- :mod:`xtask.drain.gates` — the wave gates, one module each, found through one registry;

and the conductor at this level: :mod:`run` (the phases of a run, in order: a drain without
waves is one wave without gates), :mod:`restore` (the one restore path), :mod:`progress` (the
typed progress events a run emits), :mod:`report` and :mod:`render` (the report, built once
from the phases' results), :mod:`signals` (handlers that only set flags).
"""
