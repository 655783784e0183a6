"""A CRD is waited for until the API server serves it (xtask/crds.py wait_served), not only until it
is Established: right after Established a LIST of the new resource is answered 429 "storage is
(re)initializing" nearly every time, and the next step of a bring-up (the env's objects, the
operator's and gateways' first lists) would fail on it. And the CRD step's requests reach a
kube-apiserver: the embedded control plane never puts it on one of etcd's ports."""

from __future__ import annotations

import copy
import json
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
            kube.delete_object(CRDS, "CustomResourceDefinition", doc["metadata"]["name"])


def test_a_crd_never_served_is_an_error_naming_it_and_what_it_answered(kube, namespace):
    missing = fresh_crd()  # never applied
    with pytest.raises(XtaskError) as failed:
        wait_served(kube, [missing], namespace=namespace, timeout=1)
    assert str(failed.value) == f"CRDs not served after 1s: {missing['metadata']['name']}: not Established"


def test_a_control_plane_recorded_with_kube_apiserver_on_etcds_port_starts_and_serves(control_plane, tmp_path):
    """Issue #42's 'error: Not Found': with kube-apiserver's port equal to etcd's client port, etcd
    answered kube-apiserver's /readyz (same CA), kube-apiserver could not bind, and the CRD step's
    first request got etcd's bare 404. Such a record now gets kube-apiserver a port of its own."""
    from agn import kubeconfig
    from agn.kube import Kube
    from xtask.crds import install_crds
    from xtask.runtime.controlplane import ControlPlane, free_port

    etcd, peer = free_port(), free_port()
    state = tmp_path / "cp"
    state.mkdir()
    (state / "controlplane.json").write_text(json.dumps({"etcd_client": etcd, "etcd_peer": peer, "apiserver": etcd}))
    cp = ControlPlane(state, control_plane.assets)
    try:
        cp.start()
        ports = cp.ports()
        assert ports is not None and ports.apiserver not in (etcd, peer)
        kubeconfig.add_context(state / "kubeconfig", cp.admin_context("ports", namespace="default"))
        kube = Kube.from_kubeconfig(kubeconfig=str(state / "kubeconfig"), context="ports", field_manager="t")
        try:
            assert len(install_crds(kube)) == len(crd_documents())
        finally:
            kube.close()
    finally:
        assert cp.stop() == []
