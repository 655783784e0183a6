"""Runtimes that bring up an environment: the embedded local control plane and kind."""
