"""The follower's accept -> swap -> serve order and the status writer, against a fake API boundary."""

from __future__ import annotations

import io
import json
import threading

import pytest

from agn.gateway.follower import FollowerTimings, OverlayFollower
from agn.gateway.status_writer import StatusWriter
from agn.gateway.table import RoutingTable
from agn.kube import CONSUMERS, SHARDS, Forbidden, NotFound, Unreachable
from agn.logs import JsonLog
from agn.model import ADMITTED, EXISTING_ONLY, Candidate, Overlay, overlay_digest
from agn.shards import split


class FakeKube:
    """Records status patches (and what the table served at that moment); can fail the first N."""

    def __init__(self, table: RoutingTable, *, failures: list[Exception] | None = None) -> None:
        self.table = table
        self.failures = list(failures or [])
        self.patches: list[tuple[dict, int | None]] = []
        self.lock = threading.Lock()

    def merge_patch_status(self, res, namespace, name, patch):
        assert (res, namespace, name) == (CONSUMERS, "ns", "c1")  # only its own consumer's status
        assert set(patch) == {"status"}
        with self.lock:
            if self.failures:
                raise self.failures.pop(0)
            serving = self.table.serving
            self.patches.append((patch["status"], serving.revision if serving else None))
        return {}


def overlay_obj(revision: int, *, consumer: str = "c1", providers: tuple[str, ...] = ("a",)) -> dict:
    cands = tuple(Candidate(f"c-{p}", p, f"http://127.0.0.1:1/{p}", "g", 0, ADMITTED) for p in providers)
    return {
        "metadata": {"name": "c1"},
        "spec": Overlay("net", consumer, revision, overlay_digest(cands), cands).to_spec(),
    }


@pytest.fixture
def rig():
    table = RoutingTable()
    log_stream = io.StringIO()
    log = JsonLog(component="gateway", fields={"consumer": "c1"}, stream=log_stream)

    def make(*, failures: list[Exception] | None = None, kube=None, **settings):
        kube = kube if kube is not None else FakeKube(table, failures=failures)
        status = StatusWriter(kube, namespace="ns", consumer="c1", log=log)
        thread = threading.Thread(target=status.run, daemon=True)
        thread.start()
        follower = OverlayFollower(
            kube,
            namespace="ns",
            consumer="c1",
            table=table,
            status=status,
            log=log,
            stop=threading.Event(),
            timings=FollowerTimings(**settings),
        )
        made.append((status, thread))
        return kube, status, follower

    made: list = []
    yield table, make, log_stream
    for status, thread in made:
        status.close()
        thread.join(timeout=5)


def drain(status: StatusWriter) -> None:
    assert status.wait_written(status.submit({}), timeout=5)


def test_accepted_is_written_before_swap_and_serving_after(rig):
    table, make, _ = rig
    kube, status, follower = make()
    follower.observe(overlay_obj(1))
    drain(status)
    (accepted, served_then), (serving, served_later) = kube.patches[:2]
    assert accepted["acceptedRevision"] == 1 and served_then is None  # written before the swap
    assert accepted["acceptedDigest"] == overlay_obj(1)["spec"]["digest"] and accepted["observedAt"]
    assert serving == {"servingRevision": 1} and served_later == 1
    assert table.serving.revision == 1


def test_invalid_overlay_reports_message_and_keeps_serving(rig):
    table, make, _ = rig
    kube, status, follower = make()
    follower.observe(overlay_obj(1))
    follower.observe(overlay_obj(2, consumer="other"))
    drain(status)
    assert table.serving.revision == 1
    assert all(p.get("acceptedRevision") != 2 for p, _ in kube.patches)
    assert "rejected overlay revision 2" in kube.patches[-1][0]["message"]


def test_same_content_is_handled_once(rig):
    _, make, _ = rig
    kube, status, follower = make()
    follower.observe(overlay_obj(1))
    drain(status)
    before = len(kube.patches)
    follower.observe(overlay_obj(1))  # a re-list or metadata-only change
    drain(status)
    assert len(kube.patches) == before


def test_failed_accepted_write_is_carried_with_serving(rig):
    table, make, log_stream = rig
    failures = [Unreachable("down"), NotFound("no consumer yet", status=404)]
    kube, status, follower = make(failures=failures, accept_write_timeout=0.01)
    follower.observe(overlay_obj(1))
    drain(status)
    assert table.serving.revision == 1
    first = kube.patches[0][0]
    # Accepted and serving land together: nobody ever sees serving ahead of accepted.
    assert first["acceptedRevision"] == 1 and first["servingRevision"] == 1
    events = [json.loads(line)["msg"] for line in log_stream.getvalue().splitlines()]
    assert "accepted_status_pending" in events and events.count("status_write_failed") == 2


def test_deleted_overlay_keeps_serving_with_message(rig):
    table, make, _ = rig
    kube, status, follower = make()
    follower.observe(overlay_obj(1))
    follower.observe(None)
    drain(status)
    assert table.serving.revision == 1
    assert "still serving revision 1" in kube.patches[-1][0]["message"]


class FakeWatchKube(FakeKube):
    """Scripted list/watch: each watch call plays the next script entry (an exception or events)."""

    def __init__(self, table: RoutingTable, *, lists: list, watches: list, stop: threading.Event) -> None:
        super().__init__(table)
        self.lists = list(lists)
        self.watches = list(watches)
        self.stop = stop
        self.list_calls = 0
        self.watch_calls: list[tuple[str, str | None]] = []

    def list(self, res, namespace, *, label_selector=None, field_selector=None):
        self.list_calls += 1
        step = self.lists.pop(0)
        if isinstance(step, Exception):
            raise step
        return step

    def watch(self, res, namespace, *, resource_version, timeout_seconds=60, field_selector=None):
        self.watch_calls.append((resource_version, field_selector))
        if not self.watches:
            self.stop.set()
            return
        step = self.watches.pop(0)
        if isinstance(step, Exception):
            raise step
        yield from step


def test_run_relists_on_gone_and_after_errors_and_rewatches_from_last_version():
    from agn.kube import Gone

    table, stop = RoutingTable(), threading.Event()
    rev2 = overlay_obj(2)
    rev2["metadata"]["resourceVersion"] = "20"
    other = overlay_obj(9)
    other["metadata"].update(name="someone-else", resourceVersion="21")
    kube = FakeWatchKube(
        table,
        stop=stop,
        lists=[Unreachable("api down"), ([overlay_obj(1)], "10"), ([overlay_obj(1)], "15")],
        watches=[Gone("too old", status=410), [("MODIFIED", rev2), ("ADDED", other)]],
    )
    log = JsonLog(component="gateway", stream=io.StringIO())
    status = StatusWriter(kube, namespace="ns", consumer="c1", log=log)
    writer = threading.Thread(target=status.run, daemon=True)
    writer.start()
    follower = OverlayFollower(kube, namespace="ns", consumer="c1", table=table, status=status, log=log, stop=stop)
    runner = threading.Thread(target=follower.run, daemon=True)
    runner.start()
    runner.join(timeout=10)
    status.close()
    writer.join(timeout=5)
    assert not runner.is_alive()
    assert kube.list_calls == 3  # error -> re-list, Gone -> re-list
    assert kube.watch_calls == [("10", "metadata.name=c1"), ("15", "metadata.name=c1"), ("21", "metadata.name=c1")]
    assert table.serving.revision == 2  # the other object's event was ignored


# -- sharded overlays ---------------------------------------------------------------------------


class ShardKube(FakeKube):
    """Serves RoutingOverlayShard GETs from ``shards`` (by name) and records each name asked for."""

    def __init__(self, table: RoutingTable) -> None:
        super().__init__(table)
        self.shards: dict[str, dict] = {}
        self.gets: list[str] = []
        self.forbidden: set[str] = set()

    def get(self, res, namespace, name, *, timeout=None):
        assert res == SHARDS and namespace == "ns"
        self.gets.append(name)
        if name in self.forbidden:
            raise Forbidden("no", status=403)
        if name not in self.shards:
            raise NotFound("no such shard", status=404)
        return {"metadata": {"name": name}, "spec": self.shards[name]}


def sharded(revision: int, cands: tuple[Candidate, ...]):
    return split(Overlay("net", "c1", revision, overlay_digest(cands), cands), 4)


def cand(i: int, state: str = ADMITTED) -> Candidate:
    return Candidate(f"c-{i:02d}", f"p{i}", f"http://127.0.0.1:1/{i}", "g", 0, state)


@pytest.fixture
def shard_rig(rig):
    table, make, log_stream = rig
    kube, status, follower = make(kube=ShardKube(table), pending_report_after=0.0)
    yield table, kube, status, follower, log_stream


def test_gateway_sharded_index_waits_for_shards_then_fetches_only_changed_ones(shard_rig):
    table, kube, status, follower, log_stream = shard_rig
    cands = tuple(cand(i) for i in range(12))
    one = sharded(1, cands)
    kube.shards.update(one.shards)
    follower.observe({"metadata": {"name": "c1"}, "spec": one.index})
    assert table.serving.revision == 1 and len(table.serving.candidates) == 12
    assert sorted(kube.gets) == sorted(one.shards)

    # Revision 2 drains one candidate: one shard changes. Its index arrives before the shard.
    two = sharded(2, tuple(cand(i, EXISTING_ONLY if i == 3 else ADMITTED) for i in range(12)))
    changed = [n for n in two.shards if two.shards[n]["digest"] != one.shards[n]["digest"]]
    assert len(changed) == 1
    kube.gets.clear()
    follower.observe({"metadata": {"name": "c1"}, "spec": two.index})
    drain(status)
    assert table.serving.revision == 1 and follower.pending_revision == 2
    assert all(p.get("acceptedRevision") != 2 for p, _ in kube.patches)
    assert "waiting for shards" in kube.patches[-1][0]["message"] and changed[0] in kube.patches[-1][0]["message"]
    assert kube.gets == changed  # the others are reused from what is held

    kube.shards.update(two.shards)
    assert follower.retry_pending()
    drain(status)
    assert table.serving.revision == 2 and follower.pending_revision is None
    assert kube.gets == changed * 2
    assert kube.patches[-1][0] == {"servingRevision": 2}
    events = [json.loads(line) for line in log_stream.getvalue().splitlines()]
    assert [e["missing"] for e in events if e["msg"] == "overlay_shards_pending"] == [[]]
    assert [e["mismatched"] for e in events if e["msg"] == "overlay_shards_pending"] == [changed]


def test_gateway_newer_index_supersedes_a_pending_one(shard_rig):
    table, kube, status, follower, _ = shard_rig
    one = sharded(1, (cand(1), cand(2)))
    follower.observe({"metadata": {"name": "c1"}, "spec": one.index})  # no shard written yet
    assert table.serving is None and follower.pending_revision == 1
    two = sharded(2, (cand(1),))
    kube.shards.update(two.shards)
    follower.observe({"metadata": {"name": "c1"}, "spec": two.index})
    assert table.serving.revision == 2 and follower.pending_revision is None
    kube.shards.update(one.shards)
    assert follower.retry_pending()  # nothing pending: revision 1 is never served
    drain(status)
    assert table.serving.revision == 2
    assert all(p.get("acceptedRevision") != 1 for p, _ in kube.patches)


def test_gateway_forbidden_shard_is_reported_and_nothing_accepted(shard_rig):
    table, kube, status, follower, log_stream = shard_rig
    one = sharded(1, (cand(1), cand(2), cand(3)))
    kube.shards.update(one.shards)
    kube.forbidden.add(sorted(one.shards)[0])
    follower.observe({"metadata": {"name": "c1"}, "spec": one.index})
    drain(status)
    assert table.serving is None
    assert "forbidden" in kube.patches[-1][0]["message"] and sorted(one.shards)[0] in kube.patches[-1][0]["message"]
    assert "overlay_shards_forbidden" in log_stream.getvalue()


def test_gateway_index_naming_another_consumers_shard_is_rejected(shard_rig):
    table, kube, status, follower, _ = shard_rig
    one = sharded(1, (cand(1),))
    index = dict(one.index, shards=[dict(e, name="c2-shard-00") for e in one.index["shards"]])
    follower.observe({"metadata": {"name": "c1"}, "spec": index})
    drain(status)
    assert table.serving is None and kube.gets == []
    assert "not a shard of consumer 'c1'" in kube.patches[-1][0]["message"]


# -- per-shard validation: a shard is checked and parsed once, when fetched -----------------------


def index_obj(parts) -> dict:
    return {"metadata": {"name": "c1"}, "spec": parts.index}


def reshard(parts, name: str, candidates: list[dict]) -> None:
    """Give shard ``name`` these candidates with a matching digest, in the shard and its index
    entry — a shard that is self-consistent, whatever else is wrong with it."""
    digest = overlay_digest(Candidate.from_dict(c) for c in candidates)
    parts.shards[name] = dict(parts.shards[name], candidates=candidates, digest=digest)
    for entry in parts.index["shards"]:
        if entry["name"] == name:
            entry.update(digest=digest, candidates=len(candidates))


def serve_first(table, kube, status, follower, count: int = 16):
    """Revision 1 of ``count`` candidates, served; returns its parts."""
    one = sharded(1, tuple(cand(i) for i in range(count)))
    kube.shards.update(one.shards)
    follower.observe(index_obj(one))
    assert table.serving.revision == 1
    return one


def rejected_message(kube, status) -> str:
    drain(status)
    message = kube.patches[-1][0].get("message") or ""
    assert message.startswith("rejected overlay revision 2: "), message
    return message


def assert_still_serving_one(table, kube, follower) -> None:
    assert table.serving.revision == 1 and follower.pending_revision is None
    assert all(p.get("acceptedRevision") != 2 for p, _ in kube.patches)


def holding(parts, provider: str) -> str:
    return next(n for n, s in parts.shards.items() if any(c["provider"] == provider for c in s["candidates"]))


def two_shards(parts) -> tuple[str, str]:
    first, second = sorted(parts.shards)[:2]
    return first, second


def test_gateway_new_index_parses_only_the_changed_shard(shard_rig):
    table, kube, status, follower, _ = shard_rig
    one = serve_first(table, kube, status, follower)
    assert follower.shard_parses == len(one.shards) and len(one.shards) > 1
    cands = [cand(i, EXISTING_ONLY if i == 5 else ADMITTED) for i in range(16)]
    two = sharded(2, tuple(cands))
    changed = [n for n in two.shards if two.shards[n]["digest"] != one.shards[n]["digest"]]
    kube.shards.update(two.shards)
    follower.observe(index_obj(two))
    assert table.serving.revision == 2
    assert follower.shard_parses == len(one.shards) + 1 and len(changed) == 1
    # The joined overlay is the whole one, sorted, with the index's digest.
    assert table.serving == Overlay("net", "c1", 2, two.index["digest"], tuple(sorted(cands)))
    # Back to revision 1's content (an undrain): that shard is parsed once more, the rest reused.
    three = sharded(3, tuple(cand(i) for i in range(16)))
    kube.shards.update(three.shards)
    follower.observe(index_obj(three))
    assert table.serving.revision == 3 and follower.shard_parses == len(one.shards) + 2
    assert [c.admission_state for c in table.serving.candidates] == [ADMITTED] * 16


def test_gateway_bad_candidate_in_one_shard_rejects_the_index_naming_the_shard(shard_rig):
    table, kube, status, follower, log_stream = shard_rig
    one = serve_first(table, kube, status, follower)
    two = sharded(2, tuple(cand(i, EXISTING_ONLY if i == 5 else ADMITTED) for i in range(16)))
    bad = holding(two, "p5")
    (row,) = [i for i, c in enumerate(two.shards[bad]["candidates"]) if c["provider"] == "p5"]
    two.shards[bad]["candidates"][row]["endpoint"] = "not a url"
    kube.shards.update(two.shards)
    follower.observe(index_obj(two))
    message = rejected_message(kube, status)
    assert f"shard {bad}: candidates[{row}].endpoint 'not a url' is not an http(s) URL" in message
    assert_still_serving_one(table, kube, follower)
    rejected = [json.loads(line) for line in log_stream.getvalue().splitlines() if '"overlay_rejected"' in line]
    assert rejected[-1]["revision"] == 2 and bad in rejected[-1]["problems"][0]
    # A corrected revision is taken again (the bad shard is fetched anew, never reused).
    three = sharded(3, tuple(cand(i, EXISTING_ONLY if i == 5 else ADMITTED) for i in range(16)))
    kube.shards.update(three.shards)
    follower.observe(index_obj(three))
    drain(status)
    assert table.serving.revision == 3 and kube.patches[-1][0] == {"servingRevision": 3}
    assert one.index["shards"] != three.index["shards"]


def test_gateway_candidate_placed_in_the_wrong_shard_is_rejected(shard_rig):
    table, kube, status, follower, _ = shard_rig
    one = serve_first(table, kube, status, follower)
    two = sharded(2, tuple(cand(i) for i in range(16)))
    source, target = two_shards(two)
    moved, *rest = two.shards[source]["candidates"]
    reshard(two, source, rest)
    reshard(two, target, sorted([*two.shards[target]["candidates"], moved], key=lambda c: c["id"]))
    kube.shards.update(two.shards)
    follower.observe(index_obj(two))
    message = rejected_message(kube, status)
    src, dst = source[-2:], target[-2:]
    assert f"shard {target}: candidate id {moved['id']!r} belongs in shard {src} of 4, not {dst}" in message
    assert_still_serving_one(table, kube, follower)
    assert one.shards[source]["digest"] != two.shards[source]["digest"]


def test_gateway_shard_whose_digest_is_not_its_candidates_is_rejected(shard_rig):
    table, kube, status, follower, _ = shard_rig
    serve_first(table, kube, status, follower)
    two = sharded(2, tuple(cand(i, EXISTING_ONLY if i == 5 else ADMITTED) for i in range(16)))
    name = holding(two, "p5")  # the changed shard: an unchanged one is reused, never fetched
    two.shards[name]["candidates"][0]["rank"] = 7  # content changed, digest (and index entry) not
    kube.shards.update(two.shards)
    follower.observe(index_obj(two))
    message = rejected_message(kube, status)
    assert f"shard {name}: digest {two.shards[name]['digest']!r} is not the digest of its candidates" in message
    assert_still_serving_one(table, kube, follower)


def test_gateway_provider_in_two_shards_is_rejected(shard_rig):
    table, kube, status, follower, _ = shard_rig
    serve_first(table, kube, status, follower)
    two = sharded(2, tuple(cand(i) for i in range(16)))
    first, second = two_shards(two)
    provider = two.shards[first]["candidates"][0]["provider"]
    reshard(two, second, [dict(two.shards[second]["candidates"][0], provider=provider)])
    kube.shards.update(two.shards)
    follower.observe(index_obj(two))
    message = rejected_message(kube, status)
    assert f"provider {provider!r} is a candidate in more than one shard ({first}, {second})" in message
    assert_still_serving_one(table, kube, follower)


@pytest.mark.parametrize(
    "mutate, problem",
    [
        (lambda i: i.update(shardCount=0), "spec.shardCount 0 must be an integer from 1 to 100"),
        (lambda i: i.update(shardCount=2), "is numbered beyond shardCount 2"),
        (lambda i: i.update(consumer="c2"), "spec.consumer is 'c2', not this consumer 'c1'"),
        (lambda i: i.update(revision=0), "spec.revision 0 must be an integer > 0"),
        (lambda i: i["shards"].append(dict(i["shards"][0])), "is listed twice"),
    ],
)
def test_gateway_bad_index_is_rejected_before_any_shard_get(shard_rig, mutate, problem):
    table, kube, status, follower, _ = shard_rig
    one = sharded(1, tuple(cand(i) for i in range(16)))
    assert max(int(n[-2:]) for n in one.shards) >= 2  # so that a count of 2 leaves one out of range
    kube.shards.update(one.shards)
    mutate(one.index)
    follower.observe(index_obj(one))
    drain(status)
    assert table.serving is None and kube.gets == [] and follower.shard_parses == 0
    assert problem in kube.patches[-1][0]["message"]


class BlockingShardKube(ShardKube):
    """A ShardKube whose shard GETs wait until ``release`` is set (a slow API server)."""

    def __init__(self, table: RoutingTable) -> None:
        super().__init__(table)
        self.release = threading.Event()
        self.waiting = threading.Event()

    def get(self, res, namespace, name, *, timeout=None):
        self.waiting.set()
        assert self.release.wait(10)
        return super().get(res, namespace, name, timeout=timeout)


def test_gateway_a_slow_try_is_not_doubled_by_the_retry(rig):
    """Under load one try at an index (a GET per changed shard) can outlast the retry thread's
    first backoff; a retry meanwhile must not read the same shards a second time."""
    table, make, _ = rig
    kube, status, follower = make(kube=BlockingShardKube(rig[0]), pending_report_after=60.0)
    one = sharded(1, tuple(cand(i) for i in range(12)))
    kube.shards.update(one.shards)
    watch = threading.Thread(target=follower.observe, args=({"metadata": {"name": "c1"}, "spec": one.index},))
    watch.start()
    assert kube.waiting.wait(5)  # the watch thread's try is inside its first GET
    assert follower.retry_pending() is False  # busy: nothing read, not done
    kube.release.set()
    watch.join(timeout=10)
    assert table.serving.revision == 1
    assert sorted(kube.gets) == sorted(one.shards)  # each shard read once
    assert follower.retry_pending() is True  # nothing pending any more
