"""Installing the AGN CRDs into a cluster and waiting until they are Established."""

from __future__ import annotations

import time
from pathlib import Path

import yaml

from agn.kube import Kube
from xtask.errors import XtaskError
from xtask.state import REPO_ROOT

CRD_DIR = REPO_ROOT / "manifests" / "crds"


def crd_documents(folder: Path = CRD_DIR) -> list[dict]:
    docs: list[dict] = []
    for path in sorted(folder.glob("*.yaml")):
        docs.extend(d for d in yaml.safe_load_all(path.read_text()) if d)
    return docs


def install_crds(kube: Kube, *, timeout: float = 60.0) -> list[str]:
    """Server-side apply every CRD, then wait for each to be Established. Returns their names."""
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
    return names
