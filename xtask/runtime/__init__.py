"""Runtimes that bring up an environment: the protocol (base.py), the registry (registry.py) and its implementations."""
