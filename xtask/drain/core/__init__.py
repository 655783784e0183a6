"""The drain's pure decisions: plain data in, plain data out; no API request, no file, no clock
(callers pass ``now``).

:mod:`selection` (which providers), :mod:`changes` (per-provider changes, patch bodies and the
restoration of one), :mod:`holds` (who holds a provider drained), :mod:`budget` (the fleet
budget), :mod:`guard` (the targets' checks and the capacity guard), :mod:`converge` (the
convergence predicate), :mod:`idle` (when a drained provider is idle), :mod:`waves` (what a
wave is and what ``--resume`` checks), :mod:`amounts` (``N`` or ``P%``, durations),
:mod:`states` (the words a run records) and :mod:`request` (what a run is asked to do).

Must not: import :mod:`agn.kube`, open files, start threads. What talks to the cluster and to
files is :mod:`xtask.drain.edges`; the conductor is :mod:`xtask.drain.run`.
"""
