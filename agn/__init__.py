"""AGN: the small, real inference routing system that xtask drives.

- :mod:`agn.model` — the pure overlay model (no I/O), shared by the operator and the xtask.
- :mod:`agn.kube` — the only module that imports the ``kubernetes`` client; callers import the
  error types (:mod:`agn.kubeerrors`) and resource names (:mod:`agn.resources`) from it too.
  Those two import nothing of it, so :mod:`agn.kubeconfig` can use them without a circle.
- :mod:`agn.operator`, :mod:`agn.gateway`, :mod:`agn.provider` — the three processes; each
  declares its flags once, in its ``settings`` module (:mod:`agn.flags` derives the parser,
  the command lines and ``docs/settings.md``).
"""

GROUP = "agn.dev"
VERSION = "v1alpha1"
