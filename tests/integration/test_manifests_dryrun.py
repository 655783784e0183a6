"""Every rendered manifest is valid against the real API server (server-side apply, dryRun=All).

The ``control_plane`` fixture installed the CRDs; each test renders into its own namespace,
which exists for real because dry-run of a namespaced object needs its namespace.
"""

from __future__ import annotations

import copy

import pytest

from agn.kube import CONSUMERS, PROVIDERS, Invalid
from xtask.crds import crd_documents
from xtask.envdef import load_env
from xtask.manifests import render

pytestmark = pytest.mark.integration


def test_every_rendered_object_passes_server_side_dry_run(kube, namespace):
    objects = render(load_env("example"), namespace=namespace)
    kinds = set()
    for obj in crd_documents() + objects:
        answer = kube.apply(obj, dry_run=True)
        assert (answer["kind"], answer["metadata"]["name"]) == (obj["kind"], obj["metadata"]["name"])
        kinds.add(obj["kind"])
    assert kinds >= {
        "CustomResourceDefinition",
        "Namespace",
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "Service",
        "Deployment",
        "InferenceNetwork",
        "InferenceConsumer",
        "InferenceProvider",
    }
    # A dry run stores nothing.
    assert kube.list(PROVIDERS, namespace)[0] == [] and kube.list(CONSUMERS, namespace)[0] == []


def test_dry_run_really_validates(kube, namespace):
    """The check above can fail: a broken object from the same renderer is rejected."""
    objects = render(load_env("example"), namespace=namespace)
    deployment = copy.deepcopy(next(o for o in objects if o["kind"] == "Deployment"))
    deployment["spec"]["selector"]["matchLabels"] = {"app.kubernetes.io/name": "something-else"}
    with pytest.raises(Invalid, match="selector"):
        kube.apply(deployment, dry_run=True)
    provider = copy.deepcopy(next(o for o in objects if o["kind"] == "InferenceProvider"))
    del provider["spec"]["endpoint"]
    with pytest.raises(Invalid, match="endpoint"):
        kube.apply(provider, dry_run=True)
