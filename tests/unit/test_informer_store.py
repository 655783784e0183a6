"""The informer's Store: copies where callers may write, memoized views where a batch reads all."""

from __future__ import annotations

from agn.operator.informer import Store


def obj(name: str, rv: int, drain: bool = False) -> dict:
    return {"metadata": {"name": name, "resourceVersion": str(rv)}, "spec": {"drain": drain}}


def test_derived_views_are_computed_once_per_stored_version():
    store = Store()
    store.replace([obj(f"p{i}", 1) for i in range(100)])
    calls: list[str] = []

    def view(o: dict) -> tuple[str, bool]:
        calls.append(o["metadata"]["name"])
        return (o["metadata"]["name"], o["spec"]["drain"])

    assert len(store.derived(view)) == 100 and len(calls) == 100
    calls.clear()
    assert len(store.derived(view)) == 100
    assert calls == []  # nothing changed: nothing recomputed
    store.upsert(obj("p7", 2, drain=True))
    views = store.derived(view)
    assert calls == ["p7"]
    assert ("p7", True) in views and ("p7", False) not in views
    store.remove("p8")
    calls.clear()
    views = store.derived(view)
    assert calls == [] and len(views) == 99 and all(v[0] != "p8" for v in views)
    store.upsert(obj("p8", 3))
    assert ("p8", False) in store.derived(view) and calls == ["p8"]  # not the memo of the removed one


def test_get_and_list_hand_out_copies_peek_does_not():
    store = Store()
    store.upsert(obj("p", 1))
    store.get("p")["spec"]["drain"] = True
    store.list()[0]["spec"]["drain"] = True
    assert store.peek("p")["spec"]["drain"] is False
    assert store.peek("p") is store.peek("p")
    assert store.peek("missing") is None
    assert store.peek_all() == [store.peek("p")] and store.peek_all()[0] is store.peek("p")


def test_membership_version_moves_on_added_and_removed_names_only():
    store = Store()
    v0 = store.version()
    store.replace([obj("a", 1), obj("b", 1)])
    v1 = store.version()
    assert v1 != v0 and store.membership() == (v1, frozenset({"a", "b"}))
    store.upsert(obj("a", 2, drain=True))  # an update (a status write): same names
    store.upsert(obj("b", 0))  # older than the stored one: ignored
    store.replace([obj("b", 3), obj("a", 3)])  # a re-list holding the same names
    store.remove("missing")
    assert store.version() == v1
    store.upsert(obj("c", 1))
    v2 = store.version()
    assert v2 != v1 and "c" in store
    store.remove("a")
    v3 = store.version()
    assert v3 not in (v1, v2) and "a" not in store
    store.replace([obj("b", 4), obj("d", 1)])  # a re-list with other names
    assert store.version() != v3 and store.membership()[1] == frozenset({"b", "d"})


def test_the_store_keeps_no_managed_fields_and_leaves_the_given_object_alone():
    store = Store()
    listed = obj("p1", 1)
    listed["metadata"]["managedFields"] = [{"manager": "bench", "fieldsV1": {"f:spec": {}}}]
    store.replace([listed])
    assert "managedFields" not in store.peek("p1")["metadata"]
    assert store.peek("p1")["spec"] == {"drain": False}
    written = obj("p1", 2, drain=True)
    written["metadata"]["managedFields"] = [{"manager": "agn-operator"}]
    store.upsert(written)  # a write's response, stored by its writer
    assert store.peek("p1")["metadata"] == {"name": "p1", "resourceVersion": "2"}
    assert written["metadata"]["managedFields"] == [{"manager": "agn-operator"}]  # the caller's dict unchanged


def test_objects_decoded_apart_share_their_key_strings_in_the_store():
    import json

    store = Store()
    a, b = (json.loads(json.dumps(obj(n, 1))) for n in ("p1", "p2"))  # two watch events: two decodes
    ka = next(k for k in a["spec"] if k == "drain")
    kb = next(k for k in b["spec"] if k == "drain")
    assert ka is not kb  # what the decoder hands over
    store.upsert(a)
    store.upsert(b)
    (sa,), (sb,) = store.peek("p1")["spec"].keys(), store.peek("p2")["spec"].keys()
    assert sa is sb


def test_a_relist_is_consumed_so_the_caller_keeps_no_second_copy_and_order_is_kept():
    store = Store()
    listed = [obj("b", 1), obj("a", 1), obj("c", 1)]
    store.replace(listed)
    assert listed == []  # the watch loop's list lets go of every decoded object
    assert [o["metadata"]["name"] for o in store.peek_all()] == ["b", "a", "c"]
