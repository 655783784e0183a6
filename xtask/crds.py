"""Installing the AGN CRDs into a cluster, waiting until they are Established, and the
admission policy that keeps drain holds to their owners (``manifests/policy/``) beside them."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml

from agn.kube import Kube
from xtask.errors import XtaskError
from xtask.resources import data_dir

CRD_DIR = data_dir("manifests") / "crds"
POLICY_DIR = data_dir("manifests") / "policy"


def crd_documents(folder: Path = CRD_DIR) -> list[dict]:
    docs: list[dict] = []
    for path in sorted(folder.glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def policy_documents() -> list[dict]:
    """The ValidatingAdmissionPolicies and their bindings (cluster-scoped, like the CRDs)."""
    return crd_documents(POLICY_DIR)


def install_crds(kube: Kube, *, timeout: float = 60.0) -> list[str]:
    """Server-side apply every CRD, wait for each to be Established, then apply the admission
    policies and their bindings. Returns the CRDs' names."""
    names = []
    for doc in crd_documents():
        kube.apply(doc)
        names.append(doc["metadata"]["name"])
    deadline = time.monotonic() + timeout
    pending = list(names)
    while pending:
        pending = [n for n in pending if not kube.crd_established(n)]
        if not pending:
            break
        if time.monotonic() > deadline:
            raise XtaskError(f"CRDs not Established after {timeout:.0f}s: {', '.join(pending)}")
        time.sleep(0.1)
    for doc in policy_documents():
        kube.apply(doc)
    return names


def spec_default(kind: str, field: str, *, folder: Path = CRD_DIR) -> Any:
    """The default the CRD of ``kind`` gives ``spec.<field>`` in its storage version (None: none),
    for checks made before the API server would fill it in."""
    for doc in crd_documents(folder):
        if doc["spec"]["names"]["kind"] != kind:
            continue
        version = next(v for v in doc["spec"]["versions"] if v.get("storage"))
        spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
        return spec["properties"].get(field, {}).get("default")
    raise XtaskError(f"no CRD of kind {kind} in {folder}")
