"""The shared list+watch loop, driven by scripted fakes of the list and watch calls."""

from __future__ import annotations

import threading

from agn.kube import Gone, KubeError
from agn.watching import capped_backoff, follow


def test_capped_backoff_doubles_up_to_the_cap():
    assert [capped_backoff(0.2, 1.0)(n) for n in range(1, 6)] == [0.2, 0.4, 0.8, 1.0, 1.0]


class TestFollow:
    def test_relists_after_gone_and_errors_and_resumes_from_last_version(self):
        stop = threading.Event()
        lists, watches, seen = [], [], []

        def list_fn():
            lists.append(1)
            return [{"metadata": {"name": f"snap{len(lists)}", "resourceVersion": "10"}}], "10"

        def watch_fn(rv):
            watches.append(rv)
            n = len(watches)
            if n == 1:
                yield "ADDED", {"metadata": {"name": "a", "resourceVersion": "11"}}
                return  # watch closed by the server: resume from 11
            if n == 2:
                raise Gone("too old", status=410)
            if n == 3:
                raise KubeError("connection reset")
            yield "MODIFIED", {"metadata": {"name": "b", "resourceVersion": "12"}}
            stop.set()

        follow(
            list_fn=list_fn,
            watch_fn=watch_fn,
            on_snapshot=lambda items: seen.append(("snapshot", len(items))),
            on_event=lambda kind, obj: seen.append((kind, obj["metadata"]["name"])),
            stop=stop,
            backoff=lambda n: 0,
        )
        assert watches == ["10", "11", "10", "10"]
        assert len(lists) == 3  # initial, after 410, after the error
        assert ("ADDED", "a") in seen and ("MODIFIED", "b") in seen
