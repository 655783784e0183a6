"""provider-drain's sessions that end on purpose, offline: the quiet judgement of ``--wait-sessions``
(``xtask.drain.core.sessions``), the deadline in the drain's patch, its restoration and journal,
the flags' usage errors, and exit 11."""

from __future__ import annotations

import dataclasses

import pytest

from agn.model import rfc3339
from xtask.drain.core.changes import drain_patch, plan_change, restore_patch
from xtask.drain.core.journal_fields import change_from, plan_item
from xtask.drain.core.request import DrainRequest
from xtask.drain.core.selection import Selector
from xtask.drain.core.sessions import QUIET, TALKING, UNKNOWN, all_quiet, describe_not_quiet, judge
from xtask.drain.core.states import IdleWaitState
from xtask.drain.report import Report, exit_code
from xtask.errors import EXIT_CODE_MEANINGS, ExitCode, UsageError

NOW = 1_700_000_100.0


def consumer(*, serving: int = 3, revision: int = 3, providers: list[dict] | None = None, **extra) -> dict:
    report = {
        "revision": revision,
        "since": rfc3339(NOW - 100),
        "intervalSeconds": 1.0,
        "ttlSeconds": 600.0,
        "providers": providers or [],
        **extra,
    }
    return {"metadata": {"name": "c-a"}, "status": {"servingRevision": serving, "sessions": report}}


def line(provider: str, sessions: int, ago: float | None, rehomed: int = 0) -> dict:
    out = {"provider": provider, "sessions": sessions, "rehomed": rehomed}
    if ago is not None:
        out["lastTurn"] = rfc3339(NOW - ago)
    return out


@pytest.mark.parametrize(
    ("ago", "state"),
    [(4.0, TALKING), (5.0, TALKING), (6.0, QUIET), (30.0, QUIET)],  # QUIET 5 + the interval 1 (whole seconds)
)
def test_a_last_turn_is_quiet_after_quiet_plus_the_report_interval(ago, state):
    (v,) = judge("c-a", consumer(providers=[line("p1", 5, ago)]), ["p1"], quiet=5, now=NOW)
    assert v.state == state and v.sessions == 5


def test_a_provider_not_listed_counts_from_since():
    obj = consumer()
    assert judge("c-a", obj, ["p1"], quiet=5, now=NOW)[0].state == QUIET  # no turn in 100 s
    assert judge("c-a", obj, ["p1"], quiet=200, now=NOW)[0].state == TALKING  # reporting for less than QUIET


@pytest.mark.parametrize(
    ("obj", "why"),
    [
        (None, "consumer not found"),
        ({"metadata": {"name": "c-a"}, "status": {"servingRevision": 3}}, "has not reported sessions"),
        (consumer(serving=4, revision=3), "report is for revision 3, it serves 4"),
        (consumer(omitted=7), "not listed (7 providers omitted)"),
    ],
)
def test_absent_or_stale_reports_are_unknown_never_quiet(obj, why):
    (v,) = judge("c-a", obj, ["p1"], quiet=1, now=NOW + 10_000)
    assert v.state == UNKNOWN and why in v.why
    assert not all_quiet([v])


def test_not_quiet_lines_name_providers_and_their_sessions():
    verdicts = [
        *judge("c-a", consumer(providers=[line("p1", 3, 1)]), ["p1", "p2"], quiet=5, now=NOW),
        *judge("c-b", consumer(providers=[line("p1", 2, 2)]), ["p1", "p2"], quiet=5, now=NOW),
    ]
    lines = describe_not_quiet(verdicts)
    assert len(lines) == 1 and lines[0].startswith("p1: 5 session(s) (c-a: talking, 3 session(s), last turn 1.0s")
    assert not all_quiet(verdicts) and not all_quiet([])


def test_exit_11_is_documented():
    assert int(ExitCode.SESSIONS_ACTIVE) == 11 and ExitCode.SESSIONS_ACTIVE.label == "sessions-active"
    assert EXIT_CODE_MEANINGS[ExitCode.SESSIONS_ACTIVE].startswith("--wait-sessions")

    def sessions_exit(state: IdleWaitState) -> ExitCode:
        interrupted = "SIGINT" if state is IdleWaitState.INTERRUPTED else None
        converged = {"state": "converged"}
        report = Report(None, "ns", "drain", "provider p", False, convergence=converged, sessions={"state": state})
        return exit_code(dataclasses.replace(report, interrupted=interrupted))

    assert sessions_exit(IdleWaitState.TIMEOUT) is ExitCode.SESSIONS_ACTIVE
    assert sessions_exit(IdleWaitState.IDLE) is ExitCode.OK
    assert sessions_exit(IdleWaitState.INTERRUPTED) is ExitCode.INTERRUPTED


# -- the deadline in the drain's patch ----------------------------------------------------------------


def provider(*, drain: bool | None, deadline: str | None = None) -> dict:
    policy: dict = {} if drain is None else {"drain": drain}
    if deadline is not None:
        policy["sessionDeadline"] = deadline
    return {
        "metadata": {"name": "p1", "resourceVersion": "7", "generation": 2, "annotations": {}},
        "spec": {"trafficPolicy": policy},
    }


def patch(change, now: str | None = "2026-12-06T10:00:00Z") -> dict:
    return drain_patch(change, operation="op", actor="me", at="2026-12-06T10:00:00Z", reason=None, now=now)


def test_a_drain_writes_the_deadline_at_the_servers_time_plus_the_duration():
    change = plan_change(provider(drain=False), requested=True, session_deadline=90)
    policy = patch(change)["spec"]["trafficPolicy"]
    assert policy == {"drain": True, "sessionDeadline": "2026-12-06T10:01:30Z"}
    with pytest.raises(ValueError, match="server's time"):
        patch(change, now=None)
    assert restore_patch(change, resource_version="8")["spec"]["trafficPolicy"] == {
        "drain": False,
        "sessionDeadline": None,
    }


@pytest.mark.parametrize(("drain", "requested"), [(True, False), (False, True)])
def test_any_other_flag_change_clears_an_old_deadline_and_restoring_puts_it_back(drain, requested):
    old = "2026-01-01T00:00:00Z"
    change = plan_change(provider(drain=drain, deadline=old), requested=requested)
    assert patch(change)["spec"]["trafficPolicy"]["sessionDeadline"] is None
    assert restore_patch(change, resource_version="8")["spec"]["trafficPolicy"]["sessionDeadline"] == old


def test_an_undrain_plans_no_deadline_and_the_journal_keeps_it():
    assert plan_change(provider(drain=True), requested=False, session_deadline=60).session_deadline is None
    change = plan_change(provider(drain=False, deadline="2026-01-01T00:00:00Z"), requested=True, session_deadline=60)
    item = plan_item(change)
    assert item["sessionDeadline"] == 60 and item["previousSessionDeadline"] == "2026-01-01T00:00:00Z"
    back = change_from("p1", True, item)
    assert (back.session_deadline, back.previous_session_deadline) == (60, "2026-01-01T00:00:00Z")


# -- usage errors ---------------------------------------------------------------------------------------

TARGETS = {"network": "net", "consumers": ("c-a",)}


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"drain": False, "session_deadline": 10}, "--session-deadline moves the sessions"),
        ({"drain": True, "session_deadline": 100_000}, "--session-deadline 100000 must be between 1 and 86400"),
        ({"drain": False, "wait_sessions": 5.0, **TARGETS}, "--wait-sessions waits for drained providers'"),
        ({"drain": True, "wait_sessions": 5.0}, "--wait-sessions reads the consumers' session reports"),
        ({"drain": True, "sessions_timeout": 5.0, **TARGETS}, "--sessions-timeout bounds the wait"),
    ],
)
def test_session_flags_that_make_no_sense_are_usage_errors(kw, message):
    with pytest.raises(UsageError, match=message):
        DrainRequest(selector=Selector(provider="p1"), **kw)
