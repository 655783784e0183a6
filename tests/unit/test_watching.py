"""The shared list+watch loop, driven by scripted fakes of the list and watch calls."""

from __future__ import annotations

import threading

from agn.kube import PROVIDERS, Gone, KubeError
from agn.watching import FollowOptions, capped_backoff, follow, start_follower


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
            options=FollowOptions(backoff=lambda n: 0),
        )
        assert watches == ["10", "11", "10", "10"]
        assert len(lists) == 3  # initial, after 410, after the error
        assert ("ADDED", "a") in seen and ("MODIFIED", "b") in seen


class FakeKube:
    """Lists one object, then watches: one MODIFIED event, then a quiet watch that ends at ``stop``."""

    def __init__(self, stop: threading.Event) -> None:
        self.calls: list[tuple] = []
        self.stop = stop

    def list(self, res, namespace, *, label_selector=None, field_selector=None):
        self.calls.append(("list", res.plural, namespace, field_selector))
        return [{"metadata": {"name": "p1", "resourceVersion": "5"}}], "5"

    def watch(self, res, namespace, *, resource_version, timeout_seconds=60, field_selector=None):
        self.calls.append(("watch", res.plural, namespace, resource_version, timeout_seconds, field_selector))
        if resource_version == "5":
            yield "MODIFIED", {"metadata": {"name": "p1", "resourceVersion": "6"}}
        else:
            self.stop.wait(5)


def test_a_started_follower_lists_and_watches_one_resource_by_name_on_its_own_thread():
    stop, seen = threading.Event(), []
    kube = FakeKube(stop)
    modified = threading.Event()

    def on_event(kind, obj):
        seen.append((kind, obj["metadata"]["resourceVersion"]))
        modified.set()

    thread = start_follower(
        kube,
        PROVIDERS,
        "ns",
        name="watch-test",
        on_snapshot=lambda items: seen.append(("snapshot", len(items))),
        on_event=on_event,
        stop=stop,
        options=FollowOptions(field_selector="metadata.name=p1", watch_timeout=7),
    )
    assert thread.name == "watch-test" and thread.daemon
    assert modified.wait(5)
    stop.set()
    thread.join(5)
    assert not thread.is_alive()
    assert seen == [("snapshot", 1), ("MODIFIED", "6")]
    assert kube.calls == [
        ("list", "inferenceproviders", "ns", "metadata.name=p1"),
        ("watch", "inferenceproviders", "ns", "5", 7, "metadata.name=p1"),
        ("watch", "inferenceproviders", "ns", "6", 7, "metadata.name=p1"),  # resumed from the last version
    ]
