"""``provider-drain --undrain --slow-start``: the request's checks, the patches (an undrain writes
the window, a drain clears it), their restoration and the journal that records them."""

from __future__ import annotations

import pytest

from xtask.drain.core.changes import drain_patch, plan_change, replan, restore_patch
from xtask.drain.core.plandoc import PLANNED_FLAGS
from xtask.drain.core.request import DrainRequest
from xtask.drain.core.selection import Selector
from xtask.drain.edges.journal import Journal, JournalHeader, read_journal
from xtask.errors import UsageError

WINDOW = {"startTime": "2024-05-01T10:00:00Z", "durationSeconds": 60}
NOW = "2024-05-01T12:00:00Z"


def prov(*, drain: bool | None, window: dict | None = None, rv: str = "7") -> dict:
    policy: dict = {} if drain is None else {"drain": drain}
    if window is not None:
        policy["slowStart"] = window
    return {
        "metadata": {"name": "p", "generation": 3, "resourceVersion": rv, "annotations": {}},
        "spec": {"endpoint": "http://127.0.0.1/p", "trafficPolicy": policy},
    }


def patch(change) -> dict:
    return drain_patch(change, operation="op-1", actor="me@h", at=NOW, reason=None, now=NOW)


def test_request_takes_slow_start_only_with_undrain_and_in_range():
    sel = Selector(provider="p")
    assert DrainRequest(selector=sel, drain=False, slow_start=60).slow_start == 60
    with pytest.raises(UsageError, match="--slow-start ramps the share of providers an undrain returns"):
        DrainRequest(selector=sel, drain=True, slow_start=60)
    for bad in (0, 3601):
        with pytest.raises(UsageError, match=f"--slow-start {bad} must be between 1 and 3600 seconds"):
            DrainRequest(selector=sel, drain=False, slow_start=bad)


def test_undrain_writes_the_window_with_the_flag_at_the_server_time_of_the_write():
    change = plan_change(prov(drain=True), requested=False, slow_start=60)
    body = patch(change)
    assert body["spec"] == {"trafficPolicy": {"drain": False, "slowStart": {"startTime": NOW, "durationSeconds": 60}}}
    assert body["metadata"]["resourceVersion"] == "7"
    with pytest.raises(ValueError, match="server's time"):
        drain_patch(change, operation="op-1", actor="me@h", at=NOW, reason=None)


def test_undrain_of_a_serving_provider_writes_nothing_and_plain_undrain_leaves_the_window():
    already = plan_change(prov(drain=False, window=WINDOW), requested=False, slow_start=60)
    assert already.already and "spec" not in patch(already)  # it has its full share: no window
    plain = plan_change(prov(drain=True), requested=False)
    assert patch(plain)["spec"] == {"trafficPolicy": {"drain": False}}


def test_drain_cancels_a_window_and_restoring_it_puts_the_window_back():
    change = plan_change(prov(drain=False, window=WINDOW), requested=True, slow_start=None)
    assert patch(change)["spec"] == {"trafficPolicy": {"drain": True, "slowStart": None}}
    back = restore_patch(change, resource_version="9")
    assert back["spec"] == {"trafficPolicy": {"drain": False, "slowStart": WINDOW}}
    plain = plan_change(prov(drain=None), requested=True)
    assert patch(plain)["spec"] == {"trafficPolicy": {"drain": True}}  # nothing to cancel


def test_restoring_a_slow_start_undrain_removes_the_window_it_wrote():
    change = plan_change(prov(drain=True), requested=False, slow_start=60)
    assert restore_patch(change, resource_version="9")["spec"] == {"trafficPolicy": {"drain": True, "slowStart": None}}


def test_a_replan_after_a_conflict_keeps_the_window():
    change = plan_change(prov(drain=True), requested=False, slow_start=90)
    again = replan(change, prov(drain=True, rv="8"))
    assert again.slow_start == 90 and again.resource_version == "8"


def test_journal_records_the_window_and_the_one_it_replaced(tmp_path):
    changes = [
        plan_change(prov(drain=True), requested=False, slow_start=60),
        plan_change(
            prov(drain=True, window=WINDOW) | {"metadata": {"name": "q", "resourceVersion": "2"}}, requested=False
        ),
    ]
    journal = Journal.create(
        JournalHeader(operation="op-1", context="ctx", namespace="ns", requested=False, changes=changes, reason=None),
        folder=tmp_path,
    )
    journal.intents(changes)
    journal.close()
    state = read_journal(journal.path)
    assert [state.entries[c.provider].change for c in changes] == changes
    assert state.entries["q"].change.previous_slow_start == WINDOW


def test_a_plan_fixes_the_slow_start():
    flag = next(f for f in PLANNED_FLAGS if f.key == "slow_start")
    assert flag.flag == "--slow-start" and flag.unset is None
    assert flag.from_spec({"operation": {"request": "undrain", "slowStartSeconds": 60}}) == 60
    assert flag.from_spec({"operation": {"request": "undrain"}}) is None  # plans made before it
