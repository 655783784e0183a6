"""``env provider-drain`` and ``env drain-restore``: selection, plan, fan-out, restoration,
journal and convergence.

Pure modules: :mod:`selection`, :mod:`plan`, :mod:`converge`, :mod:`idle`, :mod:`states` (run
states, wait endings, outcomes, and what "restored OK" means), :mod:`request` (what a run is
asked to do), :mod:`render` (summaries and report sections), :mod:`report` (exit codes). I/O
lives in :mod:`fanout`, :mod:`waiter`, :mod:`idle_waiter`, :mod:`journal`, :mod:`guard` (target
checks and the capacity guard), :mod:`events`; :mod:`restore` is the one restore path, and
:mod:`run` wires a drain in order.
"""
