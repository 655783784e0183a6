"""What a drain reads and writes: the cluster and files. Each module is one edge, with the
decisions it needs taken from :mod:`xtask.drain.core`.

:mod:`targets` (the network, consumers and overlays the checks read), :mod:`fanout` (dry runs
and bounded concurrent patches), :mod:`journal` (the write-ahead journal file),
:mod:`waiter` and :mod:`idle_waiter` (watch-driven waits with deadlines), :mod:`kube_events`
(Kubernetes Events about each provider), :mod:`planfile` (reviewable plan files) and
:mod:`preflight` (checks of folders and journals before anything is written).

Must not: decide what to change, or order the phases of a run (that is the conductor,
:mod:`xtask.drain.run`).
"""
