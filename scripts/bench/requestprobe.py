#!/usr/bin/env python3
"""Run ``python -m xtask ...`` as a user would, and record when its first API request went out
and how many it sent: ``python requestprobe.py OUT.json [--profile OUT.prof] -m xtask env provider-drain ...``.

The count is taken where every request of the official client passes,
``kubernetes.client.rest.RESTClientObject.request`` (watches included: one request each), wrapped
the moment that module is first imported, so nothing is imported earlier than xtask itself would
import it and the start-up being measured is the real one. OUT.json gets ``firstRequest`` (Unix
time of the first request, for the caller to subtract its own start time), ``requests``,
``byVerb``, ``bytes`` and ``reads`` (the responses' bodies, in total and each, as read;
watches not counted), ``calls`` (seconds after the first, verb, path, in the order they were
sent), ``took`` (each call's seconds until its response's headers arrived) and ``cpu`` (the
process's CPU seconds, every thread, when each call was sent: what it spent before it). ``--profile OUT.prof`` also
profiles the whole run with cProfile (every thread's calls are not seen: the main thread's,
where the conductor runs) and writes the stats for ``pstats``. The exit status is the command's
(also when it ends with ``os._exit``).
"""

from __future__ import annotations

import atexit
import cProfile
import importlib.abc
import importlib.machinery
import json
import os
import runpy
import sys
import threading
import time

TARGET = "kubernetes.client.rest"
seen: dict = {
    "firstRequest": None,
    "requests": 0,
    "byVerb": {},
    "calls": [],
    "took": [],
    "cpu": [],
    "bytes": 0,
    "reads": [],
}


def _wrap(module) -> None:
    original = module.RESTClientObject.request
    lock = threading.Lock()

    def request(self, method, url, *args, **kwargs):
        if seen["firstRequest"] is None:
            seen["firstRequest"] = time.time()
        seen["requests"] += 1
        seen["byVerb"][method] = seen["byVerb"].get(method, 0) + 1
        at = time.time()
        with lock:  # the pool's threads send side by side: each call keeps its own slot
            seen["calls"].append(
                f"{at - seen['firstRequest']:.3f} {method} {url.split('://', 1)[-1].split('/', 1)[-1]}"
            )
            seen["took"].append(None)
            seen["cpu"].append(round(time.process_time(), 4))
            i = len(seen["took"]) - 1
        try:
            return original(self, method, url, *args, **kwargs)
        finally:
            seen["took"][i] = round(time.time() - at, 4)

    read = module.RESTResponse.read

    def read_counted(self):  # a response's body, read once (a watch's stream is not read here)
        first = self.data is None
        data = read(self)
        if first and isinstance(data, bytes):
            seen["bytes"] += len(data)
            seen["reads"].append(len(data))
        return data

    module.RESTClientObject.request = request
    module.RESTResponse.read = read_counted


class _Loader(importlib.abc.Loader):
    def __init__(self, inner) -> None:
        self.inner = inner

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module) -> None:
        self.inner.exec_module(module)
        _wrap(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Loader(spec.loader)
        return spec


def main() -> None:
    out, *rest = sys.argv[1:]
    profile_out = None
    if rest[:1] == ["--profile"]:
        profile_out, rest = rest[1], rest[2:]
    if len(rest) < 2 or rest[0] != "-m":
        raise SystemExit("usage: requestprobe.py OUT.json [--profile OUT.prof] -m MODULE [ARGS...]")
    module, args = rest[1], rest[2:]
    sys.meta_path.insert(0, _Finder())
    profiler = cProfile.Profile() if profile_out else None

    def dump() -> None:
        with open(out, "w") as f:
            json.dump(seen, f)
        if profiler is not None and profile_out:
            profiler.disable()
            profiler.dump_stats(profile_out)

    atexit.register(dump)
    hard_exit = os._exit  # xtask ends with os._exit while its threads are alive: no atexit then

    def exit_now(code: int) -> None:
        dump()
        hard_exit(code)

    os._exit = exit_now
    sys.argv = [module, *args]
    if profiler is not None:
        profiler.enable()
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
