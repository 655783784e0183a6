"""A re-run by a holder updates its hold, the pure part: what changes, the patch that writes only
the hold, the note and Event text, the restoration that puts the earlier hold back (also from the
journal), and the report's fields against its schema."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from jsonschema import Draft202012Validator

from tests.reportschema import validator
from xtask.drain.core.changes import (
    AT,
    BY,
    OPERATION,
    REASON,
    RestoreDecision,
    change_note,
    drain_patch,
    plan_change,
    replan,
    restore_decision,
    restore_patch,
)
from xtask.drain.core.holds import HoldAsk, describe_update, hold_key, hold_value, owner_key, updated_hold
from xtask.drain.core.progress import Planned
from xtask.drain.core.states import Outcome, WriteOutcome
from xtask.drain.edges.journal import Journal, JournalHeader, read_journal

T0 = dt.datetime(2026, 12, 4, 10, 0, 0, tzinfo=dt.UTC)
ANN = "ann"
KEY = hold_key(ANN)


def first_hold(**kw) -> str:
    fields = {"holder": "ann@a", "reason": "kernel", "ticket": "CHG-1", "since": T0, "expires_in": 3600}
    return hold_value(**{**fields, **kw}, operation="op-1")


def held(value: str | None = None, *, drain: bool = True, rv: str = "7") -> dict:
    return {
        "metadata": {
            "name": "p",
            "generation": 4,
            "resourceVersion": rv,
            "annotations": {KEY: value or first_hold(), owner_key(KEY): ANN, REASON: "kernel", OPERATION: "op-1"},
        },
        "spec": {"endpoint": "http://127.0.0.1/x", "trafficPolicy": {"drain": drain}},
    }


def rerun(obj: dict, **ask) -> object:
    return plan_change(obj, requested=True, hold_key=KEY, hold_ask=HoldAsk(operation="op-2", **ask))


class TestWhatChanges:
    def test_only_the_given_fields_change_and_since_stays(self):
        value, changes = updated_hold(first_hold(budget_override="rack"), HoldAsk("op-2", reason="rack move"))
        assert [c.to_dict() for c in changes] == [{"field": "reason", "from": "kernel", "to": "rack move"}]
        assert json.loads(value) == {
            "holder": "ann@a",
            "reason": "rack move",
            "ticket": "CHG-1",
            "since": "2026-12-04T10:00:00Z",
            "expiresAt": "2026-12-04T11:00:00Z",
            "operation": "op-2",  # the restoration of this run knows the hold by it
            "budgetOverride": "rack",
        }

    def test_every_updatable_field_in_the_order_told(self):
        ask = HoldAsk("op-2", holder="ann on call", reason="r2", ticket="CHG-2", expires_at="2026-12-04T12:00:00Z")
        _, changes = updated_hold(first_hold(ticket=None), ask)
        assert describe_update(changes) == (
            "updated hold: reason 'kernel' -> 'r2', holder 'ann@a' -> 'ann on call', ticket none -> 'CHG-2', "
            "expiresAt '2026-12-04T11:00:00Z' -> '2026-12-04T12:00:00Z'"
        )

    @pytest.mark.parametrize(
        "ask", [HoldAsk("op-2"), HoldAsk("op-2", reason="kernel", ticket="CHG-1", expires_at="2026-12-04T11:00:00Z")]
    )
    def test_the_same_values_or_none_given_change_nothing(self, ask):
        assert updated_hold(first_hold(), ask) is None

    def test_an_unreadable_hold_is_left_as_it_is(self):
        assert updated_hold("{not json", HoldAsk("op-2", reason="r2")) is None


class TestTheRerun:
    def test_an_update_writes_only_the_hold_conditionally(self):
        c = rerun(held(), reason="rack move")
        assert not c.already and not c.flag_changes and c.hold_writes == {KEY: True}
        assert change_note(c) == "updated hold: reason 'kernel' -> 'rack move'"
        assert change_note(c, planned=True) == "will update hold: reason 'kernel' -> 'rack move'"
        patch = drain_patch(c, operation="op-2", actor="ann@a", at="t", reason="rack move", hold="NEW", owner=ANN)
        assert patch == {
            "metadata": {"resourceVersion": "7", "annotations": {KEY: c.hold_text, owner_key(KEY): ANN}},
        }  # no spec, no agn.dev/drain-* annotations: the drain itself is not touched
        assert json.loads(patch["metadata"]["annotations"][KEY])["reason"] == "rack move"

    def test_a_rerun_with_the_same_values_writes_nothing_and_says_so(self):
        c = rerun(held(), reason="kernel", ticket="CHG-1")
        assert c.already and c.hold_writes == {} and c.hold_update == ()
        assert change_note(c) == "already drained and your hold already says this: nothing to update"

    def test_a_hold_on_a_provider_no_longer_drained_is_written_afresh(self):
        c = rerun(held(drain=False), reason="r2")
        assert c.flag_changes and c.hold_writes == {KEY: True} and c.hold_text is None and c.hold_update == ()
        assert change_note(c) is None

    def test_an_undrain_asks_nothing_of_the_hold(self):
        c = plan_change(held(), requested=False, hold_key=KEY, hold_ask=HoldAsk("op-2", reason="r2"))
        assert c.hold_writes == {KEY: False} and c.hold_update == () and c.hold_ask is None

    def test_a_replan_after_a_409_asks_the_same(self):
        c = rerun(held(), reason="r2")
        again = replan(c, held(first_hold(reason="r3"), rv="9"))
        assert again.resource_version == "9"
        assert [u.to_dict() for u in again.hold_update] == [{"field": "reason", "from": "r3", "to": "r2"}]


class TestRestoringAnUpdate:
    def after_write(self, c) -> dict:
        return held(c.hold_text, rv="8")

    def test_restore_puts_back_the_earlier_hold_not_removes_it(self):
        c = rerun(held(), reason="rack move", ticket="CHG-2")
        now = self.after_write(c)
        decision = restore_decision(c, operation="op-2", written_generation=4, current=now)
        assert decision is RestoreDecision.RESTORE_HOLDS
        patch = restore_patch(c, resource_version="8", flag=False)
        assert patch == {"metadata": {"resourceVersion": "8", "annotations": {KEY: first_hold(), owner_key(KEY): ANN}}}

    def test_a_write_that_never_landed_is_already_restored(self):
        c = rerun(held(), reason="rack move")
        assert restore_decision(c, operation="op-2", written_generation=4, current=held()) is RestoreDecision.ALREADY

    def test_a_hold_updated_again_by_another_run_is_not_put_back(self):
        c = rerun(held(), reason="rack move")
        later = held(first_hold(reason="third"))
        later["metadata"]["annotations"][KEY] = updated_hold(first_hold(), HoldAsk("op-3", reason="third"))[0]
        assert restore_decision(c, operation="op-2", written_generation=4, current=later) is (
            RestoreDecision.OTHER_WRITER
        )

    def test_the_journal_keeps_the_earlier_hold_for_drain_restore(self, tmp_path):
        c = rerun(held(), reason="rack move")
        journal = Journal.create(
            JournalHeader(operation="op-2", context="ctx", namespace="ns", requested=True, changes=[c], reason="x"),
            folder=tmp_path,
        )
        journal.intents([c])
        journal.close()
        ((replayed, _),) = read_journal(journal.path).to_restore()
        assert replayed.previous_annotations[KEY] == first_hold()
        patch = restore_patch(replayed, resource_version="8", flag=False)
        assert json.loads(patch["metadata"]["annotations"][KEY])["reason"] == "kernel"
        assert {REASON, BY, AT, OPERATION}.isdisjoint(patch["metadata"]["annotations"])


def test_the_report_says_what_the_update_changed_as_its_schema_allows():
    c = rerun(held(), reason="rack move")
    update = tuple(u.to_dict() for u in c.hold_update)
    outcome = Outcome("p", WriteOutcome.CHANGED, generation=4, note=change_note(c), hold_update=update)
    assert outcome.to_dict()["holdUpdate"] == [{"field": "reason", "from": "kernel", "to": "rack move"}]
    planned = Planned("p", True, True, False, True, ("ann",), change_note(c, planned=True), update)
    schema = validator("ProviderDrainReport").schema
    outcome_schema = {"$defs": schema["$defs"], "$ref": "#/$defs/outcome"}
    plan_schema = {"$defs": schema["$defs"], **schema["properties"]["plan"]["items"]}
    assert not list(Draft202012Validator(outcome_schema).iter_errors(outcome.to_dict()))
    assert not list(Draft202012Validator(plan_schema).iter_errors(planned.to_dict()))
    assert "holdUpdate" not in Outcome("p", WriteOutcome.CHANGED).to_dict()
