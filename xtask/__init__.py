"""AGN xtask: the developer and operations tool for the AGN inference routing system.

Run as ``python -m xtask``. The package keeps pure logic (selection, plans, predicates)
free of I/O; Kubernetes calls live in :mod:`agn.kube` and subprocesses in :mod:`xtask.procs`.
"""
