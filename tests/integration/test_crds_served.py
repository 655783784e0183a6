"""A CRD is waited for until the API server serves it (xtask/crds.py wait_served), not only until it
is Established: right after Established a LIST of the new resource is answered 429 "storage is
(re)initializing" nearly every time, and the next step of a bring-up (the env's objects, the
operator's and gateways' first lists) would fail on it."""

from __future__ import annotations

import copy
import uuid

import pytest

from agn.kube import Resource
from xtask.crds import crd_documents, wait_served
from xtask.errors import XtaskError

pytestmark = pytest.mark.integration

CRDS = "apiextensions.k8s.io/v1"


def fresh_crd() -> dict:
    """The InferenceNetwork CRD in a group of its own: new to the API server, as on a first bring-up."""
    doc = copy.deepcopy(next(d for d in crd_documents() if d["spec"]["names"]["kind"] == "InferenceNetwork"))
    group = f"g{uuid.uuid4().hex[:8]}.test.agn.dev"
    doc["spec"]["group"] = group
    doc["metadata"] = {"name": f"{doc['spec']['names']['plural']}.{group}"}
    return doc


def test_a_crd_waited_for_is_served_at_once(kube, namespace):
    docs = [fresh_crd() for _ in range(5)]
    try:
        for doc in docs:
            kube.apply(doc)
            wait_served(kube, [doc], namespace=namespace, timeout=60)
            spec = doc["spec"]
            version = next(v["name"] for v in spec["versions"] if v.get("storage"))
            res = Resource(spec["names"]["kind"], spec["names"]["plural"], spec["group"], version)
            # At once, the requests a bring-up's next steps make: a LIST (served from the watch
            # cache) and an apply found through discovery.
            assert kube.list(res, namespace)[0] == []
            body = {"apiVersion": f"{spec['group']}/{version}", "kind": res.kind, "metadata": {"name": "n"}, "spec": {}}
            assert kube.apply(body, namespace=namespace)["metadata"]["name"] == "n"
    finally:
        for doc in docs:
            kube.delete_cluster_object(CRDS, "CustomResourceDefinition", doc["metadata"]["name"])


def test_a_crd_never_served_is_an_error_naming_it_and_what_it_answered(kube, namespace):
    missing = fresh_crd()  # never applied
    with pytest.raises(XtaskError) as failed:
        wait_served(kube, [missing], namespace=namespace, timeout=1)
    assert str(failed.value) == f"CRDs not served after 1s: {missing['metadata']['name']}: not Established"
