"""``env provider-drain``: selection, plan, fan-out, restoration, journal and convergence.

Pure modules: :mod:`selection`, :mod:`plan`, :mod:`converge`. I/O lives in :mod:`fanout`,
:mod:`waiter`, :mod:`journal`; :mod:`run` wires them in order.
"""
