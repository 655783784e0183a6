"""The chaos soak's checkers of I6 (the declared budget at every watch event) and I7 (holds
released only by their owner or a granted releaser) flag a real excess and a real foreign
release, and let pass what the soak causes on purpose (tests/harness/chaos_watch.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "harness"))

from chaos_watch import (  # noqa: E402
    OPERATION,
    AuditWrite,
    BudgetChecker,
    HoldChecker,
    Removal,
    removals,
    removed_holds,
)

from agn.holds import hold_id, hold_key, owner_key  # noqa: E402

NOW = 1_000_000.0
NETWORK = {"metadata": {"name": "production"}, "spec": {"disruptionBudget": {"maxUnavailable": 1}}}


def provider(name: str, *, drained: bool = False, op: str | None = None, healthy: bool = True, rv: int = 1) -> dict:
    ann = {OPERATION: op} if op else {}
    return {
        "metadata": {"name": name, "resourceVersion": str(rv), "annotations": ann},
        "spec": {
            "endpoint": f"http://127.0.0.1:9/{name}",
            "selectionGroup": "chat",
            "trafficPolicy": {"drain": drained},
        },
        "status": {
            "probe": {"healthy": healthy, "metricsObservedAt": "1970-01-12T13:46:40Z"},  # NOW
            "conditions": [{"type": "MetricsFresh", "status": "True"}],
        },
    }


def observe(checker: BudgetChecker, state: dict, now: float, changed: tuple | None = None) -> list[str]:
    return checker.observe(state, [NETWORK], NOW, now, changed)


def test_a_second_drain_write_over_the_budget_is_a_violation():
    checker = BudgetChecker(grace=3.0)
    one = provider("one", drained=True, op="op-1")
    state = {"one": one, "three": provider("three")}
    assert observe(checker, state, NOW, (provider("one"), one)) == []  # 1 of 2: within the budget
    three = provider("three", drained=True, op="op-2", rv=2)
    before, state["three"] = state["three"], three
    found = observe(checker, state, NOW + 0.5, (before, three))
    assert len(found) == 1 and "over its budget 1" in found[0], found


def test_a_restore_putting_back_an_older_operation_is_not_a_budgeted_write():
    checker = BudgetChecker()
    one = provider("one", drained=True, op="op-1")
    state = {"one": one, "three": provider("three", op="op-0")}
    observe(checker, state, NOW, (provider("one"), one))
    three = provider("three", drained=True, op="op-0", rv=2)  # drain-restore of an undrain
    before, state["three"] = state["three"], three
    assert observe(checker, state, NOW, (before, three)) == []
    assert checker.above_budget == 1


def test_a_failure_counts_against_a_drain_only_once_it_has_lasted_the_grace():
    for failed_for, flagged in ((1.0, False), (5.0, True)):
        checker = BudgetChecker(grace=3.0)
        state = {"one": provider("one", healthy=False), "three": provider("three")}
        observe(checker, state, NOW)  # one is out for a hard failure from here
        three = provider("three", drained=True, op="op-9", rv=2)
        before, state["three"] = state["three"], three
        found = observe(checker, state, NOW + failed_for, (before, three))
        assert bool(found) is flagged, (failed_for, found)
        assert checker.excused == ({} if flagged else {"a failure younger than 3 s": 1})


def holds(**owners: str) -> dict:
    ann = {}
    for user in owners.values():
        ann[hold_key(user)] = '{"holder":"x"}'
        ann[owner_key(hold_key(user))] = user
    return {"metadata": {"name": "one", "resourceVersion": "5", "annotations": ann}}


def test_a_hold_removed_by_someone_else_than_its_owner_is_a_violation():
    before, after = holds(a="agn-admin", b="bob"), holds(b="bob")
    after["metadata"]["resourceVersion"] = "7"
    seen = removals(before, after, NOW)
    assert seen == [Removal("one", hold_id("agn-admin"), "agn-admin", 5, 7, NOW)]
    patch = {"metadata": {"annotations": {hold_key("agn-admin"): None, owner_key(hold_key("agn-admin")): None}}}
    removed = removed_holds("patch", patch, None)
    assert removed == {hold_id("agn-admin")}
    checker = HoldChecker({hold_id(u): u for u in ("agn-admin", "bob")}, releasers=["agn-admin"])
    problems, figures = checker.check(seen, [AuditWrite("one", "bob", 7, removed)])
    assert len(problems) == 2 and all("bob removed hold" in p for p in problems), problems  # audit and watch
    assert checker.check(seen, [AuditWrite("one", "agn-admin", 7, removed)])[0] == []  # its owner
    problems, figures = checker.check(seen, [])
    assert problems == [] and figures["unattributed"] == 1


def test_a_granted_releaser_may_remove_any_hold():
    checker = HoldChecker({hold_id("bob"): "bob"}, releasers=["agn-admin"])
    write = AuditWrite("one", "agn-admin", 9, frozenset({hold_id("bob")}))
    assert checker.check([Removal("one", hold_id("bob"), "bob", 8, 9, NOW)], [write])[0] == []


def test_draining_a_provider_already_out_for_a_failure_adds_nothing():
    """As budget.py: a run that drains only providers already counted is not refused."""
    checker = BudgetChecker(grace=3.0)
    state = {"one": provider("one", drained=True, op="op-1"), "three": provider("three", healthy=False)}
    observe(checker, state, NOW)  # 2 unavailable: one drained, three failed (the soak killed it)
    three = provider("three", drained=True, healthy=False, op="op-2", rv=2)
    before, state["three"] = state["three"], three
    assert observe(checker, state, NOW + 10, (before, three)) == []
    assert checker.excused == {"drained a provider already out": 1}
