"""Drain holders, the pure part: hold keys and values, parsing, the plan of one provider's holds,
the patches and restoration decisions they lead to, the journal's record of them, the request's
checks, and the rows of ``env drains``."""

from __future__ import annotations

import datetime as dt
import json
import re

import click
import pytest
from rich.console import Console

from xtask.cli.env.drains import render_table
from xtask.drain.core.changes import (
    BY,
    OPERATION,
    REASON,
    RestoreDecision,
    drain_patch,
    plan_changes,
    replan,
    restore_decision,
    restore_patch,
)
from xtask.drain.core.holds import (
    HOLD_PREFIX,
    MAX_EXPIRES_SECONDS,
    drain_entries,
    expired,
    hold_change,
    hold_key,
    hold_value,
    holder_problem,
    holds_of,
    owner_key,
    ticket_problem,
)
from xtask.drain.core.request import DrainRequest
from xtask.drain.core.selection import Selector
from xtask.drain.edges.journal import Journal, JournalHeader, read_journal
from xtask.errors import UsageError
from xtask.params import DurationType

T0 = dt.datetime(2026, 12, 4, 10, 0, 0, tzinfo=dt.UTC)
A, B = "ann@host-a", "bob@host-b"
KA, KB = hold_key(A), hold_key(B)


def hold(holder: str, *, op: str = "op-x", expires_in: int | None = None, since=T0) -> str:
    return hold_value(holder=holder, reason="r", ticket=None, since=since, expires_in=expires_in, operation=op)


def prov(name="p", *, drain=None, holds=None, extra=None, gen=1, rv="1") -> dict:
    annotations = {**(extra or {}), **(holds or {})}
    spec: dict = {"endpoint": "http://127.0.0.1/x", "providerGateway": "gw"}
    if drain is not None:
        spec["trafficPolicy"] = {"drain": drain}
    return {
        "metadata": {"name": name, "generation": gen, "resourceVersion": rv, "annotations": annotations},
        "spec": spec,
    }


class TestKeysAndValues:
    @pytest.mark.parametrize("holder", [A, "ANN@HOST-A", "x" * 128, "éé", "-", "a b/c:d", "ops team (night)"])
    def test_key_is_an_annotation_key_with_a_dns_label_name(self, holder):
        key = hold_key(holder)
        assert key.startswith(HOLD_PREFIX)
        name = key[len(HOLD_PREFIX) :]
        assert len(name) <= 63 and re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name)

    def test_alike_holders_get_distinct_keys(self):
        assert hold_key("Ann@x") != hold_key("ann@x")
        assert hold_key("a" * 100 + "1") != hold_key("a" * 100 + "2")  # same readable prefix
        assert hold_key(A) == hold_key(A)

    def test_value_is_compact_json_with_every_field(self):
        text = hold_value(holder=A, reason="kernel", ticket="CHG-1", since=T0, expires_in=1800, operation="op-1")
        assert " " not in text
        assert json.loads(text) == {
            "holder": A,
            "reason": "kernel",
            "ticket": "CHG-1",
            "since": "2026-12-04T10:00:00Z",
            "expiresAt": "2026-12-04T10:30:00Z",
            "operation": "op-1",
        }
        assert json.loads(hold(A))["expiresAt"] is None

    def test_holds_of_sorted_by_holder_and_unreadable_reported(self):
        obj = prov(holds={KB: hold(B), KA: hold(A), HOLD_PREFIX + "junk": "{not json", HOLD_PREFIX + "x": '{"a":1}'})
        obj["metadata"]["annotations"]["other.example/k"] = "v"
        got = holds_of(obj)
        assert [h["holder"] for h in got] == [A, B, None, None]
        assert got[2] == {"holder": None, "key": HOLD_PREFIX + "junk", "owner": None, "invalid": True}
        assert got[3]["invalid"] and got[3]["key"] == HOLD_PREFIX + "x"
        assert holds_of({"metadata": {}}) == []

    def test_expired(self):
        (h,) = holds_of(prov(holds={KA: hold(A, expires_in=60)}))
        assert not expired(h, T0 + dt.timedelta(seconds=59))
        assert expired(h, T0 + dt.timedelta(seconds=60))
        (never,) = holds_of(prov(holds={KA: hold(A)}))
        assert not expired(never, T0 + dt.timedelta(days=10_000))


class TestInputs:
    @pytest.mark.parametrize(
        "value, problem",
        [
            ("", "is empty"),
            ("   ", "is empty"),
            ("a\x1bb", "not printable"),
            ("a\nb", "not printable"),
            ("x" * 129, "longer than 128"),
            (" ann", "starts or ends with a space"),
        ],
    )
    def test_bad_holders(self, value, problem):
        assert problem in (holder_problem(value) or "")

    def test_good_holder_and_ticket(self):
        assert holder_problem("ann@host (on call)") is None
        assert ticket_problem("JIRA-123") is None
        assert "not printable" in ticket_problem("a\tb")
        assert "longer" in ticket_problem("t" * 200)

    # --expires-in's type, as drain_options.py declares it (xtask/durations.py parses every time flag)
    EXPIRES_IN = DurationType(maximum=MAX_EXPIRES_SECONDS, whole=True)

    @pytest.mark.parametrize(
        "text, seconds", [("90", 90), ("90s", 90), ("30m", 1800), ("1.5h", 5400), ("2h", 7200), ("1d", 86400)]
    )
    def test_durations(self, text, seconds):
        assert self.EXPIRES_IN.convert(text, None, None) == seconds

    @pytest.mark.parametrize(
        "text, why",
        [
            ("0", "not a positive duration"),
            ("0m", "not a positive duration"),
            ("-5", "negative duration"),
            ("2.5", "not a whole number of seconds"),
            ("nan", "not a duration"),
            ("2w", "not a duration"),
            ("", "not a duration"),
            ("400d", "longer than 366 days"),
            (str(MAX_EXPIRES_SECONDS + 1), "longer than"),
        ],
    )
    def test_bad_durations_name_the_value(self, text, why):
        with pytest.raises(click.BadParameter, match=re.escape(why)) as exc:
            self.EXPIRES_IN.convert(text, None, None)
        assert repr(text) in str(exc.value)

    def test_request_checks(self):
        sel = Selector(provider="p")
        with pytest.raises(UsageError, match="--release-all"):
            DrainRequest(selector=sel, drain=True, release_all=True)
        with pytest.raises(UsageError, match="--ticket"):
            DrainRequest(selector=sel, drain=False, ticket="T-1")
        with pytest.raises(UsageError, match="--expires-in"):
            DrainRequest(selector=sel, drain=False, expires_in=60)
        with pytest.raises(UsageError, match=r"--holder 'a\\x1bb'"):
            DrainRequest(selector=sel, drain=True, holder="a\x1bb")
        with pytest.raises(UsageError, match="--expires-in must be"):
            DrainRequest(selector=sel, drain=True, expires_in=0)
        assert DrainRequest(selector=sel, drain=True, holder="me").hold_holder == "me"
        assert "@" in DrainRequest(selector=sel, drain=True).hold_holder  # user@host by default
        DrainRequest(selector=sel, drain=False, release_all=True)


class TestPlanHold:
    def test_drain_adds_the_callers_hold_and_a_rerun_changes_nothing(self):
        assert hold_change({}, drained=False, drain=True, key=KA).writes == {KA: True}
        assert hold_change({KA: hold(A)}, drained=True, drain=True, key=KA).writes == {}
        # A hold left on a provider someone undrained by hand: drained again, hold written anew.
        assert hold_change({KA: hold(A)}, drained=False, drain=True, key=KA).writes == {KA: True}

    def test_second_holder_adds_its_hold_only(self):
        plan = hold_change({KA: hold(A)}, drained=True, drain=True, key=KB)
        assert plan.writes == {KB: True} and plan.others == (KA,) and not plan.keep_drain

    def test_undrain_releases_only_the_callers_hold_and_keeps_the_drain_for_others(self):
        both = {KA: hold(A), KB: hold(B)}
        plan = hold_change(both, drained=True, drain=False, key=KA)
        assert plan.writes == {KA: False} and plan.keep_drain and plan.others == (KB,)
        last = hold_change({KB: hold(B)}, drained=True, drain=False, key=KB)
        assert last.writes == {KB: False} and not last.keep_drain

    def test_undrain_by_a_non_holder_keeps_a_held_drain(self):
        plan = hold_change({KB: hold(B)}, drained=True, drain=False, key=KA)
        assert plan.writes == {} and plan.keep_drain

    def test_undrain_without_any_hold_clears(self):
        plan = hold_change({"agn.dev/drain-reason": "x"}, drained=True, drain=False, key=KA)
        assert plan.writes == {} and not plan.keep_drain

    def test_release_all(self):
        plan = hold_change({KA: hold(A), KB: hold(B)}, drained=True, drain=False, key=KA, release_all=True)
        assert plan.writes == {KA: False, KB: False} and not plan.keep_drain


class TestPatches:
    def patch(self, change, op="op-1"):
        return drain_patch(change, operation=op, actor="me@h", at="t", reason="why", hold=hold(A, op=op), owner=A)

    def test_first_drain_sets_flag_annotations_and_hold_conditionally(self):
        (c,) = plan_changes([prov(rv="42")], requested=True, hold_key=KA)
        patch = self.patch(c)
        assert patch["spec"] == {"trafficPolicy": {"drain": True}}
        assert patch["metadata"]["resourceVersion"] == "42"
        ann = patch["metadata"]["annotations"]
        assert ann[REASON] == "why" and ann[OPERATION] == "op-1" and json.loads(ann[KA])["holder"] == A

    def test_second_holder_writes_only_its_hold(self):
        (c,) = plan_changes([prov(drain=True, holds={KB: hold(B)})], requested=True, hold_key=KA)
        patch = self.patch(c)
        assert "spec" not in patch
        assert set(patch["metadata"]["annotations"]) == {KA, owner_key(KA)}
        assert patch["metadata"]["annotations"][owner_key(KA)] == A

    def test_rerun_is_already(self):
        (c,) = plan_changes([prov(drain=True, holds={KA: hold(A)})], requested=True, hold_key=KA)
        assert c.already and c.target

    def test_undrain_with_another_holder_removes_only_the_hold(self):
        (c,) = plan_changes([prov(drain=True, holds={KA: hold(A), KB: hold(B)})], requested=False, hold_key=KA)
        assert c.keep_drain and c.target and not c.already
        patch = self.patch(c)
        assert "spec" not in patch and patch["metadata"]["annotations"] == {KA: None, owner_key(KA): None}

    def test_last_undrain_clears(self):
        (c,) = plan_changes([prov(drain=True, holds={KA: hold(A)})], requested=False, hold_key=KA)
        patch = self.patch(c)
        assert patch["spec"] == {"trafficPolicy": {"drain": False}}
        assert patch["metadata"]["annotations"][KA] is None and patch["metadata"]["annotations"][REASON] is None

    def test_release_all_removes_every_hold_and_clears(self):
        (c,) = plan_changes(
            [prov(drain=True, holds={KA: hold(A), KB: hold(B)})], requested=False, hold_key=KA, release_all=True
        )
        patch = self.patch(c)
        assert patch["spec"] == {"trafficPolicy": {"drain": False}}
        assert {KA: None, KB: None}.items() <= patch["metadata"]["annotations"].items()

    def test_replan_after_a_conflict_sees_the_other_holder(self):
        (c,) = plan_changes([prov(drain=False)], requested=True, hold_key=KA)
        assert c.flag_changes
        again = replan(c, prov(drain=True, holds={KB: hold(B)}, rv="2"))
        assert not again.flag_changes and again.hold_writes == {KA: True} and again.resource_version == "2"

    def test_adding_a_hold_needs_its_value(self):
        (c,) = plan_changes([prov()], requested=True, hold_key=KA)
        with pytest.raises(ValueError):
            drain_patch(c, operation="o", actor="a", at="t", reason=None)


class TestRestore:
    def decide(self, change, current, gen=2):
        return restore_decision(change, operation="op-1", written_generation=gen, current=current)

    def test_first_drain_restored_whole(self):
        (c,) = plan_changes([prov(drain=False)], requested=True, hold_key=KA)
        now = prov(drain=True, gen=2, holds={KA: hold(A, op="op-1")}, extra={OPERATION: "op-1"})
        assert self.decide(c, now) is RestoreDecision.RESTORE
        patch = restore_patch(c, resource_version="5")
        assert patch["spec"] == {"trafficPolicy": {"drain": False}} and patch["metadata"]["annotations"][KA] is None

    def test_flag_we_set_stays_when_another_holder_joined(self):
        (c,) = plan_changes([prov(drain=False)], requested=True, hold_key=KA)
        now = prov(drain=True, gen=2, holds={KA: hold(A, op="op-1"), KB: hold(B)}, extra={OPERATION: "op-1"})
        assert self.decide(c, now) is RestoreDecision.RESTORE_HOLDS
        patch = restore_patch(c, resource_version="5", flag=False)
        assert "spec" not in patch and patch["metadata"]["annotations"] == {KA: None, owner_key(KA): None}

    def test_hold_only_drain_removes_just_our_hold(self):
        (c,) = plan_changes([prov(drain=True, holds={KB: hold(B)}, extra={BY: "bob"})], requested=True, hold_key=KA)
        now = prov(drain=True, holds={KA: hold(A, op="op-1"), KB: hold(B)}, extra={BY: "bob"})
        assert self.decide(c, now, gen=1) is RestoreDecision.RESTORE_HOLDS
        assert restore_patch(c, resource_version="5", flag=False)["metadata"]["annotations"] == {
            KA: None,
            owner_key(KA): None,
        }

    def test_hold_not_landed_is_already(self):
        (c,) = plan_changes([prov(drain=True, holds={KB: hold(B)})], requested=True, hold_key=KA)
        assert self.decide(c, prov(drain=True, holds={KB: hold(B)})) is RestoreDecision.ALREADY

    def test_our_hold_replaced_by_another_run_is_not_ours(self):
        (c,) = plan_changes([prov(drain=True, holds={KB: hold(B)})], requested=True, hold_key=KA)
        now = prov(drain=True, holds={KA: hold(A, op="op-2"), KB: hold(B)})
        assert self.decide(c, now) is RestoreDecision.OTHER_WRITER

    def test_released_hold_put_back_while_still_drained(self):
        before = {KA: hold(A, op="op-0"), owner_key(KA): A, KB: hold(B)}
        (c,) = plan_changes([prov(drain=True, holds=before)], requested=False, hold_key=KA)
        assert self.decide(c, prov(drain=True, holds={KB: hold(B)})) is RestoreDecision.RESTORE_HOLDS
        # The hold comes back with its owner annotation.
        assert restore_patch(c, resource_version="5", flag=False)["metadata"]["annotations"] == {
            KA: before[KA],
            owner_key(KA): A,
        }
        # Everyone released since and the drain is cleared: putting our hold back would not fit.
        assert self.decide(c, prov(drain=False)) is RestoreDecision.OTHER_WRITER


def test_journal_keeps_the_hold_plan(tmp_path):
    changes = plan_changes(
        [prov("a", drain=True, holds={KA: hold(A), KB: hold(B)}), prov("b", drain=True, holds={KA: hold(A)})],
        requested=False,
        hold_key=KA,
    )
    journal = Journal.create(
        JournalHeader(operation="op-1", context="ctx", namespace="ns", requested=False, changes=changes, reason=None),
        folder=tmp_path,
    )
    journal.intents(changes)
    journal.close()
    state = read_journal(journal.path)
    assert [state.entries[c.provider].change for c in changes] == changes
    assert [g for _, g in state.to_restore()] == [1, 2]  # a hold alone does not bump the generation


class TestDrainsList:
    def objs(self):
        return [
            prov("p-b", drain=True, holds={KA: hold(A, expires_in=60), KB: hold(B)}),
            prov("p-a", drain=True, extra={REASON: "legacy", BY: "old@host"}),
            prov("p-c", drain=False),
            prov("p-d", drain=False, holds={KB: hold(B)}),
        ]

    def test_entries(self):
        got = drain_entries(self.objs(), now=T0 + dt.timedelta(hours=1))
        assert [p["provider"] for p in got] == ["p-a", "p-b", "p-d"]
        assert got[0]["holds"] == [] and got[0]["drainedBy"] == "old@host" and got[0]["drainReason"] == "legacy"
        assert [(h["holder"], h["expired"]) for h in got[1]["holds"]] == [(A, True), (B, False)]
        assert got[2]["drain"] is False

    def test_expired_only(self):
        assert [p["provider"] for p in drain_entries(self.objs(), now=T0, expired_only=True)] == []
        later = drain_entries(self.objs(), now=T0 + dt.timedelta(minutes=2), expired_only=True)
        assert [p["provider"] for p in later] == ["p-b"]

    def test_table_escapes_hostile_values(self):
        evil = hold_value(
            holder="[red]x\x1b[2J", reason="r\u202e", ticket=None, since=T0, expires_in=None, operation="o"
        )
        data = {
            "namespace": "ns",
            "now": "t",
            "expiredOnly": False,
            "providers": drain_entries(
                [prov("p", drain=True, holds={hold_key("e"): evil, owner_key(hold_key("e")): "[b]eve\x1b[2J"})],
                now=T0,
            ),
        }
        con = Console(record=True, width=240, color_system=None)
        render_table(data, con)
        text = con.export_text()
        assert "[red]x\\x1b[2J" in text and "\x1b" not in text and "\u202e" not in text and "r\\u202e" in text
        assert "[b]eve\\x1b[2J" in text  # the owner annotation is data from the cluster too

    def test_table_names_the_owner_or_unknown(self):
        holds = {KA: hold(A), owner_key(KA): A, KB: hold(B)}  # B's hold written before holds had owners
        data = {
            "namespace": "ns",
            "now": "t",
            "expiredOnly": False,
            "providers": drain_entries([prov(drain=True, holds=holds)], now=T0),
        }
        con = Console(record=True, width=240, color_system=None)
        render_table(data, con)
        rows = [line for line in con.export_text().splitlines() if "host-" in line]
        assert len(rows) == 2 and A in rows[0] and "unknown" not in rows[0] and "unknown" in rows[1]
