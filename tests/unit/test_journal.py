"""The drain journal as a write-ahead log: records, replay, torn tails, legacy files, cost."""

from __future__ import annotations

import errno
import json
import os
import time
from pathlib import Path

import pytest

from xtask.drain.core.changes import plan_changes
from xtask.drain.core.holds import OPERATION
from xtask.drain.core.states import IdleWaitState, RestoreOutcome, RunState, WaitState
from xtask.drain.edges import journal as journal_module
from xtask.drain.edges import journal_staging
from xtask.drain.edges.journal import Journal, JournalError, JournalHeader, read_journal, replay


def provider(name: str, *, gen: int = 3, rv: str = "10", drain=None) -> dict:
    spec = {"endpoint": "http://127.0.0.1/x"}
    if drain is not None:
        spec["trafficPolicy"] = {"drain": drain}
    return {
        "metadata": {"name": name, "generation": gen, "resourceVersion": rv, "annotations": {OPERATION: "older"}},
        "spec": spec,
    }


def new_journal(tmp_path: Path, names=("a", "b", "c")) -> Journal:
    changes = plan_changes([provider(n) for n in names], requested=True)
    return Journal.create(
        JournalHeader(
            operation="op-1", context="ctx", namespace="ns", requested=True, changes=changes, reason="rack move"
        ),
        folder=tmp_path,
    )


def test_replay_follows_intent_done_failed_and_restore(tmp_path):
    j = new_journal(tmp_path)
    changes = {c.provider: c for c in plan_changes([provider(n) for n in "abc"], requested=True)}
    j.intents([changes["a"], changes["b"], changes["c"]])
    j.done("a", generation=4)
    j.failed("b", status=422)  # refused by the API server: did not land
    # c: intent only (the process died before the answer was recorded)
    j.set_state("restoring")
    j.restored("a", "restored")
    j.close()
    state = read_journal(j.path)
    assert state.operation == "op-1" and state.namespace == "ns" and state.reason == "rack move"
    assert {n: e.write for n, e in state.entries.items()} == {"a": "written", "b": "failed", "c": "intended"}
    assert state.state == "restoring"
    # a is settled; b never landed; c may have landed: its expected generation is the plan's + 1.
    assert [(c.provider, gen) for c, gen in state.to_restore()] == [("c", 4)]


@pytest.mark.parametrize(
    "ending, line",
    [
        (WaitState.CONVERGED, "complete"),
        (WaitState.NOT_ELIGIBLE, "complete"),
        (WaitState.TIMEOUT, "applied-timeout"),
        (WaitState.INTERRUPTED, "applied-interrupted"),
        (WaitState.UNREACHABLE, "applied-unreachable"),
        (IdleWaitState.IDLE, "complete"),
        (IdleWaitState.TIMEOUT, "applied-idle-timeout"),
        (IdleWaitState.INTERRUPTED, "applied-idle-interrupted"),
    ],
)
def test_the_journal_says_how_a_wait_ended(tmp_path, ending, line):
    j = new_journal(tmp_path)
    after = RunState.after_wait if isinstance(ending, WaitState) else RunState.after_idle_wait
    j.set_state(after(ending))
    j.close()
    assert json.loads(j.path.read_text().splitlines()[-1])["state"] == line
    assert read_journal(j.path).state == line


@pytest.mark.parametrize(
    "outcomes, line",
    [
        ([RestoreOutcome.RESTORED, RestoreOutcome.ALREADY], "restored"),
        ([], "restored"),
        ([RestoreOutcome.RESTORED, RestoreOutcome.OTHER_WRITER], "needs-inspection"),
        ([RestoreOutcome.GONE], "needs-inspection"),
        ([RestoreOutcome.FAILED], "needs-inspection"),
    ],
)
def test_a_restoration_is_restored_only_when_every_provider_is(tmp_path, outcomes, line):
    j = new_journal(tmp_path)
    j.set_state(RunState.after_restoring(outcomes))
    j.close()
    assert read_journal(j.path).state == line


def test_a_failure_without_an_answer_may_have_landed(tmp_path):
    j = new_journal(tmp_path, names=("a",))
    (change,) = plan_changes([provider("a")], requested=True)
    j.intents([change])
    j.failed("a", status=0)  # connection dropped: the PATCH may have been applied
    assert [c.provider for c, _ in j.to_restore()] == ["a"]


def test_a_replanned_intent_replaces_the_previous_value(tmp_path):
    j = new_journal(tmp_path, names=("a",))
    (replanned,) = plan_changes([provider("a", gen=7, rv="99", drain=False)], requested=True)
    j.intents([replanned], replanned=True)
    j.done("a", generation=8)
    (entry,) = read_journal(j.path).entries.values()
    assert entry.change.previous is False and entry.change.resource_version == "99" and entry.expected_generation == 8


def test_every_record_is_one_appended_line(tmp_path):
    j = new_journal(tmp_path)
    before = j.path.read_bytes()
    (change,) = plan_changes([provider("a")], requested=True)
    j.intents([change])
    after = j.path.read_bytes()
    assert after.startswith(before) and after[len(before) :].count(b"\n") == 1
    assert [json.loads(line)["type"] for line in after.decode().splitlines()] == ["header", "intent"]


def test_journal_size_is_linear_in_the_number_of_providers(tmp_path):
    sizes = {}
    for n in (100, 1000):
        names = [f"provider-{i:05d}" for i in range(n)]
        changes = plan_changes([provider(x) for x in names], requested=True)
        j = Journal.create(
            JournalHeader(
                operation=f"op-{n}", context="ctx", namespace="ns", requested=True, changes=changes, reason=None
            ),
            folder=tmp_path,
        )
        for start in range(0, n, 8):
            j.intents(changes[start : start + 8])
            for c in changes[start : start + 8]:
                j.done(c.provider, generation=4)
        j.set_state("complete")
        j.close()
        sizes[n] = j.path.stat().st_size
        assert j.bytes_written == sizes[n]
    assert sizes[1000] < 1024 * 1024
    assert 9 <= sizes[1000] / sizes[100] <= 11


def test_a_torn_last_line_is_ignored_and_dropped_before_appending(tmp_path):
    j = new_journal(tmp_path, names=("a", "b"))
    changes = plan_changes([provider("a"), provider("b")], requested=True)
    j.intents(changes)
    j.done("a", generation=4)
    j.close()
    with j.path.open("ab") as f:
        f.write(b'{"type":"done","provider":"b","gen')  # the host died mid-append
    state = read_journal(j.path)
    assert state.torn_tail and state.entries["b"].write == "intended"
    reopened = Journal.open(j.path)
    reopened.restored("b", "restored")
    reopened.close()
    lines = j.path.read_text().splitlines()
    assert all(json.loads(line) for line in lines)  # no torn record left in the middle
    assert read_journal(j.path).entries["b"].restored == "restored"


def test_a_bad_line_in_the_middle_is_an_error_naming_the_line(tmp_path):
    j = new_journal(tmp_path, names=("a",))
    j.close()
    with j.path.open("a") as f:
        f.write("not json\n")
        f.write('{"type":"state","state":"complete"}\n')
    with pytest.raises(JournalError, match=r"line 2"):
        read_journal(j.path)


@pytest.mark.parametrize(
    "text,message",
    [
        ("[]", "expected JSON lines"),
        ("{}", "expected JSON lines starting with a header object"),
        ('{"request": "drain", "providers": []}', "starting with a header object"),  # the old format is refused
        (
            '{"type":"header","format":"agn.dev/drain-journal/v2","operation":"o","namespace":"ns","request":"drain",'
            '"plan":[{"provider":"a","previous":"yes"}]}\n',
            "previous",
        ),
        ("", "no complete header"),
        (
            '{"type":"header","format":"agn.dev/drain-journal/v2","operation":"o","namespace":"ns","request":"sideways","plan":[]}\n',
            "request",
        ),
        (
            '{"type":"header","format":"agn.dev/drain-journal/v2","operation":"o","namespace":"ns","request":"drain","plan":[]}\n'
            '{"type":"done","provider":"ghost","generation":2}\n',
            "not in the plan",
        ),
    ],
)
def test_json_that_is_not_a_journal_is_refused_with_the_file_named(tmp_path, text, message):
    path = tmp_path / "drain-x.jsonl"
    path.write_text(text)
    with pytest.raises(JournalError, match=message) as info:
        read_journal(path)
    assert str(path) in str(info.value)


def test_a_single_object_json_journal_is_refused_and_left_as_it_is(tmp_path):
    legacy = {
        "operation": "20261201T000000Z-abcdef",
        "context": "local-example",
        "namespace": "agn-example",
        "request": "drain",
        "reason": None,
        "state": "applying",
        "startedAt": "2026-12-01T00:00:00+00:00",
        "providers": {
            "p1": {
                "previous": None,
                "previousAnnotations": {},
                "resourceVersion": "5",
                "generation": 1,
                "written": True,
                "writtenGeneration": 2,
                "restored": None,
            },
            "p2": {
                "previous": None,
                "previousAnnotations": {},
                "resourceVersion": "6",
                "generation": 1,
                "written": False,
                "writtenGeneration": None,
                "restored": None,
            },
        },
    }
    path = tmp_path / "drain-20261201T000000Z-abcdef.json"
    path.write_text(json.dumps(legacy, indent=2))
    before = path.read_bytes()
    with pytest.raises(JournalError, match="not a drain journal: expected JSON lines starting with a header"):
        Journal.open(path)
    assert path.read_bytes() == before  # refused, never rewritten


def test_replay_of_text_is_the_same_as_of_the_file(tmp_path):
    j = new_journal(tmp_path, names=("a",))
    j.set_state("complete")
    j.close()
    assert replay(j.path.read_text(), source="x").to_dict() == read_journal(j.path).to_dict()


def test_a_journal_appears_under_its_name_only_with_its_header_on_disk(tmp_path, monkeypatch):
    # A reader listing drain-*.jsonl while a run starts must never find a journal without its
    # header (an empty file before the header's write used to be one).
    seen_during_write: list[list[str]] = []
    write_line = Journal._write_line

    def watched(self, rec):
        seen_during_write.append(sorted(p.name for p in tmp_path.glob("drain-*.jsonl")))
        write_line(self, rec)

    monkeypatch.setattr(Journal, "_write_line", watched)
    j = new_journal(tmp_path)
    assert seen_during_write == [[]]  # the header was written before the name existed
    assert [p.name for p in tmp_path.iterdir()] == [j.path.name]  # nothing staged is left
    assert json.loads(j.path.read_text().splitlines()[0])["type"] == "header"
    read_journal(j.path)  # a whole journal, as any reader replays it
    assert j.path.stat().st_mode & 0o777 == 0o600
    j.set_state("complete")  # still appended to through the descriptor the header was written with
    j.close()
    assert json.loads(j.path.read_text().splitlines()[-1])["state"] == "complete"


def test_a_second_journal_of_the_same_operation_is_refused_and_the_first_kept(tmp_path):
    first = new_journal(tmp_path)
    first.close()
    before = first.path.read_bytes()
    with pytest.raises(JournalError, match="cannot create the drain journal"):
        new_journal(tmp_path)
    assert first.path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [first.path.name]


@pytest.mark.parametrize("answer", [errno.EPERM, errno.ENOTSUP, errno.EXDEV, errno.ENOSYS])
def test_a_filesystem_without_hard_links_gets_the_journal_created_exclusively(tmp_path, monkeypatch, answer):
    # vfat, some network and FUSE mounts answer link(2) with one of these: every drain failed.
    tried: list[tuple] = []

    def no_links(src, dst, *args, **kwargs):
        tried.append((Path(src).name, Path(dst).name))
        raise OSError(answer, os.strerror(answer))

    monkeypatch.setattr(journal_module.os, "link", no_links)
    j = new_journal(tmp_path)
    assert tried and tried[0][1] == j.path.name  # the link was tried first, and refused
    assert [p.name for p in tmp_path.iterdir()] == [j.path.name]  # the hidden file is gone
    assert read_journal(j.path).operation == "op-1"  # a whole journal, header first
    assert j.path.stat().st_mode & 0o777 == 0o600
    j.set_state("complete")  # appended through the descriptor of the journal's own name
    j.close()
    assert json.loads(j.path.read_text().splitlines()[-1])["state"] == "complete"
    before = j.path.read_bytes()
    with pytest.raises(JournalError, match="cannot create the drain journal in .*: File exists"):
        new_journal(tmp_path)  # a second create of the same operation is still refused
    assert j.path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == [j.path.name]


def test_a_link_refused_for_another_reason_is_the_one_error_and_leaves_nothing(tmp_path, monkeypatch):
    def no_space(src, dst, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(journal_module.os, "link", no_space)
    with pytest.raises(JournalError, match="cannot create the drain journal in .*: No space left on device"):
        new_journal(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_the_staging_file_names_its_writer_and_a_dead_writers_is_removed_by_the_next_run(tmp_path, monkeypatch):
    # A run killed while creating its journal leaves its staging file; the next one removes it
    # when its writer is gone and says so, and leaves a live writer's alone without a word.
    monkeypatch.setattr(journal_staging, "_boot_prefix", lambda: "0123abcd")
    monkeypatch.setattr(journal_staging, "own_start_ticks", lambda: 4242)
    staged = journal_staging.staged_path(tmp_path / "drain-op-1.jsonl")
    assert staged.name == f".drain-op-1.0123abcd-{os.getpid()}-4242.jsonl.new"
    dead = tmp_path / ".drain-op-0.0123abcd-999999-17.jsonl.new"
    dead.write_text('{"type":"hea')
    live = tmp_path / ".drain-op-9.0123abcd-4321-99.jsonl.new"
    live.write_text("")
    monkeypatch.setattr(journal_staging, "pid_running", lambda pid, ticks: (pid, ticks) == (4321, 99))
    j = new_journal(tmp_path)
    assert j.leftovers == [
        f"removed the stale staging file {dead}: its writer (pid 999999) is no longer running: "
        "it was stopped while creating its journal"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([j.path.name, live.name])


def test_a_staging_file_of_another_host_is_listed_until_it_is_an_hour_old(tmp_path, monkeypatch):
    monkeypatch.setattr(journal_staging, "_boot_prefix", lambda: "0123abcd")
    other = tmp_path / ".drain-op-0.fedc9876-12-34.jsonl.new"  # another boot id: its pid says nothing here
    older = tmp_path / ".drain-op-5.jsonl.new"  # an older xtask's: no writer named
    for path in (other, older):
        path.write_text("")
    hour_ago = time.time() - journal_staging.STALE_SECONDS - 5
    os.utime(older, (hour_ago, hour_ago))
    said = journal_staging.sweep_leftovers(tmp_path)
    assert said == [
        f"left {other} in place: a staging file written on another host or before a reboot, 0s old; "
        "a run removes it once it is an hour old",
        f"removed the stale staging file {older}: it is 60 minutes old; creating a journal takes milliseconds",
    ]
    assert [p.name for p in tmp_path.iterdir()] == [other.name]


def test_a_staging_file_is_judged_by_its_writer_then_by_its_age():
    left = journal_staging.parse_leftover(".drain-20261207T085200Z-abc123.0123abcd-77-88.jsonl.new", 10.0)
    assert (left.boot, left.pid, left.ticks) == ("0123abcd", 77, 88)
    alive = journal_staging.leftover_verdict(left, boot="0123abcd", running=lambda pid, ticks: True)
    assert alive == (False, "")
    assert journal_staging.leftover_verdict(left, boot="0123abcd", running=lambda pid, ticks: False)[0] is True
    assert journal_staging.leftover_verdict(left, boot=None, running=lambda pid, ticks: False)[0] is False
    unnamed = journal_staging.parse_leftover(".drain-20261207T085200Z-abc123.jsonl.new", 3600.0)
    assert unnamed.pid is None
    assert journal_staging.leftover_verdict(unnamed, boot="0123abcd", running=lambda pid, ticks: False)[0] is True
