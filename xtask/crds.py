"""Installing the AGN CRDs into a cluster, waiting until the API server serves them (Established,
in discovery, their storage answering), and the admission policy that keeps drain holds to
their owners (``manifests/policy/``) beside them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from tenacity import RetryError, Retrying, retry_if_result, stop_after_delay, wait_fixed

from agn.kube import Kube, KubeError
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


def install_crds(kube: Kube, *, timeout: float = 60.0, namespace: str = "default") -> list[str]:
    """Server-side apply every CRD, wait until the API server serves each (:func:`wait_served`,
    listing in ``namespace``), then apply the admission policies and their bindings. Returns the
    CRDs' names."""
    docs = crd_documents()
    for doc in docs:
        kube.apply(doc)
    wait_served(kube, docs, namespace=namespace, timeout=timeout)
    for doc in policy_documents():
        kube.apply(doc)
    return [doc["metadata"]["name"] for doc in docs]


def wait_served(kube: Kube, docs: list[dict], *, namespace: str, timeout: float) -> None:
    """Return once every CRD of ``docs`` is served: Established, its kind listed by discovery, and
    a LIST of it in ``namespace`` answered. Established alone is not enough: for a moment after it
    discovery may not list the new group yet (the API server registers it asynchronously) and its
    REST storage may answer 429 "storage is (re)initializing" or a bare 404, so the next step's
    first request to the new resource would fail. Those answers are waited out, with a fresh
    discovery on each try; any other error is raised at once; past ``timeout`` the error names
    each CRD still waited for and its last answer."""
    last = {doc["metadata"]["name"]: "not checked" for doc in docs}
    pending = {doc["metadata"]["name"]: doc for doc in docs}

    def still_pending() -> bool:
        for name, doc in list(pending.items()):
            problem = _not_served(kube, doc, namespace)
            if problem is None:
                del pending[name]
            else:
                last[name] = problem
        return bool(pending)

    retrying = Retrying(stop=stop_after_delay(timeout), wait=wait_fixed(0.1), retry=retry_if_result(bool))
    try:
        retrying(still_pending)
    except RetryError:
        waited = "; ".join(f"{name}: {last[name]}" for name in pending)
        raise XtaskError(
            f"CRDs not served after {timeout:.0f}s: {waited}",
            hint="the API server may be overloaded; `env up` again waits anew",
        ) from None


# Answers that mean "not served yet" for a CRD just created: no handler for its path yet (404),
# its storage initializing (429), or the API server busy (503).
_NOT_YET = frozenset({404, 429, 503})


def _not_served(kube: Kube, doc: dict, namespace: str) -> str | None:
    """Why the CRD ``doc`` is not served yet (None: it is)."""
    if not kube.crd_established(doc["metadata"]["name"]):
        return "not Established"
    spec = doc["spec"]
    version = next(v["name"] for v in spec["versions"] if v.get("storage"))
    try:
        kube.list_objects(f"{spec['group']}/{version}", spec["names"]["kind"], namespace=namespace)
    except KubeError as exc:
        if exc.status not in _NOT_YET:
            raise
        return str(exc)
    return None


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
