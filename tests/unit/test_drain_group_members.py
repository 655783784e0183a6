"""Reading the members of a drain's selection groups (:mod:`xtask.drain.edges.members`): the
field selector's escaping and when the whole fleet is read instead. The API server's own
answers to these selectors are in tests/integration/test_single_drain_requests.py."""

from __future__ import annotations

import pytest

from agn.kube import PROVIDERS, KubeError
from xtask.drain.core.guard import group_of
from xtask.drain.edges.members import MAX_GROUP_READS, field_value, read_members


def provider(name: str, group: str | None) -> dict:
    spec = {"endpoint": "http://127.0.0.1:1"} | ({"selectionGroup": group} if group is not None else {})
    return {"metadata": {"name": name}, "spec": spec}


FLEET = [provider("a1", "a"), provider("b1", "b"), provider("a2", "a"), provider("n1", None), provider("c1", "c")]


class Lister:
    """Answers LISTs of providers from FLEET as a server with (or without) the selectable field would."""

    def __init__(self, *, selectable: bool = True, stale: bool = False) -> None:
        self.selectable, self.stale = selectable, stale
        self.selectors: list[str | None] = []

    def list(self, res, namespace, *, label_selector=None, field_selector=None):
        assert res is PROVIDERS and label_selector is None
        self.selectors.append(field_selector)
        if field_selector is None:
            return sorted(FLEET, key=lambda p: p["metadata"]["name"]), "1"
        if not self.selectable:
            raise KubeError("field label not supported: spec.selectionGroup", status=400)
        if self.stale:  # a server still serving the CRD as before: an unknown field's value is ""
            return [p for p in FLEET if field_selector == "spec.selectionGroup="], "1"
        value = field_selector.removeprefix("spec.selectionGroup=")
        return [p for p in FLEET if field_value(group_of(p)) == value], "1"


def names(items) -> list[str]:
    return [p["metadata"]["name"] for p in items]


def test_one_list_per_group_sorted_by_name():
    kube = Lister()
    assert names(read_members(kube, "ns", {"a2": "a", "c1": "c"})) == ["a1", "a2", "c1"]
    assert kube.selectors == ["spec.selectionGroup=a", "spec.selectionGroup=c"]


def test_a_provider_without_a_group_is_in_the_empty_group():
    assert names(read_members(Lister(), "ns", {"n1": ""})) == ["n1"]


@pytest.mark.parametrize(
    "lister",
    [Lister(selectable=False), Lister(stale=True)],
    ids=["field not selectable (400)", "selector lagging a CRD update"],
)
def test_the_whole_fleet_when_the_group_read_cannot_be_trusted(lister):
    assert names(read_members(lister, "ns", {"a1": "a"})) == names(sorted(FLEET, key=lambda p: p["metadata"]["name"]))
    assert lister.selectors[-1] is None


def test_a_provider_that_moved_group_gets_the_whole_fleet():
    kube = Lister()
    assert len(read_members(kube, "ns", {"a1": "b"})) == len(FLEET)
    assert kube.selectors == ["spec.selectionGroup=b", None]


def test_many_groups_are_one_list():
    kube = Lister()
    scope = {f"p{i}": f"g{i}" for i in range(MAX_GROUP_READS + 1)}
    read_members(kube, "ns", scope)
    assert kube.selectors == [None]


def test_other_errors_are_not_hidden():
    class Failing(Lister):
        def list(self, res, namespace, **kwargs):
            raise KubeError("forbidden", status=403)

    with pytest.raises(KubeError):
        read_members(Failing(), "ns", {"a1": "a"})


@pytest.mark.parametrize(("text", "escaped"), [("a,b", "a\\,b"), ("a=b", "a\\=b"), ("a\\b", "a\\\\b"), ("", "")])
def test_field_values_are_escaped_as_kubernetes_does(text, escaped):
    assert field_value(text) == escaped
