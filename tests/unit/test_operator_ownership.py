"""Who owns an overlay (pure): the consumer's controller reference and the cleanup verdicts."""

from __future__ import annotations

from agn.operator.ownership import (
    Verdict,
    desired_owner_references,
    owner_reference,
    owner_references_current,
    verdict,
)


def consumer(name="c1", uid="uid-1"):
    return {"apiVersion": "agn.dev/v1alpha1", "kind": "InferenceConsumer", "metadata": {"name": name, "uid": uid}}


def overlay(name="c1", refs=None):
    meta = {"name": name, "uid": "overlay-uid"}
    if refs is not None:
        meta["ownerReferences"] = refs
    return {"metadata": meta, "spec": {}}


def test_owner_reference_names_the_consumer_as_controller_without_blocking_its_deletion():
    assert owner_reference(consumer()) == {
        "apiVersion": "agn.dev/v1alpha1",
        "kind": "InferenceConsumer",
        "name": "c1",
        "uid": "uid-1",
        "controller": True,
    }
    assert "blockOwnerDeletion" not in owner_reference(consumer())


def test_verdicts():
    ours = owner_reference(consumer())
    assert verdict(overlay(refs=[ours]), consumer()) is Verdict.OWNED
    assert verdict(overlay(refs=[ours]), None) is Verdict.ORPHAN
    assert verdict(overlay(), None) is Verdict.ORPHAN  # no consumer of that name: orphan, whatever its refs
    assert verdict(overlay(refs=[ours]), consumer(uid="uid-2")) is Verdict.STALE  # a new consumer, same name
    assert verdict(overlay(), consumer()) is Verdict.ADOPT  # written before overlays had owners
    assert verdict(overlay(refs=[{**ours, "controller": False}]), consumer()) is Verdict.ADOPT
    foreign = {"apiVersion": "example.com/v1", "kind": "Thing", "name": "t", "uid": "x", "controller": True}
    assert verdict(overlay(refs=[foreign]), consumer()) is Verdict.ADOPT


def test_desired_references_keep_other_owners_as_non_controllers_and_drop_old_consumers():
    other = {"apiVersion": "example.com/v1", "kind": "Thing", "name": "t", "uid": "x", "controller": True}
    old = owner_reference(consumer(uid="uid-0"))
    refs = desired_owner_references(overlay(refs=[other, old]), consumer())
    assert refs == [
        {"apiVersion": "example.com/v1", "kind": "Thing", "name": "t", "uid": "x"},
        owner_reference(consumer()),
    ]
    assert sum(1 for r in refs if r.get("controller")) == 1
    assert desired_owner_references(None, consumer()) == [owner_reference(consumer())]


def test_owner_references_current():
    assert owner_references_current(overlay(refs=[owner_reference(consumer())]), consumer())
    assert not owner_references_current(overlay(), consumer())
    assert not owner_references_current(overlay(refs=[owner_reference(consumer(uid="uid-0"))]), consumer())
